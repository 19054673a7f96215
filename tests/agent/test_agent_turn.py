"""One turn end to end: the event sequence and fields a client reads, and how turns end."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from agentkit import JOURNAL, Booted, rows, text, write_script

from dsh.core.errors import InvalidArgumentError

TOOL_TURN = [
    {"text": "Let me check.", "tool_calls": [{"name": "working_directory", "arguments": {}}],
     "usage": {"inputTokens": 10, "outputTokens": 20}},
    {"text": "Done: all good.", "usage": {"inputTokens": 10, "outputTokens": 6}},
]

# The original runtime's sdk-minimal transcript (as tests/protocol/test_sdk_snapshots.py pins
# it), minus the events no client reads (request/header, session-log delivery receipts);
# assistant/delta is ours.
REFERENCE_ORDER = [
    ("session.event", "agent/inbox/spliced"),
    ("session.status", "running"),
    ("session.event", "turn/start"),
    ("session.event", "agent/inbox/spliced"),
    ("session.event", "step/start"),
    ("session.event", "system/message"),
    ("session.event", "user/message"),
    ("session.event", "user/message"),
    ("session.event", "request/context"),
    ("session.event", "session/title"),
    ("session.event", "assistant/message"),
    ("session.event", "tool/call"),
    ("session.event", "tool/result"),
    ("session.event", "step/end"),
    ("session.event", "step/start"),
    ("session.event", "assistant/message"),
    ("session.event", "step/end"),
    ("session.event", "turn/end"),
    ("session.status", "idle"),
]


def test_tool_turn_follows_the_reference_sequence(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Booted(rows(write_script(tmp_path, TOOL_TURN))) as b:
            message_id = await b.agent.prompt("s1", text("Where am I?"))
            await b.idle("s1")
            order = [(m, p["event"]["type"] if m == "session.event" else p["status"])
                     for m, p in b.notes]
            assert [o for o in order if o[1] != "assistant/delta"] == REFERENCE_ORDER

            events = b.events("s1")
            assert [e["seq"] for e in events] == list(range(len(events)))
            assert all(set(e) >= {"type", "seq", "time", "data"} for e in events)
            assert all(isinstance(e["time"], int) for e in events)

            receipt = b.of("s1", "agent/inbox/spliced")[0]
            assert receipt["target"] == "next-turn"
            assert [m["id"] for m in receipt["inserted"]] == [message_id]
            assert receipt["inserted"][0]["content"] == text("Where am I?")
            assert b.of("s1", "agent/inbox/spliced")[1]["removedCount"] == 1
            assert b.of("s1", "turn/start") == [{"turn": 1}]

            prompt, context = b.of("s1", "user/message")
            assert prompt["id"] == message_id and prompt["source"] == {"kind": "user"}
            assert context["source"]["kind"] == "runtime-context"
            assert os.getcwd() in context["content"][0]["text"]

            first, second = b.of("s1", "assistant/message")
            assert (first["turn"], first["step"], second["step"]) == (1, 1, 2)
            text_block, call_block = first["message"]["content"]
            assert text_block == {"type": "text", "text": "Let me check."}
            assert call_block["type"] == "tool-call" and call_block["name"] == "working_directory"
            assert json.loads(call_block["arguments"]) == {}
            assert first["usage"] == {"inputTokens": 10, "outputTokens": 20, "totalTokens": 30}
            assert first["message"]["source"]["kind"] == "model"
            assert second["message"]["content"] == [{"type": "text", "text": "Done: all good."}]

            deltas = b.of("s1", "assistant/delta")
            assert "".join(d["text"] for d in deltas if d["step"] == 1) == "Let me check."

            (call,) = b.of("s1", "tool/call")
            assert call == {"turn": 1, "step": 1, "callId": call_block["id"],
                            "name": "working_directory", "arguments": "{}"}
            (result,) = b.of("s1", "tool/result")
            tool_message = result["message"]
            assert tool_message["role"] == "tool"
            assert tool_message["toolCallId"] == call_block["id"]
            assert tool_message["source"] == {"kind": "tool", "callId": call_block["id"]}
            assert tool_message["isError"] is False
            assert os.getcwd() in tool_message["content"][0]["text"]
            tool_event = next(e for e in events if e["type"] == "tool/result")
            call_event = next(e for e in events if e["type"] == "tool/call")
            assert tool_event["sourceEventSeqs"] == [call_event["seq"]]

            assert b.of("s1", "turn/end") == [{"turn": 1, "reason": {"kind": "completed"}}]
            assert b.statuses("s1") == ["running", "idle"]
            assert b.agent.history("s1") == events

    asyncio.run(scenario())


def test_second_turn_skips_the_system_message_and_reports_a_changed_cwd(
        tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"text": "Moving.", "tool_calls": [{"name": "working_directory",
                                            "arguments": {"cd": "sub"}}]},
        {"text": "Moved."},
        {"text": "Still here."},
        {"text": "Again."},
    ])

    os.mkdir("sub")

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            await b.agent.prompt("s1", text("go down"))
            await b.idle("s1")
            await b.agent.prompt("s1", text("and now?"))
            await b.idle("s1", 2)
            await b.agent.prompt("s1", text("once more"))
            await b.idle("s1", 3)
            assert b.types("s1").count("system/message") == 1
            assert b.of("s1", "turn/start") == [{"turn": 1}, {"turn": 2}, {"turn": 3}]
            contexts = [m for m in b.of("s1", "user/message")
                        if m["source"]["kind"] == "runtime-context"]
            sub = os.path.join(os.getcwd(), "sub")
            assert [json.dumps(sub) in c["content"][0]["text"] for c in contexts] == [
                False, True]
            assert b.agent.get_cwd("s1") == sub
            assert b.types("s1").count("session/title") == 1

    asyncio.run(scenario())


def test_provider_error_ends_the_turn_with_message_and_code(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"error": {"message": "rate limited", "code": "rate-limit"}}])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            assert b.of("s1", "turn/end") == [{"turn": 1, "reason": {
                "kind": "error", "error": {"message": "rate limited", "code": "rate-limit"}}}]
            assert "assistant/message" not in b.types("s1")
            assert b.types("s1")[-2:] == ["step/end", "turn/end"]
            assert b.statuses("s1") == ["running", "idle"]

    asyncio.run(scenario())


def test_an_exhausted_script_is_a_clear_model_error(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "only once"}])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            await b.agent.prompt("s1", text("one"))
            await b.agent.prompt("s1", text("two"))
            await b.idle("s1")
            first, second = b.of("s1", "turn/end")
            assert first["reason"] == {"kind": "completed"}
            assert second["reason"] == {"kind": "error", "error": {
                "message": "scripted provider: script exhausted after 1 responses",
                "code": "script-exhausted"}}

    asyncio.run(scenario())


def test_length_finish_ends_with_max_tokens_and_answers_the_cut_off_call(
        tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        {"text": "Let me", "finish": "length",
         "tool_calls": [{"name": "working_directory", "arguments": "{\"cd\""}]},
        {"text": "Recovered."},
    ])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "max-tokens"}
            assert "tool/call" not in b.types("s1")
            (result,) = b.of("s1", "tool/result")
            assert result["message"]["isError"] is True
            assert result["error"]["code"] == "NOT_RUN"
            # The history stays well-formed, so the next turn runs normally.
            await b.agent.prompt("s1", text("again"))
            await b.idle("s1", 2)
            assert b.of("s1", "turn/end")[1]["reason"] == {"kind": "completed"}

    asyncio.run(scenario())


def test_max_steps_stops_a_model_that_never_answers(tmp_path: Path) -> None:
    loop = {"tool_calls": [{"name": "working_directory", "arguments": {}}]}
    script = write_script(tmp_path, [loop, loop, loop])

    async def scenario() -> None:
        async with Booted(rows(script, agent={"max_steps": 2})) as b:
            await b.agent.prompt("s1", text("spin"))
            await b.idle("s1")
            (end,) = b.of("s1", "turn/end")
            assert end["reason"]["kind"] == "error"
            assert end["reason"]["error"]["code"] == "max-steps"
            assert len(b.of("s1", "tool/result")) == 2

    asyncio.run(scenario())


def test_a_provider_bug_fails_the_turn_and_closes_the_stream(tmp_path: Path) -> None:
    bad = {"id": "bad", "name": "agentkit:FixtureProvider"}
    script = write_script(tmp_path, [{"text": "unused"}])

    async def scenario() -> None:
        async with Booted(rows(script, extra=[bad])) as b:
            with pytest.raises(InvalidArgumentError,
                               match="unknown model 'other' for provider route"):
                b.agent.configure(provider="bad", model="other")
            assert b.agent.configure(provider="bad", model=None) == {
                "provider": "bad", "model": "bad"}
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            (end,) = b.of("s1", "turn/end")
            assert end["reason"] == {"kind": "error", "error": {
                "message": "TypeError: provider yielded dict, not a chunk",
                "code": "provider-error"}}
            assert JOURNAL == [("bad-stream", "closed")]

    asyncio.run(scenario())


def test_unknown_default_route_fails_the_turn_not_the_prompt(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "unused"}])

    async def scenario() -> None:
        async with Booted(rows(script, agent={"default_route": "nowhere"})) as b:
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            (end,) = b.of("s1", "turn/end")
            assert end["reason"]["kind"] == "error"
            assert end["reason"]["error"]["code"] == "unknown-route"
            assert "unknown provider route 'nowhere'" in end["reason"]["error"]["message"]

    asyncio.run(scenario())
