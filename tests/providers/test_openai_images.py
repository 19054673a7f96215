"""Image blocks on the chat-completions wire, checked in the body a real local server got.

Tool messages carry only text in this format and must follow their assistant message
directly, so the images of a run of tool answers go in one user message right after the
run; a route without images gets a text note instead of the picture.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_openai_server import FakeOpenAIServer, Reply, text_stream
from test_openai_compat import failure, stream

from dsh.runtime.providers.base import ModelRequest

PNG = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}


def tool(call_id: str, *blocks: dict[str, str]) -> dict[str, object]:
    return {"role": "tool", "toolCallId": call_id, "isError": False,
            "content": [{"type": "text", "text": f"answer {call_id}"}, *blocks]}


CONVERSATION = ModelRequest("s1", "vision-model", (
    {"role": "user", "content": [{"type": "text", "text": "look at both"}]},
    {"role": "assistant", "content": [
        {"type": "tool-call", "id": "c1", "name": "read_image", "arguments": "{}"},
        {"type": "tool-call", "id": "c2", "name": "read_file", "arguments": "{}"},
        {"type": "tool-call", "id": "c3", "name": "read_image", "arguments": "{}"}]},
    tool("c1", PNG),
    tool("c2"),
    tool("c3", {**PNG, "mimeType": "image/jpeg"}),
    {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def test_tool_images_follow_the_run_of_tool_messages(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("ok")))
    stream(server, CONVERSATION, supports_images=True)
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool",
                                             "user", "user"]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "answer c1"}
    assert messages[5] == {"role": "user", "content": [
        {"type": "text", "text": "Image(s) from tool call c1:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "text", "text": "Image(s) from tool call c3:"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,iVBORw0KGgo="}},
    ]}
    assert messages[6] == {"role": "user", "content": "and now?"}


def test_a_route_without_images_sends_a_note_instead(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("ok")))
    stream(server, CONVERSATION)
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool", "user"]
    assert messages[2]["content"] == ("answer c1\n\n[image/png image left out: this model "
                                      "route does not take images]")
    assert "iVBORw0KGgo" not in str(server.requests[0].body)


def test_a_malformed_image_block_is_refused_before_sending(server: FakeOpenAIServer) -> None:
    request = ModelRequest("s1", "m", (tool("c1", {"type": "image", "mimeType": "text/html",
                                                   "data": "x"}),))
    error, _ = failure(server, request, supports_images=True)
    assert error.code == "bad-request" and "image/*" in error.message
    assert server.requests == []


def test_images_of_the_last_tool_answers_close_the_request(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("ok")))
    stream(server, ModelRequest("s1", "m", CONVERSATION.messages[:3]), supports_images=True)
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[3]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
