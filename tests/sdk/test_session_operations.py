"""The operations a session gained for interactive clients, through the SDK client and the
real runtime (scripted model): switching model, effort and route mid-session, the policy
mode, remembered approvals, a denial's note reaching the model, the user's own shell
command, the files a session changed, and its usage and cost.

What the model was sent is read back from the scripted provider's ``record`` file, so
"the model sees it" is checked where it matters: in the request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsh.sdk import ApprovalAnswer, ApprovalRequest, ClientConfig, DshClient, JsonRpcError


def scripted(tmp_path: Path, responses: list[dict[str, Any]]) -> tuple[Path, Path]:
    """A patch making ``responses`` the model, and the file its requests are recorded in."""
    script, record = tmp_path / "script.yml", tmp_path / "requests.jsonl"
    script.write_text(yaml.safe_dump(responses))
    patch = tmp_path / "patch.yml"
    patch.write_text(yaml.safe_dump([
        {"insert": [{"id": "llm-scripted", "name": "llm-scripted",
                     "config": {"script": str(script), "record": str(record)}}]},
        {"id": "agent", "merge": {"config": {"default_route": "scripted"}}},
    ]))
    return patch, record


def requests(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def texts(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message.get("content", ()))


def config(dsh_home: Path, patch: Path, work: Path) -> ClientConfig:
    return ClientConfig(profile="sdk", patches=[patch], dsh_home=dsh_home, cwd=work,
                        initialize_timeout=60.0)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def test_model_and_effort_switch_for_the_next_turn_and_bad_ones_are_refused(
        tmp_path: Path, dsh_home: Path, work: Path) -> None:
    patch, record = scripted(tmp_path, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    with DshClient(config(dsh_home, patch, work)) as client:
        session = client.new_session()
        assert session.settings()["model"] == "scripted"
        session.run("first")
        switched = session.set_model(model="bigger", reasoning_effort="high")
        assert (switched["provider"], switched["model"], switched["reasoningEffort"]) == (
            "scripted", "bigger", "high")
        session.run("second")
        with pytest.raises(JsonRpcError) as unknown_route:
            session.set_model(provider="nowhere")
        assert "unknown provider route 'nowhere'" in str(unknown_route.value)
        assert "scripted" in str(unknown_route.value)  # names what is accepted
        with pytest.raises(JsonRpcError) as bad_effort:
            session.set_model(reasoning_effort="enormous")
        assert "known: none, off" in str(bad_effort.value)
        with pytest.raises(JsonRpcError):
            session.set_model()  # nothing to switch
        assert session.settings()["model"] == "bigger"  # a refusal changes nothing
        back = session.set_model(model=None)
        assert back["model"] == "scripted"
        session.run("third")
        other = client.new_session()
        assert other.settings()["model"] == "scripted"  # one session's choice only
    assert [r["model"] for r in requests(record)] == ["scripted", "bigger", "scripted"]


def test_the_choice_survives_a_restart(tmp_path: Path, dsh_home: Path, work: Path) -> None:
    patch, record = scripted(tmp_path, [{"text": "one"}, {"text": "two"}])
    with DshClient(config(dsh_home, patch, work)) as client:
        session = client.new_session()
        session.set_model(model="kept")
        session.set_policy("deny-mutating")
        session.run("first")
        session_id = session.id
    with DshClient(config(dsh_home, patch, work)) as client:
        session = client.resume_session(session_id)
        settings = session.settings()
        assert (settings["model"], settings["policy"]) == ("kept", "deny-mutating")
        session.run("second")
    assert [r["model"] for r in requests(record)] == ["kept", "kept"]


def test_policy_modes_and_remembered_decisions(tmp_path: Path, dsh_home: Path,
                                              work: Path) -> None:
    def write(name: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": "write_file",
                                "arguments": {"path": name, "content": name}}]}

    patch, _ = scripted(tmp_path, [write("a.txt"), write("b.txt"), {"text": "done"},
                                   {"tool_calls": [{"name": "bash",
                                                    "arguments": {"command": "true"}}]},
                                   {"tool_calls": [{"name": "bash",
                                                    "arguments": {"command": "true"}}]},
                                   {"text": "done"}])
    asked: list[str] = []
    answers = iter([ApprovalAnswer("allow", remember=True),
                    ApprovalAnswer("deny", remember=True)])

    def approve(request: ApprovalRequest) -> ApprovalAnswer:
        asked.append(request.tool_call["name"])
        return next(answers)

    with DshClient(config(dsh_home, patch, work), on_approval=approve) as client:
        session = client.new_session()
        settings = session.settings()
        assert settings["policy"] is None and settings["policyDefault"] == "workspace"
        assert settings["policyModes"] == ["workspace", "allow-all", "ask", "deny-mutating"]
        with pytest.raises(JsonRpcError) as bad:
            session.set_policy("lenient")
        assert "accepted: workspace, allow-all, ask, deny-mutating" in str(bad.value)
        assert session.set_policy("ask")["policy"] == "ask"
        session.run("write two files")
        assert asked == ["write_file"]  # the second write was not asked about
        assert (work / "a.txt").exists() and (work / "b.txt").exists()
        assert session.settings()["remembered"] == {"write_file": "allow"}
        result = session.run("run it twice")
        assert asked == ["write_file", "bash"]  # denied always: the second is not asked
        denials = [e for e in result.events if e.type == "tool/result"]
        assert [e.data["message"]["isError"] for e in denials] == [True, True]
        assert "for the rest of this session" in texts(denials[1].data["message"])
        assert session.forget_approvals()["remembered"] == {}


def test_a_denial_note_reaches_the_model(tmp_path: Path, dsh_home: Path, work: Path) -> None:
    patch, record = scripted(tmp_path, [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "x.py", "content": "x"}}]},
        {"text": "understood"}])
    note = "use the existing module in lib/ instead"
    with DshClient(config(dsh_home, patch, work),
                   on_approval=lambda r: ApprovalAnswer("deny", note=note)) as client:
        session = client.new_session()
        session.set_policy("ask")
        assert session.run("make x.py").final_text == "understood"
    sent = requests(record)[1]["messages"][-1]
    assert sent["role"] == "tool" and sent["isError"]
    assert texts(sent) == f"Error: the client denied this tool call. The user's note: {note}"
    assert not (work / "x.py").exists()


def test_changes_usage_and_cost(tmp_path: Path, dsh_home: Path, work: Path) -> None:
    (work / "old.txt").write_text("alpha\nbeta\n")
    patch, _ = scripted(tmp_path, [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "new.txt",
                                                             "content": "hello\n"}},
                        {"name": "edit_file", "arguments": {"path": "old.txt",
                                                            "old_string": "beta",
                                                            "new_string": "gamma"}},
                        {"name": "write_file", "arguments": {"path": "/etc/nope",
                                                             "content": "x"}}],
         "usage": {"inputTokens": 1000, "outputTokens": 50, "cacheHitTokens": 800,
                   "costUsd": 0.0012}},
        {"text": "done", "usage": {"inputTokens": 1200, "outputTokens": 10,
                                   "cacheHitTokens": 1000, "reasoningTokens": 4,
                                   "costUsd": 0.0003}}])
    with DshClient(config(dsh_home, patch, work)) as client:
        session = client.new_session()
        session.run("change things")
        changes = session.changes()
        usage = session.usage()
    # The write outside the workspace was refused (no approver): not a change.
    assert changes["files"] == ["new.txt", "old.txt"]
    assert [(c["path"], c["tool"], c["turn"]) for c in changes["changes"]] == [
        ("new.txt", "write_file", 1), ("old.txt", "edit_file", 1)]
    assert (work / "old.txt").read_text() == "alpha\ngamma\n"
    assert usage["inputTokens"] == 2200 and usage["outputTokens"] == 60
    assert usage["cacheHitTokens"] == 1800 and usage["reasoningTokens"] == 4
    assert usage["costUsd"] == pytest.approx(0.0015)
    assert usage["turns"] == 1 and usage["contextTokens"] == 1200
    assert usage["contextWindow"] == 128000 and usage["model"] == "scripted"


def test_the_users_own_command_is_shown_and_the_model_reads_it(
        tmp_path: Path, dsh_home: Path, work: Path) -> None:
    patch, record = scripted(tmp_path, [{"text": "I see it"}])
    (work / "notes.txt").write_text("remember the milk\n")
    with DshClient(config(dsh_home, patch, work)) as client:
        session = client.new_session()
        ran = session.shell("cat notes.txt")
        assert "remember the milk" in ran["output"] and not ran["isError"]
        with pytest.raises(JsonRpcError):
            session.shell("   ")
        session.run("what did I just look at?")
        logged = [e for e in session.history() if e["type"] == "user/shell"]
    assert logged[0]["data"]["command"] == "cat notes.txt"
    sent = [m for m in requests(record)[0]["messages"] if m["role"] == "user"]
    shown = [m for m in sent if m.get("source", {}).get("kind") == "user-shell"]
    assert "$ cat notes.txt\nremember the milk" in texts(shown[0])


def test_models_lists_each_route_with_its_default_first(tmp_path: Path, dsh_home: Path,
                                                        work: Path) -> None:
    patch, _ = scripted(tmp_path, [])
    with DshClient(config(dsh_home, patch, work)) as client:
        routes = {r["provider"]: r["models"] for r in client.models()}
    assert routes["scripted"] == ["scripted"]
    assert routes["deepseek-official"] == ["deepseek-flash", "deepseek-v4-pro"]
    assert routes["anthropic"][0] == "claude-sonnet-5-5"
