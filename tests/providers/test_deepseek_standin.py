"""The shipped DeepSeek route against a DeepSeek V4.1 stand-in, through the real runtime.

The stand-in (``tests/fixtures/deepseek_standin.py``) is a real HTTP server on 127.0.0.1
written from DeepSeek's public docs; it refuses what the real API refuses (retired ids,
a tool-calling assistant message whose ``reasoning_content`` is not passed back, null
content, unanswered tool calls). Nothing is configured but what a user sets:
``DEEPSEEK_BASE_URL`` and ``DEEPSEEK_API_KEY``, and every run must end with the stand-in
having refused nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.sdk import ClientConfig, DshClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from deepseek_standin import PASS_BACK, DeepSeekStandIn
from runtimeproc import dsh_script

KEY = "sk-standin-1f2e3d4c5b6a7980"
RunDsh = Callable[..., subprocess.CompletedProcess[str]]

LOOK = {"reasoning": "The user asks where we are; the working_directory tool says.",
        "content": "Let me check.", "tool_calls": [{"name": "working_directory",
                                                    "arguments": {}}]}
LIST = {"reasoning": "Listing the folder answers the second question.",
        "tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]}


def answer(text: str, reasoning: str = "That is enough to answer.") -> dict[str, Any]:
    return {"reasoning": reasoning, "content": text}


@pytest.fixture
def standin() -> Iterator[DeepSeekStandIn]:
    with DeepSeekStandIn(api_key=KEY) as server:
        yield server


def env_for(server: DeepSeekStandIn) -> dict[str, str]:
    """All a user configures: the base URL and the key."""
    return {"DEEPSEEK_BASE_URL": server.base_url, "DEEPSEEK_API_KEY": KEY}


def client(home: Path, server: DeepSeekStandIn, **config: Any) -> DshClient:
    return DshClient(ClientConfig(dsh_home=home, cwd=Path.cwd(), env=env_for(server),
                                  initialize_timeout=60, request_timeout=60, **config))


def posts(server: DeepSeekStandIn) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.method == "POST"]


def assistant_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


def test_headless_run_with_a_tool_call(run_dsh: RunDsh, standin: DeepSeekStandIn) -> None:
    standin.script(LOOK, answer("You are in the test's working directory."))
    proc = run_dsh("--profile", "headless", "Where am I?", env=env_for(standin))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "You are in the test's working directory.\n"
    assert "working_directory" in proc.stderr  # progress, not the answer
    assert standin.refused == []
    first, second = posts(standin)
    assert first["model"] == "deepseek-flash"
    assert "thinking" not in first and "reasoning_effort" not in first  # API default: on
    assert first["stream_options"] == {"include_usage": True}
    [call] = assistant_messages(second)
    assert call["reasoning_content"] == LOOK["reasoning"]
    assert call["content"] == "Let me check."
    assert call["tool_calls"][0]["function"]["name"] == "working_directory"


def test_headless_json_shows_reasoning_apart_and_usage_with_cache_and_cost(
        run_dsh: RunDsh, standin: DeepSeekStandIn) -> None:
    standin.script(LOOK, answer("Here."))
    proc = run_dsh("--profile", "headless", "--json", "Where am I?", env=env_for(standin))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    thoughts = "".join(e["data"]["text"] for e in events
                       if e["type"] == "assistant/reasoning-delta")
    answers = "".join(e["data"]["text"] for e in events if e["type"] == "assistant/delta")
    assert thoughts == LOOK["reasoning"] + "That is enough to answer."
    assert answers == "Let me check.Here."
    messages = [e["data"] for e in events if e["type"] == "assistant/message"]
    assert [b["type"] for b in messages[0]["message"]["content"]] == [
        "reasoning", "text", "tool-call"]
    usage = messages[1]["usage"]
    assert usage["cacheHitTokens"] > 0  # the second request repeats the first one's prefix
    assert usage["cacheHitTokens"] + usage["cacheMissTokens"] == usage["inputTokens"]
    assert usage["reasoningTokens"] > 0
    assert usage["costUsd"] > 0 and "estimated" not in usage


def test_two_turn_sdk_session_passes_reasoning_back(dsh_home: Path,
                                                    standin: DeepSeekStandIn) -> None:
    standin.script(LOOK, answer("You are here."), LIST, answer("Two entries."))
    with client(dsh_home, standin) as sdk:
        session = sdk.new_session()
        first = session.run("Where am I?")
        second = session.run("And what is in this folder?")
    assert (first.stop_reason, first.final_text) == ("completed", "You are here.")
    assert (second.stop_reason, second.final_text) == ("completed", "Two entries.")
    assert standin.refused == []
    last = posts(standin)[-1]
    # Turn 1's tool-calling message still carries its reasoning in turn 2's requests;
    # turn 1's final answer (no tool call) does not: the API ignores it there.
    sent = [(m.get("content"), m.get("reasoning_content")) for m in assistant_messages(last)]
    assert sent == [("Let me check.", LOOK["reasoning"]), ("You are here.", None),
                    ("", LIST["reasoning"])]
    messages = [e.data["message"] for e in second.events if e.type == "assistant/message"]
    assert messages[-1]["content"][0] == {"type": "reasoning",
                                          "text": "That is enough to answer.",
                                          "field": "reasoning_content"}


def test_resume_and_compaction_keep_the_reasoning(dsh_home: Path,
                                                  standin: DeepSeekStandIn) -> None:
    standin.script(LOOK, answer("You are here."))
    with client(dsh_home, standin) as sdk:
        session = sdk.new_session()
        session.run("Where am I?")
        session_id = session.id
    # A new runtime restores the session from the store: the reasoning came back with it.
    standin.script(LIST, answer("Listed."),
                   {"content": "Summary: the user asked where they are and got an answer."},
                   LIST, answer("Listed again."))
    with client(dsh_home, standin) as sdk:
        session = sdk.resume_session(session_id)
        assert session.run("List the folder.").final_text == "Listed."
        compacted = sdk.request("session/compact", {"sessionId": session_id})
        assert compacted["compacted"] is True
        assert session.run("List it once more.").final_text == "Listed again."
    assert standin.refused == []
    bodies = posts(standin)
    after_resume = assistant_messages(bodies[2])
    assert after_resume[0]["reasoning_content"] == LOOK["reasoning"]
    last = assistant_messages(bodies[-1])
    # Compaction kept the last turn verbatim, its tool-calling message with its reasoning.
    assert ("", LIST["reasoning"]) in [(m["content"], m.get("reasoning_content")) for m in last]


def test_dropped_reasoning_is_what_the_standin_refuses(standin: DeepSeekStandIn) -> None:
    """The stand-in's rule, checked directly: without the reasoning, HTTP 400."""
    import httpx

    standin.script(LOOK)
    with httpx.Client(base_url=standin.base_url,
                      headers={"Authorization": f"Bearer {KEY}"}) as http:
        first = http.post("/chat/completions", json={
            "model": "deepseek-flash", "stream": True,
            "messages": [{"role": "user", "content": "Where am I?"}]})
        call_id = next(json.loads(line[6:])["choices"][0]["delta"]["tool_calls"][0]["id"]
                       for line in first.text.splitlines()
                       if line.startswith("data: {") and '"id": "call_' in line)
        again = http.post("/chat/completions", json={
            "model": "deepseek-flash", "stream": True, "messages": [
                {"role": "user", "content": "Where am I?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "working_directory", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": call_id, "content": "/"}]})
    assert again.status_code == 400
    assert again.json()["error"]["message"] == PASS_BACK


