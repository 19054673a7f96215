"""The hook dispatch loop, tested directly, and the dispatcher around it."""

from __future__ import annotations

import asyncio
import functools
import threading
from types import MappingProxyType
from typing import Any

import pytest

from dsh.runtime.kernel.hooks import (
    EVENTS,
    BudgetExceededError,
    Hook,
    HookDispatcher,
    HookError,
    HookEvent,
    dispatch,
    run_bounded,
)

# Generous safety net: a regression must fail the test, not hang it. The tests assert that
# dispatch finishes and reports, never how fast.
NET = 30.0


def event(type: str = "before_turn", **fields: Any) -> HookEvent:
    return HookEvent(type, runtime="rt", **fields)


def run(hooks: list[Hook], ev: HookEvent, budget: float = 2.0) -> list[HookError]:
    errors: list[HookError] = []

    async def go() -> None:
        await asyncio.wait_for(dispatch(hooks, ev, budget=budget, on_error=errors.append), NET)

    asyncio.run(go())
    return errors


def test_ten_events() -> None:
    assert EVENTS == ("session_start", "session_end", "before_turn", "after_turn",
                      "before_model_request", "after_model_response", "before_tool_call",
                      "after_tool_call", "before_compact", "on_compact")


def test_event_attributes_are_an_immutable_copy() -> None:
    assert event().attributes == {}
    assert isinstance(event().attributes, MappingProxyType)
    assert event(attributes=None).attributes == {}
    source = {"k": 1}
    ev = event(attributes=source)
    source["k"] = 2
    assert ev.attributes == {"k": 1}
    with pytest.raises(TypeError):
        ev.attributes["k"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError):
        ev.step = 2  # type: ignore[misc]


def test_calls_sync_and_async_hooks_of_the_event_in_order() -> None:
    seen: list[tuple[str, Any]] = []

    def sync_hook(ev: HookEvent) -> None:
        seen.append(("sync", ev.session_id))

    async def async_hook(ev: HookEvent) -> None:
        seen.append(("async", ev.step))

    class Callable:
        async def __call__(self, ev: HookEvent) -> None:
            seen.append(("object", ev.type))

    async def with_tag(tag: str, ev: HookEvent) -> None:
        seen.append(("partial", tag))

    hooks = [
        Hook("r", "a", "before_turn", sync_hook),
        Hook("r", "other", "after_turn", sync_hook),
        Hook("r", "b", "before_turn", async_hook),
        Hook("r", "c", "before_turn", Callable()),
        Hook("r", "d", "before_turn", functools.partial(with_tag, "t")),
    ]
    assert run(hooks, event(session_id="s", step=3)) == []
    assert seen == [("sync", "s"), ("async", 3), ("object", "before_turn"), ("partial", "t")]
    assert [h.is_async for h in hooks] == [False, False, True, True, True]


def test_sync_hooks_run_off_the_event_loop_thread() -> None:
    threads: list[threading.Thread] = []
    run([Hook("r", "where", "before_turn", lambda ev: threads.append(threading.current_thread()))],
        event())
    assert threads and threads[0] is not threading.main_thread()


def test_raising_hook_is_isolated_and_reported() -> None:
    seen: list[str] = []

    def bad(ev: HookEvent) -> None:
        raise ValueError("boom")

    async def bad_async(ev: HookEvent) -> None:
        raise KeyError("k")

    hooks = [Hook("r1", "bad", "before_turn", bad), Hook("r2", "worse", "before_turn", bad_async),
             Hook("r3", "good", "before_turn", lambda ev: seen.append("good"))]
    errors = run(hooks, event(session_id="s9"))
    assert [e.message for e in errors] == [
        "hook 'bad' raised on before_turn: ValueError: boom",
        "hook 'worse' raised on before_turn: KeyError: 'k'",
    ]
    assert [(e.hook, e.row_id, e.event, e.session_id) for e in errors] == [
        ("bad", "r1", "before_turn", "s9"), ("worse", "r2", "before_turn", "s9")]
    assert isinstance(errors[0].exception, ValueError)
    assert seen == ["good"]


def test_hanging_async_hook_is_cancelled_at_the_budget() -> None:
    cancelled = []
    seen: list[str] = []

    async def hang(ev: HookEvent) -> None:
        try:
            await asyncio.sleep(NET * 2)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def after(ev: HookEvent) -> None:
        seen.append("next")

    hooks = [Hook("r", "hang", "before_turn", hang), Hook("r", "next", "before_turn", after)]
    errors = run(hooks, event(), budget=0.1)
    assert [e.message for e in errors] == ["hook 'hang' exceeded its 0.1 s budget on before_turn"]
    assert errors[0].exception is None
    assert seen == ["next"]
    assert cancelled == [True]


def test_async_hook_that_ignores_cancellation_is_abandoned() -> None:
    async def stubborn(ev: HookEvent) -> None:
        try:
            await asyncio.sleep(NET * 2)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # refuses to stop promptly, then gives up

    errors = run([Hook("r", "stubborn", "on_compact", stubborn)], event("on_compact"), 0.1)
    assert [e.message for e in errors] == [
        "hook 'stubborn' exceeded its 0.1 s budget on on_compact"]


def test_hanging_sync_hook_is_abandoned_at_the_budget() -> None:
    release = threading.Event()
    seen: list[str] = []

    async def after(ev: HookEvent) -> None:
        seen.append("next")

    hooks = [Hook("r", "block", "after_turn", lambda ev: release.wait(NET)),
             Hook("r", "next", "after_turn", after)]
    try:
        errors = run(hooks, event("after_turn"), budget=0.1)
    finally:
        release.set()
    assert [e.message for e in errors] == ["hook 'block' exceeded its 0.1 s budget on after_turn"]
    assert seen == ["next"]


