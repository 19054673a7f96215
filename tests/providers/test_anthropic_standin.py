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

from dsh.core.errors import JsonRpcError
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


# -- the thinking form each model takes ------------------------------------------------------


def _post(standin: AnthropicStandIn, model: str, thinking: dict[str, Any] | None,
          effort: str | None = None, max_tokens: int = 4096) -> Any:
    import httpx

    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True,
                            "messages": [{"role": "user", "content": "hi"}]}
    if thinking is not None:
        body["thinking"] = thinking
    if effort is not None:
        body["output_config"] = {"effort": effort}
    standin.script({"text": "ok"})
    with httpx.Client(base_url=standin.base_url,
                      headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}) as http:
        return http.post("/v1/messages", json=body)


ADAPTIVE = {"type": "adaptive"}
ENABLED = {"type": "enabled", "budget_tokens": 2048}
DISABLED = {"type": "disabled"}


@pytest.mark.parametrize(("model", "thinking", "refused"), [
    # 4.5 and earlier: a budget only
    ("claude-sonnet-4-5", ADAPTIVE, "'adaptive' is not supported by claude-sonnet-4-5"),
    ("claude-opus-4-1", ADAPTIVE, "'adaptive' is not supported"),
    ("claude-sonnet-4-20250514", ADAPTIVE, "'adaptive' is not supported"),
    ("claude-3-7-sonnet-20250219", ADAPTIVE, "'adaptive' is not supported"),
    ("claude-sonnet-4-5", ENABLED, None),
    ("claude-sonnet-4-5", DISABLED, None),
    # 4.6: both, adaptive preferred
    ("claude-opus-4-6", ADAPTIVE, None),
    ("claude-sonnet-4-6", ENABLED, None),
    # Opus 4.7 and later, Claude 5: adaptive is the only way to think
    ("claude-opus-4-7", ENABLED, "'enabled' is not supported by claude-opus-4-7"),
    ("claude-sonnet-5-5", ENABLED, "'enabled' is not supported"),
    ("claude-opus-5", ENABLED, "'enabled' is not supported"),
    ("claude-opus-4-7", DISABLED, None),
    # Fable and Mythos: adaptive only, never disabled
    ("claude-fable-5", DISABLED, "'disabled' is not supported by claude-fable-5"),
    ("claude-mythos-5", DISABLED, "'disabled' is not supported"),
    ("claude-mythos-preview", ENABLED, "'enabled' is not supported"),
    ("claude-fable-5", ADAPTIVE, None),
    # the budget itself: at least 1024, below max_tokens
    ("claude-sonnet-4-5", {"type": "enabled", "budget_tokens": 1000}, "greater than or equal"),
    ("claude-sonnet-4-5", {"type": "enabled", "budget_tokens": 4096}, "`max_tokens` must be"),
    ("claude-sonnet-4-5", {"type": "enabled"}, "budget_tokens: Field required"),
])
def test_the_standin_takes_only_the_thinking_form_each_model_documents(
        standin: AnthropicStandIn, model: str, thinking: dict[str, Any],
        refused: str | None) -> None:
    reply = _post(standin, model, thinking)
    if refused is None:
        assert reply.status_code == 200, reply.text
    else:
        assert reply.status_code == 400
        assert refused in reply.json()["error"]["message"]


def test_the_standin_takes_xhigh_only_from_opus_4_7(standin: AnthropicStandIn) -> None:
    assert _post(standin, "claude-opus-4-6", ADAPTIVE, "xhigh").status_code == 400
    assert _post(standin, "claude-opus-4-7", ADAPTIVE, "xhigh").status_code == 200


FAMILIES = [
    # (model, the thinking dsh must send for effort high, cost per million: in, out)
    ("claude-sonnet-4-5", {"type": "enabled", "budget_tokens": 16000}, None),
    ("claude-opus-4-6", {"type": "adaptive"}, {"effort": "high"}),
    ("claude-sonnet-5-5", {"type": "adaptive"}, {"effort": "high"}),
    ("claude-fable-5", {"type": "adaptive"}, {"effort": "high"}),
]


