"""The ``openai`` route (OpenAI's Responses API) against a Responses stand-in, through the
real runtime; and the stand-in itself against OpenAI's own Python SDK.

The stand-in (``tests/fixtures/responses_standin.py``) is a real HTTP server on 127.0.0.1
written from the ``openai`` package's types. With ``store: false`` it keeps nothing, so it
refuses a reasoning item that comes back without the ``encrypted_content`` it gave, and a
function call sent back without the reasoning item that preceded it, as OpenAI's API
does. The official client parses its streams (strictly validated against the package's
event types as well), so what it streams is what OpenAI's API streams.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from responses_standin import ResponsesStandIn, decrypt

from dsh.core.errors import JsonRpcError
from dsh.sdk import ClientConfig, DshClient

openai = pytest.importorskip("openai")

KEY = "sk-proj-standin-4c5d6e7f8091a2b3"
RunDsh = Callable[..., subprocess.CompletedProcess[str]]
LOOK = {"reasoning": "**Locating**\n\nThe working_directory tool says where we are.",
        "text": "Let me check.", "tool_calls": [{"name": "working_directory",
                                                  "arguments": {}}]}
LIST = {"reasoning": "A listing answers this.",
        "tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]}
WHERE_TOOL = {"type": "function", "name": "working_directory", "strict": False,
              "description": "Where the session works.",
              "parameters": {"type": "object", "properties": {}}}


def answer(text: str, reasoning: str = "Enough to answer.") -> dict[str, Any]:
    return {"reasoning": reasoning, "text": text}


@pytest.fixture
def standin() -> Iterator[ResponsesStandIn]:
    with ResponsesStandIn(api_key=KEY) as server:
        yield server


def env_for(server: ResponsesStandIn) -> dict[str, str]:
    """All a user configures for the shipped openai route: base URL and key."""
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY}


def client(home: Path, server: ResponsesStandIn, **config: Any) -> DshClient:
    return DshClient(ClientConfig(dsh_home=home, cwd=Path.cwd(), env=env_for(server),
                                  provider="openai", initialize_timeout=60,
                                  request_timeout=60, **config))


@pytest.fixture
def official(standin: ResponsesStandIn) -> Iterator[Callable[[ResponsesStandIn], Any]]:
    """OpenAI's client for a stand-in, closed after the test (its pool keeps connections
    open, which the stand-in would wait for when it stops)."""
    made: list[Any] = []

    def make(server: ResponsesStandIn) -> Any:
        made.append(openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0))
        return made[-1]

    yield make
    for sdk in made:
        sdk.close()


def posts(server: ResponsesStandIn) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.method == "POST"]


# -- the stand-in is faithful ------------------------------------------------------------------


def test_the_official_client_parses_the_stream_and_round_trips_reasoning(
        standin: ResponsesStandIn, official: Callable[[ResponsesStandIn], Any]) -> None:
    standin.script(LOOK, answer("You are in /work."))
    sdk = official(standin)
    conversation: list[Any] = [{"role": "user", "content": "Where am I?"}]
    options = {"model": "gpt-5.5", "tools": [WHERE_TOOL], "store": False,
               "include": ["reasoning.encrypted_content"],
               "reasoning": {"effort": "high", "summary": "auto"}}
    with sdk.responses.stream(input=conversation, **options) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in kinds
    assert "response.function_call_arguments.delta" in kinds
    reasoning, _, call = first.output
    assert reasoning.type == "reasoning" and decrypt(reasoning.encrypted_content)["id"] == \
        reasoning.id
    assert reasoning.summary[0].text == LOOK["reasoning"]
    assert first.output_text == "Let me check."
    assert (call.type, call.name, json.loads(call.arguments)) == (
        "function_call", "working_directory", {})
    assert first.usage.output_tokens_details.reasoning_tokens > 0
    # The second turn as OpenAI's docs write it: the output items go back as they came.
    conversation += [*first.output,
                     {"type": "function_call_output", "call_id": call.call_id, "output": "/work"}]
    with sdk.responses.stream(input=conversation, **options) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == "You are in /work." and standin.refused == []


def test_the_official_client_sees_the_refusals_of_a_stateless_server(
        standin: ResponsesStandIn, official: Callable[[ResponsesStandIn], Any]) -> None:
    standin.script(LOOK)
    sdk = official(standin)
    options = {"model": "gpt-5.5", "tools": [WHERE_TOOL], "store": False,
               "include": ["reasoning.encrypted_content"]}
    conversation: list[Any] = [{"role": "user", "content": "Where am I?"}]
    with sdk.responses.stream(input=conversation, **options) as stream:
        first = stream.get_final_response()
    reasoning, _, call = first.output
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "/"}
    with pytest.raises(openai.BadRequestError, match="without its required 'reasoning' item"):
        sdk.responses.create(input=[*conversation, call, output], stream=True, **options)
    unsealed = {"type": "reasoning", "id": reasoning.id, "summary": []}
    with pytest.raises(openai.NotFoundError, match="Items are not persisted"):
        sdk.responses.create(input=[*conversation, unsealed, call, output], stream=True,
                             **options)


def test_every_event_validates_against_the_packages_types(standin: ResponsesStandIn) -> None:
    """Strictly, field by field (the client itself constructs events without checking)."""
    import httpx
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    adapter = TypeAdapter(ResponseStreamEvent)
    standin.script(LOOK, {"text": "cut short", "incomplete": "max_output_tokens"},
                   {"text": "", "failed": {"code": "server_error", "message": "boom"}})
    seen: set[str] = set()
    with httpx.Client(base_url=standin.base_url,
                      headers={"Authorization": f"Bearer {KEY}"}) as http:
        for _ in range(3):
            reply = http.post("/responses", json={
                "model": "gpt-5.5", "stream": True, "store": False,
                "include": ["reasoning.encrypted_content"], "tools": [WHERE_TOOL],
                "input": [{"role": "user", "content": "Where am I?"}]})
            assert reply.status_code == 200
            names = [line[7:] for line in reply.text.splitlines() if line.startswith("event: ")]
            payloads = [json.loads(line[6:]) for line in reply.text.splitlines()
                        if line.startswith("data: ")]
            assert names == [p["type"] for p in payloads]
            assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
            for payload in payloads:
                adapter.validate_python(payload)
                seen.add(payload["type"])
    assert {"response.completed", "response.incomplete", "response.failed",
            "response.output_item.done", "response.content_part.done"} <= seen


# -- dsh's openai route ----------------------------------------------------------------------


def test_two_tool_using_turns_pass_the_encrypted_reasoning_back(
        dsh_home: Path, standin: ResponsesStandIn) -> None:
    standin.script(LOOK, answer("You are here."), LIST, answer("Two entries."))
    with client(dsh_home, standin, reasoning_effort="high") as sdk:
        session = sdk.new_session()
        first = session.run("Where am I?")
        second = session.run("And what is in this folder?")
    assert (first.final_text, second.final_text) == ("You are here.", "Two entries.")
    assert standin.refused == []
    bodies = posts(standin)
    assert len(bodies) == 4
    for body in bodies:
        assert body["model"] == "gpt-5.5" and body["stream"] is True
        assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
        assert body["reasoning"] == {"effort": "high", "summary": "auto"}
        assert body["instructions"] and body["tools"][0]["type"] == "function"
    items = bodies[3]["input"]
    kinds = [i.get("type") for i in items]
    assert kinds == ["message", "message",  # the working context, the first prompt
                     "reasoning", "message", "function_call", "function_call_output",
                     "reasoning", "message",  # the first turn's answer
                     "message",  # the second prompt
                     "reasoning", "function_call", "function_call_output"]
    reasoning = [i for i in items if i["type"] == "reasoning"]
    for item in reasoning:  # each one exactly as the stand-in sealed it
        assert item["encrypted_content"] == standin.issued[item["id"]]
    assert reasoning[0]["summary"] == [{"type": "summary_text", "text": LOOK["reasoning"]}]
    calls = [i for i in items if i["type"] == "function_call"]
    outputs = [i for i in items if i["type"] == "function_call_output"]
    assert [c["call_id"] for c in calls] == [o["call_id"] for o in outputs]
    # reasoning shown apart from the answer, usage with cache, reasoning and cost
    assert "Locating" not in first.final_text
    messages = [e.data for r in (first, second) for e in r.events
                if e.type == "assistant/message"]
    assert messages[0]["message"]["content"][0]["type"] == "reasoning"
    assert messages[0]["message"]["content"][0]["text"] == LOOK["reasoning"]
    usage = messages[-1]["usage"]
    assert usage["cacheHitTokens"] > 0 and usage["reasoningTokens"] > 0
    assert all(m["usage"]["costUsd"] > 0 for m in messages)


def test_a_stream_without_response_completed_is_asked_again_once(
        dsh_home: Path, standin: ResponsesStandIn) -> None:
    half = {"text": "Half an answ", "drop_completed": True}
    standin.script(half, {"text": "A whole answer."}, half, half, {"text": "Fine now."})
    with client(dsh_home, standin) as sdk:
        session = sdk.new_session()
        retried = session.run("Hello")
        failed = session.run("Hello again")
        after = session.run("Once more")
        history = sdk.request("session/history", {"sessionId": session.id})["events"]
    assert (retried.stop_reason, retried.final_text) == ("completed", "A whole answer.")
    assert [e.type for e in retried.events].count("assistant/retry") == 1
    assert failed.stop_reason == "error"
    error = next(e.data["reason"]["error"] for e in failed.events if e.type == "turn/end")
    assert error["code"] == "stream-interrupted"
    assert (after.stop_reason, after.final_text) == ("completed", "Fine now.")
    stored = [e["data"]["message"]["content"] for e in history
              if e["type"] == "assistant/message"]
    assert stored == [[{"type": "text", "text": "A whole answer."}],
                      [{"type": "text", "text": "Fine now."}]]  # never a half answer


def test_length_and_server_failures(dsh_home: Path, standin: ResponsesStandIn) -> None:
    standin.script({"text": "Cut", "incomplete": "max_output_tokens"},
                   {"failed": {"code": "invalid_prompt", "message": "not allowed"}})
    with client(dsh_home, standin) as sdk:
        session = sdk.new_session()
        cut = session.run("Long")
        refused = session.run("Bad")
    end = next(e.data["reason"] for e in cut.events if e.type == "turn/end")
    assert end["kind"] == "max-tokens"
    error = next(e.data["reason"]["error"] for e in refused.events if e.type == "turn/end")
    assert error["code"] == "server-error" and "not allowed" in error["message"]
    assert len(posts(standin)) == 2  # a refused prompt is not asked again


def test_efforts_and_models_that_do_not_reason(dsh_home: Path,
                                               standin: ResponsesStandIn) -> None:
    with pytest.raises(JsonRpcError) as info, client(dsh_home, standin,
                                                     reasoning_effort="ultra"):
        pass
    assert info.value.code == -32602 and "route 'openai'" in info.value.message
    with pytest.raises(JsonRpcError) as info, client(dsh_home, standin, model="gpt-4.1",
                                                     reasoning_effort="low"):
        pass
    assert "does not reason" in info.value.message
    assert posts(standin) == []
    standin.script({"text": "Plain."}, {"text": "Off."})
    with client(dsh_home, standin, model="gpt-4.1") as sdk:
        assert sdk.new_session().run("Hi").final_text == "Plain."
    with client(dsh_home, standin, reasoning_effort="off") as sdk:
        assert sdk.new_session().run("Hi").final_text == "Off."
    plain, off = posts(standin)
    assert "reasoning" not in plain and "include" not in plain
    assert off["reasoning"]["effort"] == "none" and standin.refused == []


def test_the_standin_runs_as_its_own_process(tmp_path: Path) -> None:
    import sys

    import httpx

    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps(answer("From a process.")) + "\n")
    server = Path(__file__).resolve().parents[1] / "fixtures" / "responses_standin.py"
    proc = subprocess.Popen([sys.executable, str(server), "--api-key", KEY, "--script",
                             str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        base_url = json.loads(proc.stdout.readline())["base_url"]
        listed = httpx.get(base_url + "/models", headers={"Authorization": f"Bearer {KEY}"})
        assert "gpt-5.5" in [m["id"] for m in listed.json()["data"]]
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
