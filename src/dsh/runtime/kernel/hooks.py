"""Lifecycle hooks: the ten one-way events, their dispatch loop, and the dispatcher.

Hooks observe; they never steer (blocking belongs to :mod:`dsh.runtime.kernel.guardrails`). So a
hook can never stop or stall the agent: :func:`dispatch` isolates every call, turns an
exception into a :class:`HookError` record, and bounds every call by a time budget after
which the call is abandoned. ``dispatch`` holds no state, which is what lets it be tested
directly (pluggy's ``_callers`` habit); :class:`HookDispatcher` only adds the table of
registered hooks and the error listeners around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from dsh.core.errors import DshError

EVENTS: tuple[str, ...] = (
    "session_start",
    "session_end",
    "before_turn",
    "after_turn",
    "before_model_request",
    "after_model_response",
    "before_tool_call",
    "after_tool_call",
    "before_compact",
    "on_compact",
)
"""Every lifecycle event name, in the order a session meets them."""

DEFAULT_BUDGET = 2.0
"""Seconds one hook call may take before it is abandoned."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_T = TypeVar("_T")
logger = logging.getLogger("dsh.hooks")


class BudgetExceededError(DshError, TimeoutError):
    """:func:`run_bounded` gave up on an awaitable (distinct from a TimeoutError it raised)."""


@dataclass(frozen=True, slots=True)
class HookEvent:
    """One notification, shared read-only by every hook of its event.

    ``attributes`` is always an immutable mapping (a copy of what the emitter passed), so
    one hook cannot change what the next one sees.
    """

    type: str
    runtime: Any
    session_id: str | None = None
    step: int | None = None
    message: Any = None
    payload: Any = None
    attributes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        attributes = self.attributes
        if not isinstance(attributes, MappingProxyType):
            frozen = _EMPTY if attributes is None else MappingProxyType(dict(attributes))
            object.__setattr__(self, "attributes", frozen)


@dataclass(frozen=True, slots=True)
class Hook:
    """A registered hook: ``fn(event)``, sync or async, owned by the row ``row_id``.

    ``inline``: a plain function that only records in memory (telemetry's spans and
    metrics), called on the event loop as the event fires: no thread, no task, no budget.
    A hook in a worker thread or a bounded task costs tens of microseconds an event; an
    inline one costs its own work, and the row that declares it answers for that work
    never blocking (an exception is still reported, and the next hook runs).
    """

    row_id: str
    name: str
    event: str
    fn: Callable[[HookEvent], Any]
    inline: bool = False
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        # A plain async function, a partial of one, or an object with an async __call__.
        fn = self.fn
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__)
        object.__setattr__(self, "is_async", is_async)


class HookError(NamedTuple):
    """A hook call that raised or overran its budget; what error listeners receive.

    ``exception`` is None for an overrun. ``message`` names hook and event and is safe to
    show a user.
    """

    hook: str
    row_id: str
    event: str
    session_id: str | None
    message: str
    exception: BaseException | None = None


async def run_bounded(awaitable: Awaitable[_T], budget: float) -> _T:
    """Await ``awaitable`` for at most ``budget`` seconds, then cancel and abandon it.

    Unlike ``asyncio.wait_for`` this never waits for the cancellation to be honoured, so a
    coroutine that swallows ``CancelledError`` still cannot hold the caller. Raises
    :class:`BudgetExceededError` on overrun; the awaitable's own exceptions propagate.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=budget)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_consume)
        raise BudgetExceededError(f"gave up after {float(budget)} s")
    return task.result()


def _consume(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned task's outcome as retrieved so asyncio does not log it."""
    if not task.cancelled():
        task.exception()