@pytest.mark.parametrize(("model", "problem"), [
    ("deepseek-chat", "retired by DeepSeek on 2026-07-24"),
    ("deepseek-reasoner", "retired by DeepSeek on 2026-07-24"),
    ("gpt-5", "unknown model 'gpt-5'"),
])
def test_retired_and_unknown_models_are_refused_at_initialize(
        dsh_home: Path, standin: DeepSeekStandIn, model: str, problem: str) -> None:
    from dsh.core.errors import JsonRpcError

    with pytest.raises(JsonRpcError) as info, client(dsh_home, standin, model=model):
        pass
    assert info.value.code == -32602 and problem in info.value.message
    assert posts(standin) == []


def test_legacy_flash_id_is_sent_as_deepseek_flash(dsh_home: Path,
                                                   standin: DeepSeekStandIn) -> None:
    standin.script(answer("Hi."))
    with client(dsh_home, standin, model="deepseek-v4-flash") as sdk:
        assert sdk.new_session().run("Hello").final_text == "Hi."
    [body] = posts(standin)
    assert body["model"] == "deepseek-flash"


@pytest.mark.parametrize(("effort", "sent"), [
    ("none", {"thinking": {"type": "disabled"}}),
    ("off", {"thinking": {"type": "disabled"}}),
    ("max", {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}),
    ("minimal", {"thinking": {"type": "enabled"}, "reasoning_effort": "minimal"}),
])
def test_effort_maps_to_the_wire(dsh_home: Path, standin: DeepSeekStandIn, effort: str,
                                 sent: dict[str, Any]) -> None:
    standin.script(LOOK, answer("Done."))
    with client(dsh_home, standin, reasoning_effort=effort) as sdk:
        result = sdk.new_session().run("Where am I?")
    assert result.final_text == "Done." and standin.refused == []
    for body in posts(standin):
        assert {k: body[k] for k in ("thinking", "reasoning_effort") if k in body} == sent
    if effort in ("none", "off"):  # thinking off: no reasoning to show, none to send back
        assert not [e for e in result.events if e.type == "assistant/reasoning-delta"]
        assert "reasoning_content" not in assistant_messages(posts(standin)[1])[0]


