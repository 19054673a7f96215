"""The Anthropic Messages routes (``anthropic``, ``deepseek-anthropic``) against an
Anthropic Messages stand-in, through the real runtime.

The stand-in (``tests/fixtures/anthropic_standin.py``) is a real HTTP server on 127.0.0.1
written from Anthropic's public docs: it signs the thinking blocks it streams and refuses
(HTTP 400) a thinking block sent back with a signature it did not give, a tool loop whose
assistant message lost its thinking block, a ``tool_use`` without its ``tool_result``,
roles that do not alternate. Only the key and base-URL variables are configured.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic_standin import AnthropicStandIn, sign

from dsh.sdk import ClientConfig, DshClient

KEY = "sk-ant-standin-9a8b7c6d5e4f"
RunDsh = Callable[..., subprocess.CompletedProcess[str]]

LOOK = {"thinking": "The working_directory tool tells where we are.",
        "text": "Let me check.", "tool_calls": [{"name": "working_directory", "arguments": {}}]}
LIST = {"thinking": "A listing answers this.",
        "tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]}


def answer(text: str, thinking: str = "Enough to answer.") -> dict[str, Any]:
    return {"thinking": thinking, "text": text}


@pytest.fixture
def standin() -> Iterator[AnthropicStandIn]:
    with AnthropicStandIn(api_key=KEY) as server:
        yield server


def client(home: Path, env: dict[str, str], **config: Any) -> DshClient:
    return DshClient(ClientConfig(dsh_home=home, cwd=Path.cwd(), env=env,
                                  initialize_timeout=60, request_timeout=60, **config))


def anthropic_env(server: AnthropicStandIn) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": KEY}


def posts(server: AnthropicStandIn) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.method == "POST"]


def test_two_turns_send_signed_thinking_back(dsh_home: Path, standin: AnthropicStandIn) -> None:
    standin.script(LOOK, answer("You are here."), LIST, answer("Two entries."))
    with client(dsh_home, anthropic_env(standin), provider="anthropic",
                reasoning_effort="high") as sdk:
        session = sdk.new_session()
        first = session.run("Where am I?")
        second = session.run("And what is in this folder?")
    assert (first.final_text, second.final_text) == ("You are here.", "Two entries.")
    assert standin.refused == []
    headers = next(r.headers for r in standin.requests if r.method == "POST")
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    bodies = posts(standin)
    assert bodies[0]["thinking"] == {"type": "adaptive"}
    assert bodies[0]["output_config"] == {"effort": "high"}
    assert bodies[0]["model"] == "claude-sonnet-5-5" and bodies[0]["max_tokens"] == 32000
    loop = bodies[1]["messages"]
    assert [m["role"] for m in loop] == ["user", "assistant", "user"]
    thinking, text, call = loop[1]["content"]
    assert thinking == {"type": "thinking", "thinking": LOOK["thinking"],
                        "signature": sign(LOOK["thinking"])}
    assert (text["text"], call["type"], call["input"]) == ("Let me check.", "tool_use", {})
    result = loop[2]["content"][0]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", call["id"])
    assert loop[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert bodies[1]["system"][-1]["cache_control"] == {"type": "ephemeral"}
    usage = [e.data["usage"] for e in first.events if e.type == "assistant/message"]
    assert usage[1]["cacheHitTokens"] > 0 and "cacheWriteTokens" in usage[1]
    reasoning = [b for e in second.events if e.type == "assistant/message"
                 for b in e.data["message"]["content"] if b["type"] == "reasoning"]
    assert reasoning[0]["signature"] == sign(LIST["thinking"])


def test_a_thinking_block_with_a_wrong_signature_is_refused_verbatim(
        dsh_home: Path, standin: AnthropicStandIn) -> None:
    """A forked history carrying a forged signature: the API's 400 reaches the client."""
    forged = [
        {"role": "user", "content": [{"type": "text", "text": "Where am I?"}]},
        {"role": "assistant", "source": {"kind": "model", "provider": "anthropic"},
         "content": [{"type": "reasoning", "text": "forged", "signature": "bm90LWl0"},
                     {"type": "tool-call", "id": "toolu_x", "name": "working_directory",
                      "arguments": "{}"}]},
        {"role": "tool", "toolCallId": "toolu_x", "isError": False,
         "content": [{"type": "text", "text": "/"}]},
    ]
    standin.script(answer("never sent"))
    with client(dsh_home, anthropic_env(standin), provider="anthropic",
                reasoning_effort="low") as sdk:
        session_id = sdk.request("session/new", {"history": forged})["sessionId"]
        result = sdk.resume_session(session_id).run("Go on.")
    assert result.stop_reason == "error"
    error = next(e.data["reason"]["error"] for e in result.events if e.type == "turn/end")
    assert error["code"] == "http-400"
    assert "Invalid `signature` in `thinking` block" in error["message"]
    assert standin.refused and standin.left == 1


