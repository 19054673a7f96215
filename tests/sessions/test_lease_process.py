"""One runtime per session: two real ``dsh --profile sdk`` processes on one ``DSH_HOME``.

The first runtime is mid-turn (its scripted model ran a ``bash`` call that sleeps); the
second one's ``session/resume`` and ``session/prompt`` get ``-32001`` naming the holder
(host and pid). Once the first is SIGKILLed, the second takes the lease over (same host,
the pid is gone), closes the interrupted turn and runs on, and the stored log is
contiguous: every seq once, none skipped.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = [pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
              pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")]

BUSY = -32001


def scripted(tmp: Path, name: str, steps: list[dict[str, Any]]) -> Path:
    """A patch pointing the scripted provider at ``steps`` (JSONL)."""
    script = tmp / f"{name}.jsonl"
    script.write_text("".join(json.dumps(step) + "\n" for step in steps))
    patch = tmp / f"{name}.yml"
    where = json.dumps(str(script))
    patch.write_text(f"- {{id: llm-scripted, merge: {{config: {{script: {where}}}}}}}\n")
    return patch


def start(patches: list[Path]) -> RuntimeProcess:
    proc = RuntimeProcess("sdk", patches, cwd=Path.cwd())
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    return proc


def blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def session_events(frames: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"
            and f["params"]["sessionId"] == session_id]


def stored_seqs(home: Path, session_id: str) -> list[int]:
    conn = sqlite3.connect(home / "sessions.db")
    try:
        return [r[0] for r in conn.execute(
            "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
    finally:
        conn.close()


def assert_names_holder(answer: dict[str, Any], pid: int) -> None:
    error = answer.get("error")
    assert error is not None and error["code"] == BUSY, answer
    assert f"pid {pid}" in error["message"], error
    assert socket.gethostname() in error["message"], error
    assert error["data"]["retryable"] is True
    assert error["data"]["holder"] == {"host": socket.gethostname(), "pid": pid}


def test_a_session_mid_turn_in_one_runtime_is_busy_in_another_until_its_holder_dies(
        dsh_home: Path, tmp_path: Path) -> None:
    slow = scripted(tmp_path, "slow", [
        {"text": "Running a long command.",
         "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 120"}}]},
        {"text": "never reached"}])
    quick = scripted(tmp_path, "quick", [{"text": "Taken over and answered."}])
    first = start([OFFLINE_PATCH, slow])
    second = None
    try:
        rid = first.request("session/prompt", {"sessionId": "shared",
                                                "contentBlocks": blocks("go")})
        sent = first.until("session.event", lambda f: f["params"]["event"]["type"]
                           == "tool/call", timeout=30)
        assert any(f.get("id") == rid and "result" in f for f in sent) or \
            "result" in first.response(rid)
        holder = first.proc.pid

        second = start([OFFLINE_PATCH, quick])
        assert_names_holder(second.call("session/resume", {"sessionId": "shared"}), holder)
        assert_names_holder(second.call("session/prompt", {
            "sessionId": "shared", "contentBlocks": blocks("me too")}), holder)
        # nothing of the second runtime reached the log: it holds exactly what the first sent
        received = session_events(sent, "shared")
        assert stored_seqs(dsh_home, "shared")[:len(received)] == [e["seq"] for e in received]

        first.signal(signal.SIGKILL)
        first.wait()
        assert "result" in second.call("session/resume", {"sessionId": "shared"})
        rid = second.request("session/prompt", {"sessionId": "shared",
                                                "contentBlocks": blocks("again")})
        frames = second.until("session.status",
                              lambda f: f["params"]["status"] == "idle", timeout=30)
        assert "result" in next(f for f in frames if f.get("id") == rid)
        more = session_events(frames, "shared")
        assert more[-1]["type"] == "turn/end"
        assert more[-1]["data"]["reason"]["kind"] == "completed"
        history = second.call("session/history", {"sessionId": "shared"})["result"]
        assert history["nextCursor"] is None
        seqs = [e["seq"] for e in history["events"]]
        assert seqs == list(range(len(seqs)))
        assert history["events"][-len(more):] == more
        interrupted = next(e for e in history["events"] if e["type"] == "turn/end")
        assert interrupted["data"]["reason"]["error"]["code"] == "interrupted"
        second.close_stdin()
        assert second.wait() == 0, second.stderr()
    finally:
        first.finish()
        if second is not None:
            second.finish()
    assert stored_seqs(dsh_home, "shared") == seqs
    conn = sqlite3.connect(dsh_home / "sessions.db")
    try:  # a clean exit releases what it held
        assert conn.execute("SELECT count(*) FROM session_leases").fetchone()[0] == 0
    finally:
        conn.close()


def test_the_holder_keeps_its_session_and_a_clean_exit_hands_it_over(
        dsh_home: Path, tmp_path: Path) -> None:
    """An idle session stays with the runtime that ran it for ``idle_release_s`` (long
    here: test_move_process shows what happens after), or until that runtime exits."""
    keep = tmp_path / "keep.yml"
    keep.write_text("- {id: sessions, merge: {config: {idle_release_s: 600}}}\n")
    first = start([OFFLINE_PATCH, keep])
    second = None
    try:
        first.call("session/new", {})
        sid = first.call("session/new", {"cwd": str(Path.cwd())})["result"]["sessionId"]
        second = start([OFFLINE_PATCH])
        assert_names_holder(second.call("session/resume", {"sessionId": sid}),
                            first.proc.pid)
        # reading is not running: the log is readable from any runtime
        assert second.call("session/history", {"sessionId": sid})["result"] == {
            "events": [], "nextCursor": None}
        first.close_stdin()
        assert first.wait() == 0, first.stderr()
        assert second.call("session/resume", {"sessionId": sid}) == {
            "jsonrpc": "2.0", "id": second._next_id, "result": {}}
    finally:
        first.finish()
        if second is not None:
            second.finish()


def until_answered(proc: RuntimeProcess, method: str, params: dict[str, Any],
                   done: Any, bound: float = 20.0) -> dict[str, Any]:
    """Repeat a request until ``done(answer)`` (bounded: a failure, never a timing)."""
    deadline = time.monotonic() + bound
    while True:
        answer = proc.call(method, params)
        if done(answer):
            return answer
        assert time.monotonic() < deadline, f"still {answer} after {bound} s"
        time.sleep(0.05)


def test_a_stalled_holder_loses_the_session_once_its_lease_expires(
        dsh_home: Path, tmp_path: Path) -> None:
    """SIGSTOP the holder: its pid lives, so only the expiry frees the lease. The second
    runtime takes it; the first, resumed, answers busy naming the second."""
    fast = tmp_path / "fast-leases.yml"
    fast.write_text("- {id: sessions, merge: {config: {lease_heartbeat_s: 0.1, "
                    "lease_expiry_s: 0.5, idle_release_s: 600}}}\n")
    first = start([OFFLINE_PATCH, fast])
    second = None
    try:
        rid = first.request("session/prompt", {"sessionId": "s", "contentBlocks": blocks("hi")})
        frames = first.until("session.status", lambda f: f["params"]["status"] == "idle",
                             timeout=30)
        assert "result" in next(f for f in frames if f.get("id") == rid)
        second = start([OFFLINE_PATCH, fast])
        assert_names_holder(second.call("session/resume", {"sessionId": "s"}), first.proc.pid)
        first.signal(signal.SIGSTOP)
        try:
            until_answered(second, "session/resume", {"sessionId": "s"},
                           lambda a: "result" in a)
        finally:
            first.signal(signal.SIGCONT)
        answer = first.call("session/prompt", {"sessionId": "s", "contentBlocks": blocks(
            "still mine?")})
        assert_names_holder(answer, second.proc.pid)
        assert "error" in first.call("session/working-directory/get", {"sessionId": "s"})
        seqs = stored_seqs(dsh_home, "s")
        assert seqs == list(range(len(seqs)))
    finally:
        first.finish()
        if second is not None:
            second.finish()