def _in_thread(fn: Callable[[HookEvent], Any], event: HookEvent, name: str) -> asyncio.Future[Any]:
    """Run a sync hook in its own daemon thread so an overrun can be abandoned.

    A daemon thread rather than the loop's executor: an abandoned call must not keep the
    executor (and so ``asyncio.run``'s shutdown, or the interpreter's exit) waiting.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: Exception | None) -> None:
        if future.done():  # abandoned at the budget
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def work() -> None:
        try:
            outcome: tuple[Any, Exception | None] = (fn(event), None)
        except Exception as exc:
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed while we were abandoned
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name=f"dsh-hook-{name}", daemon=True).start()
    return future


async def _call(hook: Hook, event: HookEvent, budget: float) -> None:
    if hook.inline:
        if inspect.isawaitable(result := hook.fn(event)):
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError("an inline hook returned an awaitable; it must only record")
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    if hook.is_async:
        result = hook.fn(event)
    else:
        result = await run_bounded(_in_thread(hook.fn, event, hook.name), budget)
    if inspect.isawaitable(result):  # a sync callable that hands back a coroutine
        await run_bounded(result, max(deadline - loop.time(), 0.0))


async def dispatch(
    hooks: Iterable[Hook],
    event: HookEvent,
    *,
    budget: float,
    on_error: Callable[[HookError], None],
) -> None:
    """Call every hook registered for ``event.type``, in order, each isolated and bounded.

    A hook that raises, or runs past ``budget`` seconds (async hooks are cancelled, sync
    hooks run in a worker thread that is abandoned; inline hooks are called as they are),
    yields one :class:`HookError` to ``on_error`` and the next hook runs. Only
    cancellation of the caller propagates.
    """
    for hook in hooks:
        if hook.event != event.type:
            continue
        try:
            await _call(hook, event, budget)
        except BudgetExceededError:
            message = f"hook '{hook.name}' exceeded its {float(budget)} s budget on {event.type}"
            on_error(HookError(hook.name, hook.row_id, event.type, event.session_id, message))
        except Exception as exc:
            message = f"hook '{hook.name}' raised on {event.type}: {type(exc).__name__}: {exc}"
            on_error(
                HookError(hook.name, hook.row_id, event.type, event.session_id, message, exc)
            )


class HookDispatcher:
    """The runtime's hook table: ``emit`` an event, listen for hook errors.

    The kernel installs the hooks of running rows only (``set_hooks``), so a disabled or
    disposed plugin's hooks never run. Error listeners receive every :class:`HookError`;
    with no listener the error is logged to stderr instead.
    """

    def __init__(self, runtime: Any, *, budget: float = DEFAULT_BUDGET) -> None:
        if budget <= 0:
            raise ValueError(f"hook budget must be positive, got {budget}")
        self.runtime = runtime
        self.budget = budget
        self._table: dict[str, tuple[Hook, ...]] = {}
        self._listeners: list[Callable[[HookError], None]] = []

    def set_hooks(self, hooks: Iterable[Hook]) -> None:
        """Replace the hook table (kernel use); order within an event is kept."""
        table: dict[str, list[Hook]] = {}
        for hook in hooks:
            table.setdefault(hook.event, []).append(hook)
        self._table = {event: tuple(group) for event, group in table.items()}

    def hooks(self, event: str) -> tuple[Hook, ...]:
        """The hooks that will run for ``event``, in call order."""
        return self._table.get(event, ())

    def inline(self, event: str) -> bool:
        """Whether every hook of ``event`` is inline (then nothing can overrun a budget)."""
        return all(hook.inline for hook in self._table.get(event, ()))

    def add_error_listener(self, listener: Callable[[HookError], None]) -> Callable[[], None]:
        """Deliver every hook error to ``listener``; returns a function that removes it."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    async def emit(
        self,
        type: str,
        *,
        session_id: str | None = None,
        step: int | None = None,
        message: Any = None,
        payload: Any = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        """Notify every hook of ``type``; returns once each has finished or been abandoned.

        Raises ValueError for a name outside :data:`EVENTS` (a caller bug, not a hook's).
        """
        if type not in EVENTS:
            raise ValueError(f"unknown lifecycle event '{type}'")
        hooks = self._table.get(type)
        if not hooks:
            return
        event = HookEvent(type, self.runtime, session_id, step, message, payload,
                          _EMPTY if attributes is None else attributes)
        await dispatch(hooks, event, budget=self.budget, on_error=self._report)

    def _report(self, error: HookError) -> None:
        if not self._listeners:
            logger.warning("%s", error.message)
            return
        for listener in tuple(self._listeners):
            try:
                listener(error)
            except Exception:
                logger.exception("hook error listener failed on: %s", error.message)