def test_sync_callable_returning_a_coroutine_is_awaited() -> None:
    seen: list[str] = []

    async def body(ev: HookEvent) -> None:
        seen.append("awaited")

    assert run([Hook("r", "wrapped", "before_turn", lambda ev: body(ev))], event()) == []
    assert seen == ["awaited"]


def test_caller_cancellation_propagates() -> None:
    async def hang(ev: HookEvent) -> None:
        await asyncio.sleep(NET * 2)

    async def go() -> None:
        task = asyncio.ensure_future(
            dispatch([Hook("r", "h", "before_turn", hang)], event(), budget=NET,
                     on_error=lambda e: None))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_run_bounded_raises_budget_exceeded_not_the_awaitables_timeout() -> None:
    async def own_timeout() -> None:
        raise TimeoutError("mine")

    async def go() -> None:
        with pytest.raises(BudgetExceededError):
            await run_bounded(asyncio.sleep(NET), 0.05)
        with pytest.raises(TimeoutError, match="mine") as info:
            await run_bounded(own_timeout(), 1.0)
        assert not isinstance(info.value, BudgetExceededError)
        assert await run_bounded(asyncio.sleep(0, result=7), 1.0) == 7

    asyncio.run(go())


def test_dispatcher_emits_to_installed_hooks_and_reports_to_listeners() -> None:
    seen: list[HookEvent] = []
    dispatcher = HookDispatcher("the-runtime")
    dispatcher.set_hooks([Hook("r", "ok", "session_start", seen.append),
                          Hook("r", "bad", "session_start", lambda ev: 1 / 0)])
    errors: list[HookError] = []
    remove = dispatcher.add_error_listener(errors.append)

    async def go() -> None:
        await dispatcher.emit("session_start", session_id="s", attributes={"a": 1})
        await dispatcher.emit("session_end")  # nothing registered: returns at once
        remove()
        await dispatcher.emit("session_start")  # no listener: logged instead

    asyncio.run(go())
    assert [(ev.runtime, ev.session_id, dict(ev.attributes)) for ev in seen] == [
        ("the-runtime", "s", {"a": 1}), ("the-runtime", None, {})]
    assert [e.message for e in errors] == [
        "hook 'bad' raised on session_start: ZeroDivisionError: division by zero"]
    assert [h.name for h in dispatcher.hooks("session_start")] == ["ok", "bad"]


def test_failing_listener_does_not_break_dispatch() -> None:
    dispatcher = HookDispatcher(None)
    dispatcher.set_hooks([Hook("r", "bad", "after_turn", lambda ev: 1 / 0)])
    received: list[HookError] = []

    def broken(error: HookError) -> None:
        raise RuntimeError("listener bug")

    dispatcher.add_error_listener(broken)
    dispatcher.add_error_listener(received.append)
    asyncio.run(dispatcher.emit("after_turn"))
    assert len(received) == 1


def test_emit_rejects_unknown_event_and_bad_budget() -> None:
    with pytest.raises(ValueError, match="unknown lifecycle event 'before_lunch'"):
        asyncio.run(HookDispatcher(None).emit("before_lunch"))
    with pytest.raises(ValueError, match="budget must be positive"):
        HookDispatcher(None, budget=0)


def test_an_inline_hook_runs_on_the_loop_thread_at_once_and_its_faults_are_reported() -> None:
    seen: list[tuple[str, int]] = []

    def record(ev: HookEvent) -> None:
        seen.append((ev.type, threading.get_ident()))

    def broken(ev: HookEvent) -> None:
        raise RuntimeError("no")

    async def sneaky(ev: HookEvent) -> None:
        pass

    hooks = [Hook("r", "record", "before_turn", record, inline=True),
             Hook("r", "broken", "before_turn", broken, inline=True),
             Hook("r", "sneaky", "before_turn", lambda ev: sneaky(ev), inline=True),
             Hook("r", "after", "before_turn", record, inline=True)]
    errors: list[HookError] = []
    loop_thread: list[int] = []

    async def go() -> None:
        loop_thread.append(threading.get_ident())
        await dispatch(hooks, event(), budget=0.001, on_error=errors.append)

    asyncio.run(go())
    assert seen == [("before_turn", loop_thread[0])] * 2  # the next hook ran after a fault
    assert [(e.hook, type(e.exception).__name__) for e in errors] == [
        ("broken", "RuntimeError"), ("sneaky", "TypeError")]
    assert "must only record" in errors[1].message


def test_a_dispatcher_knows_when_every_hook_of_an_event_is_inline() -> None:
    dispatcher = HookDispatcher(runtime="rt")
    dispatcher.set_hooks([Hook("r", "a", "before_turn", print, inline=True),
                          Hook("r", "b", "after_turn", print, inline=True),
                          Hook("r", "c", "after_turn", print)])
    assert dispatcher.inline("before_turn") and not dispatcher.inline("after_turn")
    assert dispatcher.inline("on_compact")  # no hook at all: nothing to bound either


def test_an_inline_hook_is_a_plain_function_and_apply_sees_the_environment() -> None:
    from dsh.core.errors import PluginError
    from dsh.runtime.kernel.plugin import Capability, Manifest
    from dsh.runtime.kernel.registry import RowRegistrar

    async def later(ev: HookEvent) -> None:
        pass

    reg = RowRegistrar("row", Manifest("p", "1", frozenset({Capability.LIFECYCLE})),
                       MappingProxyType({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}))
    assert reg.env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://c:4318"
    reg.hook("before_turn", "fine", print, inline=True)
    with pytest.raises(PluginError, match="inline hook 'late' that is async"):
        reg.hook("after_turn", "late", later, inline=True)
    assert [(h.name, h.inline) for h in reg.registration.hooks] == [("fine", True)]
