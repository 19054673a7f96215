"""The pure dsh-event → ACP-update mapping and the ACP prompt → dsh block conversion."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.core.errors import JsonRpcError
from dsh.runtime.servers.acp_mapping import (
    UpdateMapper,
    prompt_blocks,
    selected_option,
    stop_reason,
    tool_kind,
    tool_title,
)


def ev(type: str, **data: Any) -> dict[str, Any]:
    return {"type": type, "seq": 0, "time": 0, "data": data}


@pytest.mark.parametrize(("name", "kind"), [
    ("read_file", "read"), ("write_file", "edit"), ("edit_file", "edit"), ("grep", "search"),
    ("glob", "search"), ("list_directory", "search"), ("bash", "execute"),
    ("working_directory", "other"), ("someone_elses_tool", "other")])
def test_tool_kinds(name: str, kind: str) -> None:
    assert tool_kind(name) == kind


def test_titles_name_the_main_argument() -> None:
    assert tool_title("read_file", {"path": "a.py"}) == "Read a.py"
    assert tool_title("bash", {"command": "ls   -l\n"}) == "Run `ls -l`"
    assert tool_title("mystery", {"x": 1}) == "mystery"
    assert tool_title("write_file", "not json") == "Write"
    assert tool_title("bash", {"command": "x" * 500}).endswith("…`")


def test_prompt_blocks_become_text_for_the_model() -> None:
    blocks = prompt_blocks([
        {"type": "text", "text": "hi"},
        {"type": "resource_link", "uri": "file:///a", "name": "a"},
        {"type": "resource", "resource": {"uri": "file:///b", "text": "body"}},
        {"type": "resource", "resource": {"uri": "file:///c", "blob": "AA==",
                                          "mimeType": "image/png"}},
    ])
    assert [b["type"] for b in blocks] == ["text"] * 4
    assert blocks[1]["text"] == "[a](file:///a)"
    assert "body" in blocks[2]["text"] and "file:///b" in blocks[2]["text"]
    assert "not shown" in blocks[3]["text"]


@pytest.mark.parametrize(("prompt", "where"), [
    (None, '"prompt"'), ([], '"prompt"'), ([1], "prompt[0]"),
    ([{"type": "text", "text": "ok"}, {"type": "audio", "data": ""}], "prompt[1]"),
    ([{"type": "resource_link", "uri": "x"}], "prompt[0]"),
    ([{"type": "resource", "resource": {"uri": "x"}}], "prompt[0]")])
def test_malformed_prompts_name_the_block(prompt: Any, where: str) -> None:
    with pytest.raises(JsonRpcError) as caught:
        prompt_blocks(prompt)
    assert caught.value.code == -32602 and where in caught.value.message


def test_live_turn() -> None:
    mapper = UpdateMapper("/w")
    updates = [u for e in [
        ev("request/context", provider="p", model="m", contextWindow=1000),
        ev("assistant/delta", turn=1, step=1, index=0, text="Hel"),
        ev("assistant/delta", turn=1, step=1, index=0, text="lo"),
        ev("assistant/message", message={"content": [{"type": "text", "text": "Hello"}]},
           usage={"inputTokens": 5, "outputTokens": 2, "totalTokens": 7}),
        ev("tool/call", callId="c1", name="edit_file", arguments='{"path": "x.py"}'),
        ev("tool/result", message={"toolCallId": "c1", "isError": True,
                                   "content": [{"type": "text", "text": "Error: no"}]},
           error={"name": "ToolDeniedError", "code": "DENIED"}),
        ev("turn/end", turn=1, reason={"kind": "completed"}),
    ] for u in mapper.live(e)]
    assert [u["sessionUpdate"] for u in updates] == [
        "agent_message_chunk", "agent_message_chunk", "usage_update", "tool_call",
        "tool_call_update"]
    assert updates[2] == {"sessionUpdate": "usage_update", "used": 7, "size": 1000}
    assert updates[3]["locations"] == [{"path": "/w/x.py"}]
    assert updates[3]["rawInput"] == {"path": "x.py"}
    assert updates[4]["status"] == "failed"
    assert updates[4]["rawOutput"] == {"error": {"name": "ToolDeniedError", "code": "DENIED"}}


def test_replay_shows_the_conversation_not_the_stream() -> None:
    log = [
        ev("user/message", role="user", content=[{"type": "text", "text": "q"}],
           source={"kind": "user"}),
        ev("user/message", role="user", content=[{"type": "text", "text": "cwd"}],
           source={"kind": "runtime-context"}),
        ev("assistant/delta", text="a"),
        ev("assistant/message", message={"content": [
            {"type": "text", "text": "a"},
            {"type": "tool-call", "id": "c", "name": "bash", "arguments": "{}"}]}),
        ev("tool/call", callId="c", name="bash", arguments="{}"),
        ev("tool/result", message={"toolCallId": "c", "isError": False,
                                   "content": [{"type": "text", "text": "out"}]}),
    ]
    updates = UpdateMapper("/w").replay(log)
    assert [(u["sessionUpdate"], u.get("content", {}).get("text")) for u in updates
            if "chunk" in u["sessionUpdate"]] == [("user_message_chunk", "q"),
                                                  ("agent_message_chunk", "a")]
    assert [u["sessionUpdate"] for u in updates][-2:] == ["tool_call", "tool_call_update"]


def test_reasoning_is_a_thought_live_and_on_replay() -> None:
    live = [u for e in [
        ev("assistant/reasoning-delta", turn=1, step=1, index=0, text="Let me "),
        ev("assistant/reasoning-delta", turn=1, step=1, index=0, text="think."),
        ev("assistant/delta", turn=1, step=1, index=0, text="Answer."),
    ] for u in UpdateMapper("/w").live(e)]
    assert [(u["sessionUpdate"], u["content"]) for u in live] == [
        ("agent_thought_chunk", {"type": "text", "text": "Let me "}),
        ("agent_thought_chunk", {"type": "text", "text": "think."}),
        ("agent_message_chunk", {"type": "text", "text": "Answer."})]
    replayed = UpdateMapper("/w").replay([
        ev("assistant/reasoning-delta", text="Let me think."),
        ev("assistant/message", message={"content": [
            {"type": "reasoning", "text": "Let me think.", "signature": "s"},
            {"type": "text", "text": "Answer."}]})])
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in replayed] == [
        ("agent_thought_chunk", "Let me think."), ("agent_message_chunk", "Answer.")]


@pytest.mark.parametrize(("reason", "cancel", "expected"), [
    ({"kind": "completed"}, False, "end_turn"),
    ({"kind": "completed"}, True, "end_turn"),
    ({"kind": "max-tokens"}, False, "max_tokens"),
    ({"kind": "cancelled"}, False, "cancelled"),
    ({"kind": "error", "error": {"message": "m", "code": "max-steps"}}, False,
     "max_turn_requests"),
    ({"kind": "error", "error": {"message": "m", "code": "x"}}, True, "cancelled"),
])
def test_stop_reasons(reason: dict[str, Any], cancel: bool, expected: str) -> None:
    assert stop_reason(reason, cancel_requested=cancel) == expected


def test_a_failed_turn_is_an_error_answer() -> None:
    error = stop_reason({"kind": "error", "error": {"message": "boom", "code": "provider-error"}},
                        cancel_requested=False)
    assert isinstance(error, JsonRpcError)
    assert (error.code, error.message, error.data) == (-32603, "boom",
                                                       {"code": "provider-error"})


def test_only_a_selected_offered_option_is_an_option() -> None:
    offered = {"allow_once": "allow", "reject_once": "deny"}
    assert selected_option({"outcome": {"outcome": "selected", "optionId": "allow_once"}},
                           offered) == "allow_once"
    for answer in ({"outcome": {"outcome": "selected", "optionId": ["allow_once"]}},
                   {"outcome": {"outcome": "selected", "optionId": "always"}},
                   {"outcome": {"outcome": "cancelled"}}, {"outcome": "selected"},
                   ["allow_once"], None, "allow_once"):
        assert selected_option(answer, offered) is None, answer
