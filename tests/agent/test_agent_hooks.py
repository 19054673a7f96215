"""Lifecycle hooks around turns: every event fired, and no hook can stop or stall a turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentkit import JOURNAL, Booted, rows, text, write_script

EVENTS = ["session_start", "before_turn", "before_model_request", "after_model_response",
          "before_tool_call", "after_tool_call", "after_turn", "session_end"]
SCRIPT = [{"text": "look", "tool_calls": [{"name": "working_directory"}]}, {"text": "done"}]


def hooks(mode: str, events: list[str] = EVENTS) -> dict:
    return {"id": f"hooks-{mode}", "name": "agentkit:FixtureHooks",
            "config": {"mode": mode, "events": events}}


def test_hooks_see_every_lifecycle_event_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Booted(rows(write_script(tmp_path, SCRIPT), extra=[hooks("record")])) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
        assert JOURNAL == [
            ("session_start", "s1", None, None),
            ("before_turn", "s1", None, 1),
            ("before_model_request", "s1", 1, 1),
            ("after_model_response", "s1", 1, 1),
            ("before_tool_call", "s1", 1, 1),
            ("after_tool_call", "s1", 1, 1),
            ("before_model_request", "s1", 2, 1),
            ("after_model_response", "s1", 2, 1),
            ("after_turn", "s1", None, 1),
            ("session_end", "s1", None, None),
        ]

    asyncio.run(scenario())


def test_raising_hooks_become_error_events_and_the_turn_completes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Booted(rows(write_script(tmp_path, SCRIPT), extra=[hooks("raise")])) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "completed"}
            errors = b.of("s1", "error")
            fired = [e["source"]["event"] for e in errors]
            assert fired == ["session_start", "before_turn", "before_model_request",
                             "after_model_response", "before_tool_call", "after_tool_call",
                             "before_model_request", "after_model_response", "after_turn"]
            first = errors[0]
            assert first["source"] == {"kind": "hook", "hook": "raise-session_start",
                                       "event": "session_start"}
            assert "ValueError: hook broke on session_start" in first["message"]

    asyncio.run(scenario())


def test_hooks_cannot_change_what_the_agent_keeps(tmp_path: Path) -> None:
    meddler = hooks("meddle", ["before_turn", "before_model_request", "after_model_response"])

    async def scenario() -> None:
        async with Booted(rows(write_script(tmp_path, SCRIPT), extra=[meddler])) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            assert b.of("s1", "error") == []
            history = b.agent.history("s1")
            prompt = next(e["data"] for e in history if e["type"] == "user/message")
            assert prompt["content"] == text("hi")
            answers = [e["data"]["message"]["content"] for e in history
                       if e["type"] == "assistant/message"]
            assert answers[1] == [{"type": "text", "text": "done"}]

    asyncio.run(scenario())


def test_a_hanging_hook_is_abandoned_at_the_kernel_budget(tmp_path: Path) -> None:
    tree = rows(write_script(tmp_path, SCRIPT), extra=[hooks("hang", ["before_turn"])])

    async def scenario() -> None:
        async with Booted(tree, hook_budget=0.05) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "completed"}
            (error,) = b.of("s1", "error")
            assert error["source"] == {"kind": "hook", "hook": "hang-before_turn",
                                       "event": "before_turn"}
            assert "budget" in error["message"]

    asyncio.run(scenario())


def test_the_agents_budget_bounds_all_hooks_of_one_event(tmp_path: Path) -> None:
    tree = rows(write_script(tmp_path, SCRIPT), agent={"hook_budget_s": 0.05},
                extra=[hooks("hang", ["before_tool_call"])])

    async def scenario() -> None:
        async with Booted(tree, hook_budget=3600) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "completed"}
            (error,) = b.of("s1", "error")
            assert error["source"] == {"kind": "hook", "hook": "hang-before_tool_call",
                                       "event": "before_tool_call"}
            assert error["message"] == (
                "hooks on before_tool_call exceeded the agent's 0.05 s budget")

    asyncio.run(scenario())


def test_hooks_get_a_copy_that_shares_only_what_cannot_change() -> None:
    import copy

    from dsh.runtime.agent.lifecycle import copied
    from dsh.runtime.providers.base import ModelRequest, Usage

    usage = Usage(10, 2)
    message = {"role": "user", "content": [{"type": "text", "text": "hi"}], "id": "m1"}
    request = ModelRequest("s1", "m", (message,), (), None, None, "scripted")
    odd = {1, 2}
    payload = {"message": message, "usage": usage, "request": request, "odd": odd,
               "pair": ("a", 1), "none": None}
    copy_ = copied(payload)
    assert copy_ == payload
    assert copy_["usage"] is usage and copy_["pair"] is payload["pair"]  # immutable: shared
    assert copy_["message"] is not message
    assert copy_["message"]["content"][0] is not message["content"][0]
    assert copy_["request"] is not request and type(copy_["request"]) is ModelRequest
    assert copy_["request"].messages[0] is not message
    assert copy_["odd"] is not odd  # anything else: copy.deepcopy
    copy_["message"]["content"][0]["text"] = "changed by a hook"
    assert message["content"][0]["text"] == "hi"
    assert copied(payload) == copy.deepcopy(payload)