def test_unknown_effort_is_refused_at_initialize(dsh_home: Path,
                                                 standin: DeepSeekStandIn) -> None:
    from dsh.core.errors import JsonRpcError

    with pytest.raises(JsonRpcError) as info, client(dsh_home, standin,
                                                     reasoning_effort="extreme"):
        pass
    assert info.value.code == -32602 and "unknown reasoning effort 'extreme'" in \
        info.value.message


# That client never closes its subprocess's stdout/stderr pipes; not ours to fix.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_published_client_two_turns_with_only_base_url_and_key(
        dsh_home: Path, standin: DeepSeekStandIn) -> None:
    """The DeepSeek Harness SDK's own client (model ``deepseek-v4-flash``, its default)."""
    harness_api = pytest.importorskip("deepseek_harness")
    standin.script(LOOK, answer("You are here."), LIST, answer("Two entries."))
    harness = harness_api.DeepSeekHarness(
        dsh_bin=str(dsh_script()), dsh_home=str(dsh_home), cwd=str(Path.cwd()),
        base_url=standin.base_url, api_key=KEY, initialize_timeout_seconds=60,
        request_timeout_seconds=60, shutdown_timeout_seconds=10)
    with harness:
        session = harness.start_session("two-turns")
        first = session.run("Where am I?")
        second = session.run("And what is in this folder?")
    assert (first.final_response, second.final_response) == ("You are here.", "Two entries.")
    assert second.finish_reason == "completed"
    assert standin.refused == []
    assert {b["model"] for b in posts(standin)} == {"deepseek-flash"}


def test_the_standin_runs_as_its_own_process(tmp_path: Path) -> None:
    """``python tests/fixtures/deepseek_standin.py`` serves until its stdin closes."""
    import httpx

    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps(answer("From a process.")) + "\n")
    server = Path(__file__).resolve().parents[1] / "fixtures" / "deepseek_standin.py"
    proc = subprocess.Popen([sys.executable, str(server), "--api-key", KEY, "--script",
                             str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        base_url = json.loads(proc.stdout.readline())["base_url"]
        listed = httpx.get(base_url + "/models", headers={"Authorization": f"Bearer {KEY}"})
        assert [m["id"] for m in listed.json()["data"]] == ["deepseek-flash", "deepseek-v4-pro"]
        refused = httpx.get(base_url + "/models", headers={"Authorization": "Bearer wrong"})
        assert refused.status_code == 401
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_doctor_live_checks_the_default_route(run_dsh: RunDsh, standin: DeepSeekStandIn,
                                              tmp_path: Path) -> None:
    def route_checks(*args: str, env: dict[str, str]) -> dict[str, dict[str, str]]:
        proc = run_dsh("doctor", "--live", "--json", *args, env=env)
        document = json.loads(proc.stdout)
        return {c["id"]: c for c in document["data"]["checks"] if c["id"].startswith("route.")}

    checks = route_checks(env=env_for(standin))
    assert checks["route.deepseek-official.key"]["status"] == "ok"
    assert "DEEPSEEK_API_KEY is set" in checks["route.deepseek-official.key"]["message"]
    server = checks["route.deepseek-official.server"]
    assert server["status"] == "ok" and "lists 'deepseek-flash'" in server["message"]
    assert KEY not in json.dumps(checks)
    refused = route_checks(env={**env_for(standin), "DEEPSEEK_API_KEY": "sk-not-the-key-0"})
    assert refused["route.deepseek-official.server"]["status"] == "fail"
    assert "refused the key" in refused["route.deepseek-official.server"]["message"]
    missing = route_checks(env={"DEEPSEEK_BASE_URL": standin.base_url,
                                "DEEPSEEK_API_KEY": None})  # type: ignore[dict-item]
    assert missing["route.deepseek-official.key"]["status"] == "fail"
    patch = tmp_path / "pro.yml"
    patch.write_text("- {id: llm, merge: {config: {default_model: gpt-4o}}}\n"
                     "- {id: agent, merge: {config: {default_route: deepseek-official}}}\n")
    unlisted = route_checks("--patch", str(patch), env=env_for(standin))
    assert unlisted["route.deepseek-official.server"]["status"] == "fail"
    assert "does not list 'gpt-4o'" in unlisted["route.deepseek-official.server"]["message"]


def test_headless_effort_and_its_usage_errors(run_dsh: RunDsh, standin: DeepSeekStandIn) -> None:
    standin.script({"content": "Quick."})
    proc = run_dsh("--profile", "headless", "--effort", "none", "Hi", env=env_for(standin))
    assert (proc.returncode, proc.stdout) == (0, "Quick.\n")
    assert posts(standin)[0]["thinking"] == {"type": "disabled"}
    bad = run_dsh("--profile", "headless", "--effort", "extreme", "Hi", env=env_for(standin))
    assert bad.returncode == 2 and "unknown reasoning effort 'extreme'" in bad.stderr
    retired = run_dsh("--profile", "headless", "--model", "deepseek-chat", "Hi",
                      env=env_for(standin))
    assert retired.returncode == 2 and "retired by DeepSeek" in retired.stderr
    assert len(posts(standin)) == 1
