"""A turn whose runtime was SIGKILLed reads as interrupted to every reader, not only to the
runtime that resumes it (issue 34): the web API's history, ``session/history`` of another
SDK runtime, the SDK client's ``history()``, the published DeepSeek Harness client's
``session/history`` call, and ``dsh sessions show``.

The first reader that finds the log inside a turn whose holder is known dead (same host,
its pid gone) closes the turn in the store, under the lease it takes and gives back, with
the events a resume would have appended; every reader after it reads those same events,
and a resume later adds none. While the holder lives, nothing is closed: its turn runs.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, REPO, RuntimeProcess, dsh_script
from webkit import WebProcess

pytestmark = [pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
              pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")]

# The first step asks for a tool and gets its result; the second never answers.
CRASH_SCRIPT = [
    {"text": "Let me look first.", "tool_calls": [{"name": "working_directory",
                                                    "arguments": {}}]},
    {"text": "thinking for a long time", "delay_ms": 60000},
]
INTERRUPTED = {"kind": "error", "error": {"message": "the runtime stopped during this turn",
                                          "code": "interrupted"}}


def crash_patch(tmp: Path) -> Path:
    script = tmp / "crash.jsonl"
    script.write_text("".join(json.dumps(step) + "\n" for step in CRASH_SCRIPT))
    patch = tmp / "crash.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {
        "script": str(script)}}}]))
    return patch


def start(patches: list[Path], env: dict[str, str] | None = None) -> RuntimeProcess:
    proc = RuntimeProcess("sdk", patches, cwd=Path.cwd(), env=env)
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    return proc


def events_of(frames: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"
            and f["params"]["sessionId"] == session_id]


def kill_mid_turn(proc: RuntimeProcess, session_id: str) -> list[dict[str, Any]]:
    """Prompt, wait for the second step (the first one's tool ran), SIGKILL; what the
    client was sent."""
    proc.request("session/prompt", {"sessionId": session_id, "contentBlocks": [
        {"type": "text", "text": "look, then think"}]})
    frames = proc.until("session.event", lambda f: f["params"]["event"]["type"]
                        == "step/start" and f["params"]["event"]["data"]["step"] == 2)
    proc.signal(signal.SIGKILL)
    proc.wait()
    while True:
        try:
            frames.append(proc.recv(timeout=2))
        except EOFError:
            break
    sent = events_of(frames, session_id)
    assert sent[-1]["type"] == "step/start"
    return sent


def history(proc: RuntimeProcess, session_id: str) -> list[dict[str, Any]]:
    answer = proc.call("session/history", {"sessionId": session_id})
    assert "result" in answer, answer
    assert answer["result"]["nextCursor"] is None
    return answer["result"]["events"]


def leases(home: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(home / "sessions.db")
    try:
        return conn.execute("SELECT session_id, pid FROM session_leases").fetchall()
    finally:
        conn.close()


def assert_closed(found: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    """``found`` is what the client was sent, then the turn ended as interrupted."""
    assert found[:len(sent)] == sent
    assert [e["type"] for e in found[len(sent):]] == ["step/end", "turn/end"]
    assert found[-1]["data"] == {"turn": 1, "reason": INTERRUPTED}
    assert [e["seq"] for e in found] == list(range(len(found)))


def show_json(run_dsh: Any, session_id: str) -> list[dict[str, Any]]:
    done = run_dsh("sessions", "show", session_id, "--json", "--profile", "sdk",
                   "--patch", str(OFFLINE_PATCH))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["data"]["events"]


# The published client never closes its subprocess's pipes; not ours to fix.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_every_reader_sees_a_killed_turn_end_as_interrupted(
        run_dsh: Any, dsh_home: Path, tmp_path: Path) -> None:
    doomed = start([OFFLINE_PATCH, crash_patch(tmp_path)])
    reader = None
    try:
        reader = start([OFFLINE_PATCH])
        doomed.request("session/prompt", {"sessionId": "crash", "contentBlocks": [
            {"type": "text", "text": "look, then think"}]})
        doomed.until("session.event", lambda f: f["params"]["event"]["type"] == "step/start"
                     and f["params"]["event"]["data"]["step"] == 2)
        # the holder lives: its turn runs, and a reader closes nothing
        running = history(reader, "crash")
        assert running[-1]["type"] == "step/start"
        assert leases(dsh_home) == [("crash", doomed.proc.pid)]
        doomed.signal(signal.SIGKILL)
        doomed.wait()
        sent = running

        # the web page's history (another runtime, which does not resume the session)
        with WebProcess([OFFLINE_PATCH], cwd=Path.cwd()) as web, web.client() as http:
            answer = http.get("/api/sessions/crash/history")
            assert answer.status_code == 200, answer.text
            seen = answer.json()["events"]
        assert_closed(seen, sent)
        assert leases(dsh_home) == []  # the lease taken to close it was given back

        # every other reader reads the very same events
        assert history(reader, "crash") == seen
        assert show_json(run_dsh, "crash") == seen
        from dsh.sdk import ClientConfig, DshClient

        config = ClientConfig(dsh_home=dsh_home, cwd=Path.cwd(), patches=[OFFLINE_PATCH],
                              provider="scripted", model="scripted", carrier="python",
                              initialize_timeout=60, request_timeout=60)
        with DshClient(config) as client:
            assert list(client.history("crash")) == seen
        published = published_history(dsh_home, "crash")
        if published is not None:
            assert published == seen

        # a resume finds nothing left to close, and the session goes on from there
        assert "result" in reader.call("session/resume", {"sessionId": "crash"})
        assert history(reader, "crash") == seen
        reader.close_stdin()
        assert reader.wait() == 0, reader.stderr()
    finally:
        doomed.finish()
        if reader is not None:
            reader.finish()


def test_dsh_sessions_show_closes_it_first_and_the_runtimes_read_it_so(
        run_dsh: Any, dsh_home: Path, tmp_path: Path) -> None:
    doomed = start([OFFLINE_PATCH, crash_patch(tmp_path)])
    try:
        sent = kill_mid_turn(doomed, "crash")
    finally:
        doomed.finish()
    shown = show_json(run_dsh, "crash")
    assert_closed(shown, sent)
    plain = run_dsh("sessions", "show", "crash", "--profile", "sdk")
    assert plain.returncode == 0, plain.stderr
    assert "interrupted" in plain.stdout
    reader = start([OFFLINE_PATCH])
    try:
        assert history(reader, "crash") == shown
        reader.close_stdin()
        assert reader.wait() == 0, reader.stderr()
    finally:
        reader.finish()
    assert leases(dsh_home) == []


def published_history(home: Path, session_id: str) -> list[dict[str, Any]] | None:
    """``session/history`` through the published DeepSeek Harness client (None when it
    is not installed)."""
    try:
        import deepseek_harness
        from pydantic import BaseModel
    except ImportError:
        return None

    class Page(BaseModel):
        events: list[dict[str, Any]]
        nextCursor: str | None = None

    harness = deepseek_harness.DeepSeekHarness(
        dsh_bin=str(dsh_script()), dsh_home=str(home), profile="sdk-minimal",
        patches=(str(OFFLINE_PATCH),), provider="scripted", model="scripted",
        cwd=str(Path.cwd()), initialize_timeout_seconds=60, request_timeout_seconds=60,
        shutdown_timeout_seconds=10)
    with harness:
        page = harness.client.request("session/history", {"sessionId": session_id},
                                      response_model=Page)
    assert page.nextCursor is None
    return page.events


# -- PostgreSQL: the killed runtime and the reader on two homes, one database -----------


def test_a_killed_turn_reads_as_interrupted_from_another_home_on_postgresql(
        tmp_path: Path, pg_cluster: Any, pg_schema: str) -> None:
    pytest.importorskip("psycopg")
    patches = [OFFLINE_PATCH, REPO / "examples" / "postgres" / "patch.yml",
               tmp_path / "schema.yml"]
    patches[2].write_text(json.dumps([{"id": "sessions", "merge": {"config": {
        "schema": pg_schema}}}]))
    homes = [tmp_path / "a", tmp_path / "b"]
    for home in homes:
        home.mkdir(mode=0o700)
    env = [{"DSH_HOME": str(home), "DSH_POSTGRES_DSN": pg_cluster.dsn()} for home in homes]
    doomed = start([*patches, crash_patch(tmp_path)], env[0])
    try:
        sent = kill_mid_turn(doomed, "crash")
    finally:
        doomed.finish()
    reader = start(patches, env[1])
    try:
        seen = history(reader, "crash")
        assert_closed(seen, sent)
        assert history(reader, "crash") == seen
        reader.close_stdin()
        assert reader.wait() == 0, reader.stderr()
    finally:
        reader.finish()
    leased = pg_cluster.psql(f"SELECT count(*) FROM {pg_schema}.session_leases",
                             database="dsh")
    assert leased.strip() == "0"