def test_deepseek_anthropic_route_headless(run_dsh: RunDsh) -> None:
    """DeepSeek's Anthropic-format endpoint: thinking on by default, DEEPSEEK_API_KEY."""
    with AnthropicStandIn(api_key=KEY, thinking_default=True) as server:
        server.script(LOOK, answer("You are in the working directory."))
        proc = run_dsh("--profile", "headless", "--provider", "deepseek-anthropic",
                       "Where am I?", env={"DEEPSEEK_ANTHROPIC_BASE_URL": server.base_url,
                                           "DEEPSEEK_API_KEY": KEY})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "You are in the working directory.\n"
        assert server.refused == []
        first, second = posts(server)
    assert first["model"] == "deepseek-flash"
    assert "thinking" not in first  # the endpoint's default: on
    assert second["messages"][1]["content"][0]["signature"] == sign(LOOK["thinking"])


def test_overloaded_mid_stream_is_asked_once_more(dsh_home: Path,
                                                  standin: AnthropicStandIn) -> None:
    broken = {"text": "Half an answ", "error_event": "overloaded_error"}
    standin.script(broken, {"text": "A whole answer."})
    with client(dsh_home, anthropic_env(standin), provider="anthropic") as sdk:
        result = sdk.new_session().run("Hello")
    assert (result.stop_reason, result.final_text) == ("completed", "A whole answer.")
    kinds = [e.type for e in result.events]
    assert kinds.count("assistant/retry") == 1
    assert kinds.index("assistant/retry") < kinds.index("assistant/message")
    messages = [e.data["message"] for e in result.events if e.type == "assistant/message"]
    assert [m["content"] for m in messages] == [[{"type": "text", "text": "A whole answer."}]]


def test_a_stream_cut_twice_fails_without_a_half_message(dsh_home: Path,
                                                         standin: AnthropicStandIn) -> None:
    cut = {"text": "Partial words that never end", "cut_after": 5}
    standin.script(cut, cut, {"text": "Fine now."})
    with client(dsh_home, anthropic_env(standin), provider="anthropic") as sdk:
        session = sdk.new_session()
        failed = session.run("Hello")
        after = session.run("Hello again")
        history = sdk.request("session/history", {"sessionId": session.id})["events"]
    assert failed.stop_reason == "error"
    error = next(e.data["reason"]["error"] for e in failed.events if e.type == "turn/end")
    assert error["code"] == "stream-interrupted"
    assert not [e for e in failed.events if e.type == "assistant/message"]
    assert (after.stop_reason, after.final_text) == ("completed", "Fine now.")
    stored = [e["data"]["message"] for e in history if e["type"] == "assistant/message"]
    assert [m["content"] for m in stored] == [[{"type": "text", "text": "Fine now."}]]
    # The session sent on is whole: the failed turn left only its prompt.
    assert [m["role"] for m in posts(standin)[-1]["messages"]] == ["user"]


def test_the_standin_refuses_an_unsigned_thinking_block(standin: AnthropicStandIn) -> None:
    import httpx

    with httpx.Client(base_url=standin.base_url,
                      headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}) as http:
        reply = http.post("/v1/messages", json={
            "model": "claude-sonnet-5-5", "max_tokens": 100, "stream": True,
            "thinking": {"type": "adaptive"}, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t", "signature": ""},
                    {"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]})
    assert reply.status_code == 400
    assert json.loads(reply.text)["error"]["message"].endswith(
        "Invalid `signature` in `thinking` block")
