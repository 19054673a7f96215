"""Lifecycle hooks as the agent fires them: each event bounded, each payload a copy.

Every part of the agent fires hooks (the session table ``session_start``, the turn runner
``before_turn``/``after_turn``, the compactor ``before_compact``/``on_compact``, closing
``session_end``), so the firing is written once here. The kernel's dispatcher bounds each
hook; this bounds the whole event by the agent's ``hook_budget_s`` and reports an overrun
as an ``error`` event on the session, so a slow hook never stalls a turn.
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
        budget = self._budget()
        try:
            await run_bounded(dispatcher.emit(
                event, session_id=session.id, step=step, message=message,
                payload=copy.deepcopy(payload),
                attributes={**(attributes or {}), **({} if turn is None else {"turn": turn})}),
                budget)
        except BudgetExceededError:
            names = ", ".join(h.name for h in hooks)
            session.emit(events.ERROR, events.hook_error(
                f"hooks on {event} exceeded the agent's {float(budget)} s budget", names, event))
