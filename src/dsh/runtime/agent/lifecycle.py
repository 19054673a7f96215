"""Lifecycle hooks as the agent fires them: each event bounded, each payload a copy.

Every part of the agent fires hooks (the session table ``session_start``, the turn runner
``before_turn``/``after_turn``, the compactor ``before_compact``/``on_compact``, closing
``session_end``), so the firing is written once here. The kernel's dispatcher bounds each
hook; this bounds the whole event by the agent's ``hook_budget_s`` and reports an overrun
as an ``error`` event on the session, so a slow hook never stalls a turn. An event whose
hooks are all inline (they only record: telemetry) needs no bound and gets none.

Each payload is copied for the hooks by :func:`copied`, which copies the JSON-like data
the agent's payloads are made of several times faster than ``copy.deepcopy`` (and shares
what cannot change), falling back to it for anything else.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from dsh.runtime.agent import events
from dsh.runtime.agent.session import Session
from dsh.runtime.kernel.hooks import BudgetExceededError, run_bounded
from dsh.runtime.kernel.plugin import RuntimeContext


class Lifecycle:
    """Fires ``rt``'s hooks within ``budget()`` seconds an event (read at every event, so a
    config update applies to the next one)."""

    def __init__(self, rt: RuntimeContext, budget: Callable[[], float]) -> None:
        self._rt = rt
        self._budget = budget

    async def fire(self, session: Session, event: str, *, turn: int | None = None,
                   step: int | None = None, message: Any = None, payload: Any = None,
                   attributes: Mapping[str, Any] | None = None) -> None:
        """Notify the hooks of ``event``; overrunning the budget is an ``error`` event.

        Hooks get a deep copy of ``payload``: they observe the agent's state, never share it.
        ``attributes`` are added to the event's (``turn`` is always there when given).
        """
        dispatcher = self._rt.hooks
        hooks = dispatcher.hooks(event)
        if not hooks:
            return
        emitted = dispatcher.emit(
            event, session_id=session.id, step=step, message=message,
            payload=copied(payload),
            attributes={**(attributes or {}), **({} if turn is None else {"turn": turn})})
        if dispatcher.inline(event):  # nothing to bound: no task, no turn of the loop
            await emitted
            return
        budget = self._budget()
        try:
            await run_bounded(emitted, budget)
        except BudgetExceededError:
            names = ", ".join(h.name for h in hooks)
            session.emit(events.ERROR, events.hook_error(
                f"hooks on {event} exceeded the agent's {float(budget)} s budget", names, event))


_ATOMS = frozenset({str, int, float, bool, type(None), bytes})


def copied(value: Any) -> Any:
    """A deep copy of ``value`` for hooks to keep: dicts and lists copied, strings,
    numbers and tuples of them shared (they cannot change), a tuple (a NamedTuple
    included) rebuilt only when something in it was copied; anything else through
    ``copy.deepcopy``. Payloads are trees (no cycles; a value met twice is copied twice).
    """
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {key: copied(item) for key, item in value.items()}
    if kind is list:
        return [copied(item) for item in value]
    if isinstance(value, tuple):
        items = [copied(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return kind(*items) if hasattr(kind, "_fields") else kind(items)
    return copy.deepcopy(value)