@pytest.mark.parametrize(("model", "thinking", "output_config"), FAMILIES,
                         ids=[f[0] for f in FAMILIES])
def test_two_tool_using_turns_with_effort_high_on_each_family(
        dsh_home: Path, standin: AnthropicStandIn, model: str, thinking: dict[str, Any],
        output_config: dict[str, Any] | None) -> None:
    """The stand-in refuses a wrong form with a 400, so each model's request carrying the
    form it takes is what lets both turns complete; the cost comes from the shipped prices."""
    standin.script(LOOK, answer("You are here."), LIST, answer("Two entries."))
    with client(dsh_home, anthropic_env(standin), provider="anthropic", model=model,
                reasoning_effort="high") as sdk:
        session = sdk.new_session()
        first = session.run("Where am I?")
        second = session.run("And what is in this folder?")
    assert (first.final_text, second.final_text) == ("You are here.", "Two entries.")
    assert standin.refused == []
    bodies = posts(standin)
    assert len(bodies) == 4
    for body in bodies:
        assert body["model"] == model and body["thinking"] == thinking
        assert body.get("output_config") == output_config
    # the signed thinking of each tool-calling turn went back
    assert bodies[3]["messages"][-2]["content"][0]["signature"] == sign(LIST["thinking"])
    usages = [e.data["usage"] for r in (first, second) for e in r.events
              if e.type == "assistant/message"]
    assert len(usages) == 4 and all(u["costUsd"] > 0 for u in usages)
    assert "estimated" not in usages[0]


def test_a_model_without_thinking_off_is_refused_effort_none_before_any_request(
        dsh_home: Path, standin: AnthropicStandIn, run_dsh: RunDsh) -> None:
    with pytest.raises(JsonRpcError) as info, client(
            dsh_home, anthropic_env(standin), provider="anthropic", model="claude-fable-5",
            reasoning_effort="none"):
        pass
    assert info.value.code == -32602
    assert "'claude-fable-5' on route 'anthropic' always thinks" in info.value.message
    assert "low, medium, high, xhigh, max" in info.value.message
    proc = run_dsh("--profile", "headless", "--provider", "anthropic", "--model",
                   "claude-mythos-5", "--effort", "off", "Hi", env=anthropic_env(standin))
    assert proc.returncode == 2 and "always thinks" in proc.stderr
    assert standin.requests == []  # nothing reached the server


def test_the_rows_default_effort_is_checked_against_the_chosen_model(
        dsh_home: Path, standin: AnthropicStandIn, tmp_path: Path) -> None:
    """A route default the session's model cannot take fails the turn, not the API."""
    patch = tmp_path / "off.yml"
    patch.write_text("- {id: llm-anthropic, merge: {config: {reasoning_effort: none}}}\n")
    with client(dsh_home, anthropic_env(standin), provider="anthropic",
                model="claude-fable-5", patches=(str(patch),)) as sdk:
        result = sdk.new_session().run("Hello")
    assert result.stop_reason == "error"
    error = next(e.data["reason"]["error"] for e in result.events if e.type == "turn/end")
    assert error["code"] == "unsupported-effort" and "always thinks" in error["message"]
    assert standin.requests == []


def test_a_model_no_facts_match_gets_the_defaults_said_once(
        standin: AnthropicStandIn, run_dsh: RunDsh) -> None:
    standin.script(LOOK, answer("Here."))
    proc = run_dsh("--profile", "headless", "--provider", "anthropic", "--model",
                   "claude-nova-1", "--effort", "high", "Where am I?",
                   env=anthropic_env(standin))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("no model_facts entry matches model 'claude-nova-1'") == 1
    first, second = posts(standin)
    assert first["thinking"] == second["thinking"] == {"type": "adaptive"}
    assert first["max_tokens"] == 32000
