"""Prompt queueing, the inbox bound, and cancellation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agentkit import JOURNAL, Booted, rows, text, write_script

from dsh.core.errors import DshError, SessionBusyError
from dsh.runtime.servers.errors import code_of

SLOW = {"text": "slow", "delay_ms": 3_600_000}
FIXTURE_TOOLS = {"id": "fixture-tools", "name": "agentkit:FixtureTools"}


def test_queued_prompts_run_in_order_and_idle_comes_once(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "first answer"}, {"text": "second answer"}])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            first = await b.agent.prompt("s1", text("first"))
            second = await b.agent.prompt("s1", text("second"))
            await b.idle("s1")
            receipts = [d for d in b.of("s1", "agent/inbox/spliced") if d["inserted"]]
            assert [(r["start"], r["inserted"][0]["id"]) for r in receipts] == [
                (0, first), (1, second)]
            prompts = [m["id"] for m in b.of("s1", "user/message")
                       if m["source"]["kind"] == "user"]
            assert prompts == [first, second]
            answers = [d["message"]["content"][0]["text"]
                       for d in b.of("s1", "assistant/message")]
            assert answers == ["first answer", "second answer"]
            assert [d["turn"] for d in b.of("s1", "turn/end")] == [1, 2]
            assert b.statuses("s1") == ["running", "idle"]
            assert b.types("s1")[-1] == "turn/end"

    asyncio.run(scenario())


def test_a_full_inbox_is_busy_and_retryable(tmp_path: Path) -> None:
    script = write_script(tmp_path, [SLOW, {"text": "queued"}])

    async def scenario() -> None:
        async with Booted(rows(script, agent={"max_queued": 1})) as b:
            await b.agent.prompt("s1", text("running"))
            await b.agent.prompt("s1", text("waiting"))
            with pytest.raises(SessionBusyError) as info:
                await b.agent.prompt("s1", text("one too many"))
            assert code_of(info.value) == -32001
            assert info.value.message == "session busy: queue full"
            assert info.value.data == {"retryable": True}
            receipts = [d for d in b.of("s1", "agent/inbox/spliced") if d["inserted"]]
            assert len(receipts) == 2
            await b.seen("s1", "step/start")
            assert await b.agent.cancel("s1") is True
            await b.idle("s1")
            kinds = [d["reason"]["kind"] for d in b.of("s1", "turn/end")]
            assert kinds == ["cancelled", "completed"]

    asyncio.run(scenario())


def test_cancel_mid_model_call_ends_the_turn_cancelled(tmp_path: Path) -> None:
    script = write_script(tmp_path, [SLOW, {"text": "after"}])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            assert await b.agent.new_session(session_id="s1") == "s1"
            assert await b.agent.cancel("s1") is False  # nothing runs yet
            await b.agent.prompt("s1", text("slow please"))
            await b.seen("s1", "request/context")
            assert await b.agent.cancel("s1") is True
            assert await b.agent.cancel("s1") is False  # already cancelling
            await b.idle("s1")
            assert b.of("s1", "turn/end") == [{"turn": 1, "reason": {"kind": "cancelled"}}]
            assert "assistant/message" not in b.types("s1")
            assert b.types("s1")[-2:] == ["step/end", "turn/end"]
            await b.agent.prompt("s1", text("next"))
            await b.idle("s1", 2)
            assert b.of("s1", "turn/end")[1]["reason"] == {"kind": "completed"}

    asyncio.run(scenario())


def test_cancel_mid_tool_answers_the_call_and_keeps_history_valid(tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"tool_calls": [{"name": "wait"}, {"name": "working_directory"}]},
        {"text": "fine"},
    ])

    async def scenario() -> None:
        async with Booted(rows(script, extra=[FIXTURE_TOOLS])) as b:
            await b.agent.prompt("s1", text("wait"))
            await b.seen("s1", "tool/call")
            await b.until(lambda: ("wait", "started") in JOURNAL)
            assert await b.agent.cancel("s1") is True
            await b.idle("s1")
            assert ("wait", "cancelled", True) in JOURNAL
            results = b.of("s1", "tool/result")
            assert [r["message"]["isError"] for r in results] == [True, True]
            assert {r["error"]["code"] for r in results} == {"NOT_RUN"}
            assert "cancelled" in results[0]["message"]["content"][0]["text"]
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "cancelled"}
            await b.agent.prompt("s1", text("next"))
            await b.idle("s1", 2)
            assert b.of("s1", "turn/end")[1]["reason"] == {"kind": "completed"}

    asyncio.run(scenario())


def test_a_tool_that_swallows_cancellation_still_ends_the_turn(tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"tool_calls": [{"name": "stubborn"}, {"name": "working_directory"}]},
        {"text": "must not be asked for"},
    ])

    async def scenario() -> None:
        async with Booted(rows(script, extra=[FIXTURE_TOOLS])) as b:
            await b.agent.prompt("s1", text("go"))
            await b.until(lambda: ("stubborn", "started") in JOURNAL)
            assert await b.agent.cancel("s1") is True
            await b.idle("s1")
            results = b.of("s1", "tool/result")
            assert [r["message"]["content"][0]["text"] for r in results] == [
                "ignored the cancellation", "Error: not run: the turn was cancelled"]
            assert b.types("s1").count("step/start") == 1
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "cancelled"}

    asyncio.run(scenario())


def test_cancel_leaves_queued_prompts_to_run(tmp_path: Path) -> None:
    script = write_script(tmp_path, [SLOW, {"text": "second ran"}])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            await b.agent.prompt("s1", text("slow"))
            await b.agent.prompt("s1", text("queued"))
            await b.seen("s1", "request/context")
            assert await b.agent.cancel("s1") is True
            await b.idle("s1")
            kinds = [d["reason"]["kind"] for d in b.of("s1", "turn/end")]
            assert kinds == ["cancelled", "completed"]
            assert b.statuses("s1") == ["running", "idle"]

    asyncio.run(scenario())


def test_cancel_before_the_turn_starts_cancels_the_latest_prompt_only(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "first ran"}, {"text": "third ran"}])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            await b.agent.new_session(session_id="s1")
            await b.agent.prompt("s1", text("first"))
            second = await b.agent.prompt("s1", text("second"))
            # No turn has started yet: the cancel is the latest prompt's.
            assert await b.agent.cancel("s1") is True
            assert await b.agent.cancel("s1") is False  # already cancelled
            await b.idle("s1")
            await b.agent.prompt("s1", text("third"))
            await b.idle("s1", 2)
            kinds = [d["reason"]["kind"] for d in b.of("s1", "turn/end")]
            assert kinds == ["completed", "cancelled", "completed"]
            answers = [d["message"]["content"][0]["text"]
                       for d in b.of("s1", "assistant/message")]
            assert answers == ["first ran", "third ran"]
            asked = [m["id"] for m in b.of("s1", "user/message")
                     if m["source"]["kind"] == "user"]
            assert second not in asked  # the model never saw the cancelled prompt

    asyncio.run(scenario())


def test_dispose_cancels_running_turns(tmp_path: Path) -> None:
    script = write_script(tmp_path, [SLOW])

    async def scenario() -> None:
        b = Booted(rows(script))
        async with b:
            await b.agent.prompt("s1", text("slow"))
            await b.seen("s1", "request/context")
        assert b.of("s1", "turn/end") == [{"turn": 1, "reason": {"kind": "cancelled"}}]
        assert b.statuses("s1") == ["running", "idle"]
        with pytest.raises(DshError, match="closed"):
            await b.agent.prompt("s1", text("too late"))

    asyncio.run(scenario())
