"""A thinking model behind a chat-completions proxy, driven by the shipped ``openai-chat``
preset: the reasoning the server streams goes back the way it came.

A relay (``tests/fixtures/chat_relay.py``, standing for litellm, vLLM, Ollama or
OpenRouter) sits in front of the DeepSeek stand-in, which refuses (HTTP 400) every
request whose tool-calling assistant message lost its reasoning, as DeepSeek does. The
relay names the reasoning as each kind of server does; only the key and base-URL
variables are configured, and every run must end with nothing refused anywhere.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_relay import SIGNATURE, ChatRelay
from deepseek_standin import DeepSeekStandIn

from dsh.sdk import ClientConfig, DshClient

UPSTREAM_KEY = "sk-standin-5e6f7a8b9c0d1e2f"
PROXY_KEY = "sk-proxy-0a1b2c3d4e5f6a7b"
RunDsh = Callable[..., subprocess.CompletedProcess[str]]


def calling(tool: str, arguments: dict[str, Any], reasoning: str) -> dict[str, Any]:
    return {"reasoning": reasoning, "content": "",
            "tool_calls": [{"name": tool, "arguments": arguments}]}


def answer(text: str) -> dict[str, Any]:
    return {"reasoning": "That answers it.", "content": text}


SCRIPT = [
    calling("working_directory", {}, "The working_directory tool says where we are."),
    answer("You are in the working directory."),
    calling("list_directory", {"path": "."}, "A listing shows what is here."),
    answer("It is empty."),
    calling("glob", {"pattern": "*.py"}, "Globbing finds Python files."),
    answer("No Python files."),
]


@pytest.fixture
def upstream() -> Iterator[DeepSeekStandIn]:
    with DeepSeekStandIn(api_key=UPSTREAM_KEY) as server:
        yield server


def relay_env(relay: ChatRelay) -> dict[str, str]:
    """All a user configures for the shipped openai-chat preset: base URL and key."""
    return {"OPENAI_BASE_URL": relay.base_url, "OPENAI_API_KEY": PROXY_KEY}


def posts(server: DeepSeekStandIn) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.method == "POST"]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "reasoning_details"])
def test_three_tool_using_turns_through_a_proxy_refuse_nothing(
        dsh_home: Path, upstream: DeepSeekStandIn, field: str) -> None:
    upstream.script(*SCRIPT)
    with ChatRelay(upstream.base_url, UPSTREAM_KEY, api_key=PROXY_KEY, field=field) as relay, \
            DshClient(ClientConfig(dsh_home=dsh_home, cwd=Path.cwd(), env=relay_env(relay),
                                   provider="openai-chat", model="deepseek-flash",
                                   reasoning_effort="high", initialize_timeout=60,
                                   request_timeout=60)) as sdk:
        session = sdk.new_session()
        results = [session.run(prompt) for prompt in
                   ("Where am I?", "What is here?", "Any Python files?")]
        sent = [r.body for r in relay.requests if r.method == "POST"]
        assert relay.refused == []
    assert [r.final_text for r in results] == [
        "You are in the working directory.", "It is empty.", "No Python files."]
    assert upstream.refused == [] and len(posts(upstream)) == 6
    assert all(r.stop_reason == "completed" for r in results)
    # dsh sent each tool-calling message's reasoning back in the field it came in
    calls = [m for m in sent[-1]["messages"] if m.get("tool_calls")]
    assert len(calls) == 3
    for message, entry in zip(calls, SCRIPT[::2], strict=True):
        if field == "reasoning_details":
            [detail] = message["reasoning_details"]
            assert (detail["text"], detail["signature"]) == (entry["reasoning"], SIGNATURE)
        else:
            assert message[field] == entry["reasoning"]
    assert {b["reasoning_effort"] for b in sent} == {"high"}
    # the reasoning is shown as reasoning, never as the answer
    blocks = [e.data["message"]["content"] for e in results[0].events
              if e.type == "assistant/message"]
    assert blocks[0][0]["type"] == "reasoning" and blocks[0][0]["field"] == field


def test_without_the_reasoning_the_upstream_refuses(upstream: DeepSeekStandIn) -> None:
    """What the proxy test guards against: the same conversation minus the reasoning is
    an HTTP 400 relayed from the model behind the proxy."""
    import httpx

    upstream.script(SCRIPT[0])
    with ChatRelay(upstream.base_url, UPSTREAM_KEY, api_key=PROXY_KEY) as relay, \
            httpx.Client(base_url=relay.base_url,
                         headers={"Authorization": f"Bearer {PROXY_KEY}"}) as http:
        http.post("/chat/completions", json={
            "model": "deepseek-flash", "stream": True,
            "messages": [{"role": "user", "content": "Where am I?"}]})
        assert len(posts(upstream)) == 1  # the first request went through
        again = http.post("/chat/completions", json={
            "model": "deepseek-flash", "stream": True, "messages": [
                {"role": "user", "content": "Where am I?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_01_standin", "type": "function",
                     "function": {"name": "working_directory", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_01_standin", "content": "/"}]})
    assert again.status_code == 400
    assert "reasoning_content in the thinking mode must be passed back" in \
        again.json()["error"]["message"]


def test_a_reasoning_field_of_another_name_is_kept_not_sent_back_and_said_once(
        dsh_home: Path, upstream: DeepSeekStandIn) -> None:
    upstream.script(answer("First."), answer("Second."))
    lines: list[str] = []
    with ChatRelay(upstream.base_url, UPSTREAM_KEY, api_key=PROXY_KEY,
                   field="thoughts") as relay, \
            DshClient(ClientConfig(dsh_home=dsh_home, cwd=Path.cwd(), env=relay_env(relay),
                                   provider="openai-chat", model="deepseek-flash",
                                   stderr=lines.append, initialize_timeout=60,
                                   request_timeout=60)) as sdk:
        session = sdk.new_session()
        first = session.run("One")
        second = session.run("Two")
        sent = [r.body for r in relay.requests if r.method == "POST"]
    assert (first.final_text, second.final_text) == ("First.", "Second.")
    shown = [e.data["text"] for e in first.events if e.type == "assistant/reasoning-delta"]
    assert "".join(shown) == "That answers it."  # kept, and shown as reasoning
    assert not [k for m in sent[1]["messages"] for k in m if "reason" in k or "thought" in k]
    warned = [line for line in lines if "reasoning in field 'thoughts'" in line]
    assert len(warned) == 1, lines
