"""The operations a session gained for interactive clients, through the SDK client and the
real runtime (scripted model): switching model, effort and route mid-session, the policy
mode, remembered approvals, a denial's note reaching the model, the user's own shell
command, the files a session changed, and its usage and cost.

What the model was sent is read back from the scripted provider's ``record`` file, so
"the model sees it" is checked where it matters: in the request.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsh.sdk import ApprovalAnswer, ApprovalRequest, ClientConfig, DshClient, JsonRpcError


def scripted(tmp_path: Path, responses: list[dict[str, Any]], *,
             idle_release_s: float | None = None) -> tuple[Path, Path]:
    """A patch making ``responses`` the model, and the file its requests are recorded in;
    with ``idle_release_s``, sessions whose leases are given back that soon after their
    work ends (checked every 0.1 s)."""
    script, record = tmp_path / "script.yml", tmp_path / "requests.jsonl"
    script.write_text(yaml.safe_dump(responses))
    patch = tmp_path / "patch.yml"
    rows: list[dict[str, Any]] = [
        {"insert": [{"id": "llm-scripted", "name": "llm-scripted",
                     "config": {"script": str(script), "record": str(record)}}]},
        {"id": "agent", "merge": {"config": {"default_route": "scripted"}}},
    ]
    if idle_release_s is not None:
        rows.append({"id": "sessions", "merge": {"config": {
            "idle_release_s": idle_release_s, "lease_heartbeat_s": 0.1,
            "lease_expiry_s": 5}}})
    patch.write_text(yaml.safe_dump(rows))
    return patch, record


def holder(home: Path, session_id: str) -> Any:
    """Who leases ``session_id`` in the home's store (None: nobody)."""
    conn = sqlite3.connect(home / "sessions.db")
    try:
        return conn.execute("SELECT pid FROM session_leases WHERE session_id = ?",
                            (session_id,)).fetchone()
    finally:
        conn.close()


def given_back(home: Path, session_id: str, bound: float = 30.0) -> None:
    """Wait until nobody leases ``session_id`` (bounded: a failure, never a timing)."""
    deadline = time.monotonic() + bound
    while holder(home, session_id) is not None:
        assert time.monotonic() < deadline, "the session's lease was never given back"
        time.sleep(0.05)


def stored_events(home: Path, session_id: str) -> list[dict[str, Any]]:
    """The session's log as the store holds it, in seq order."""
    conn = sqlite3.connect(home / "sessions.db")
    try:
        rows = conn.execute("SELECT body FROM events WHERE session_id = ? ORDER BY seq",
                            (session_id,)).fetchall()
    finally:
        conn.close()
    return [json.loads(body) for (body,) in rows]


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
        [summary] = client.sessions(session_id=session.id)
    # The write outside the workspace was refused (no approver): not a change.
    assert changes["files"] == ["new.txt", "old.txt"]
    assert [(c["path"], c["tool"], c["turn"]) for c in changes["changes"]] == [
        ("new.txt", "write_file", 1), ("old.txt", "edit_file", 1)]
    # Each change is the tool's own diff (data.diff): the file before and after, so an
    # edit comes with its context lines, not only what the model's arguments said.
    created, edited = (c["diff"] for c in changes["changes"])
    assert created["kind"] == "add" and created["unified"] == (
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n")
    assert (edited["kind"], edited["added"], edited["removed"]) == ("update", 1, 1)
    assert edited["unified"] == ("--- a/old.txt\n+++ b/old.txt\n@@ -1,2 +1,2 @@\n"
                                 " alpha\n-beta\n+gamma\n")
    # The session's summary (what a listing reads, no log) agrees with the log's sums.
    assert summary["turns"] == 1 and summary["costUsd"] == pytest.approx(0.0015)
    assert (summary["usage"]["inputTokens"], summary["usage"]["outputTokens"]) == (2200, 60)
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


def test_a_sessions_own_choices_work_once_its_lease_was_given_back_and_are_kept(
        tmp_path: Path, dsh_home: Path, work: Path) -> None:
    """Every operation that writes takes the session first: parked here (its lease given
    back after idle_release_s) or only stored (another runtime's memory never had it), it
    works, is logged under the lease it took, and the lease is given back again."""
    patch, record = scripted(tmp_path, [{"text": "ok"}], idle_release_s=0.2)
    with DshClient(config(dsh_home, patch, work)) as client:
        session = client.new_session()
        session.run("first")
        given_back(dsh_home, session.id)
        assert session.set_policy("ask")["policy"] == "ask"
        given_back(dsh_home, session.id)
        assert session.set_model(model="switched")["model"] == "switched"
        given_back(dsh_home, session.id)
        assert session.forget_approvals()["remembered"] == {}
        given_back(dsh_home, session.id)
        ran = session.shell("echo from-the-user")
        assert ran["output"].startswith("from-the-user\n") and not ran["isError"]
        given_back(dsh_home, session.id)
        settings = session.settings()
        assert (settings["model"], settings["policy"]) == ("switched", "ask")
        session_id = session.id
    # Logged in the store, in order, under the leases taken for them.
    log = stored_events(dsh_home, session_id)
    assert [e["seq"] for e in log] == list(range(len(log)))
    changed = [e["data"] for e in log if e["type"] == "session/settings"]
    assert changed[-2:] == [{"policy": "ask"}, {"policy": "ask", "model": "switched"}]
    assert [e["data"]["command"] for e in log if e["type"] == "user/shell"] == [
        "echo from-the-user"]
    # A runtime that never loaded it: a write restores it first, then is kept.
    with DshClient(config(dsh_home, patch, work)) as client:
        answer = client.request("session/policy/set", {"sessionId": session_id,
                                                       "mode": "deny-mutating"})
        assert (answer["model"], answer["policy"]) == ("switched", "deny-mutating")
        given_back(dsh_home, session_id)
        assert client.resume_session(session_id).run("second").final_text == "ok"
    assert [r["model"] for r in requests(record)] == ["scripted", "switched"]
    assert [e["data"] for e in stored_events(dsh_home, session_id)
            if e["type"] == "session/settings"][-1]["policy"] == "deny-mutating"


def test_the_listing_narrowed_to_one_session_a_workspace_or_the_latest(
        tmp_path: Path, dsh_home: Path, work: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    patch, _ = scripted(tmp_path, [{"text": "ok"}])
    with DshClient(config(dsh_home, patch, work)) as client:
        ran = []
        for cwd in (work, other, work):
            session = client.new_session(cwd=cwd)
            session.run(f"in {cwd.name}")
            ran.append(session.id)
            time.sleep(0.01)  # a later millisecond: "updated last" is then one session
        first, elsewhere, last = ran
        assert [s["sessionId"] for s in client.sessions()] == sorted(ran)
        assert [s["sessionId"] for s in client.sessions(limit=2)] == [last, elsewhere]
        here = str(work.resolve())
        assert [s["sessionId"] for s in client.sessions(workspace=here, limit=1)] == [last]
        assert [s["sessionId"] for s in client.sessions(workspace=here)] == sorted(
            [first, last])
        [one] = client.sessions(session_id=elsewhere)
        assert (one["workspace"], one["turns"], one["title"]) == (
            str(other.resolve()), 1, "in other")
        assert client.sessions(session_id="no-such-session") == []
        for bad in ({"limit": 0}, {"limit": "3"}, {"workspace": "relative/path"},
                    {"sessionId": ""}):
            with pytest.raises(JsonRpcError) as refused:
                client.request("session/list", bad)
            assert refused.value.code == -32602, bad
