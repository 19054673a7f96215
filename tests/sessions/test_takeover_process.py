"""A runtime whose lease is taken over mid-turn tells its client so (issue 34): real
``dsh --profile sdk`` and ``dsh --profile headless`` processes on one ``DSH_HOME``.

The first runtime runs a turn (its scripted model thinks for a minute); it is stopped
(SIGSTOP) past the lease expiry, so a second runtime takes the session over. Resumed
(SIGCONT), the first finds the loss at its next heartbeat and, where it used to stop its
turn in silence (its client waiting for a ``turn/end`` that never came; headless never
exiting), it sends an ``error`` (code ``lease-lost``, naming the new holder), the turn's
``turn/end`` (``error``, ``lease-lost``) and ``session/moved``, none of them stored; then
answers busy (naming the holder) until the session is free again, and takes it back then.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = [pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
              pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP")]

BUSY = -32001
FAST = {"lease_heartbeat_s": 0.1, "lease_expiry_s": 0.5, "idle_release_s": 600}


def patch(tmp: Path, name: str, steps: list[dict[str, Any]]) -> Path:
    """The scripted model answering ``steps``, with leases that expire fast and sessions
    that stay with the runtime that ran them."""
    script = tmp / f"{name}.jsonl"
    script.write_text("".join(json.dumps(step) + "\n" for step in steps))
    path = tmp / f"{name}.yml"
    path.write_text(json.dumps([
        {"id": "llm-scripted", "merge": {"config": {"script": str(script)}}},
        {"id": "sessions", "merge": {"config": FAST}}]))
    return path


def start(patches: list[Path]) -> RuntimeProcess:
    proc = RuntimeProcess("sdk", patches, cwd=Path.cwd())
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    return proc


def blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def take_over(proc: RuntimeProcess, session_id: str, stopped: Any, bound: float = 20) -> None:
    """``session/resume`` in ``proc`` until it has the session (the stopped holder's lease
    expired); bounded, a failure, never a timing."""
    deadline = time.monotonic() + bound
    while "result" not in (answer := proc.call("session/resume", {"sessionId": session_id})):
        assert answer["error"]["code"] == BUSY, answer
        assert time.monotonic() < deadline, f"never taken over: {answer}"
        assert stopped.poll() is None
        time.sleep(0.05)


def stored(home: Path, session_id: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(home / "sessions.db")
    try:
        rows = conn.execute("SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq",
                            (session_id,)).fetchall()
    finally:
        conn.close()
    assert [seq for seq, _ in rows] == list(range(len(rows)))
    return [json.loads(body) for _, body in rows]


def test_a_runtime_whose_running_turn_is_taken_over_tells_its_client_and_refuses_work(
        dsh_home: Path, tmp_path: Path) -> None:
    first = start([OFFLINE_PATCH, patch(tmp_path, "slow", [
        {"text": "thinking for a long time", "delay_ms": 60000},
        {"text": "Back with the session."}])])
    second = None
    try:
        first.request("session/prompt", {"sessionId": "s", "contentBlocks": blocks("go")})
        first.until("session.event", lambda f: f["params"]["event"]["type"] == "step/start",
                    timeout=30)
        second = start([OFFLINE_PATCH, patch(tmp_path, "quick", [{"text": "unused"}])])
        first.signal(signal.SIGSTOP)
        try:
            take_over(second, "s", first.proc)
        finally:
            first.signal(signal.SIGCONT)
        frames = first.until("session.status", lambda f: f["params"]["status"] == "idle",
                             timeout=20)
        told = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
        holder = {"host": socket.gethostname(), "pid": second.proc.pid}
        error, end, moved = told[-3:]
        assert (error["type"], end["type"], moved["type"]) == (
            "error", "turn/end", "session/moved")
        assert not any("seq" in e for e in (error, end, moved))  # none of it is the log's
        assert error["data"]["code"] == "lease-lost" and error["data"]["holder"] == holder
        assert (f"session 's' was taken over by another runtime (pid {second.proc.pid} on "
                f"host {socket.gethostname()})") in error["data"]["message"]
        assert end["data"] == {"turn": 1, "reason": {"kind": "error", "error": {
            "message": error["data"]["message"], "code": "lease-lost"}}}
        assert moved["data"] == {"holder": holder}

        # refused, naming the holder, while the other runtime has it
        for method, params in (("session/prompt", {"sessionId": "s",
                                                   "contentBlocks": blocks("mine?")}),
                               ("session/resume", {"sessionId": "s"})):
            answer = first.call(method, params)
            assert answer["error"]["code"] == BUSY, answer
            assert answer["error"]["data"] == {"retryable": True, "holder": holder}
        # the log is the new holder's: the turn ended as interrupted, nothing of the
        # first runtime's after the takeover
        log = stored(dsh_home, "s")
        assert log[-1]["type"] == "turn/end"
        assert log[-1]["data"]["reason"]["error"]["code"] == "interrupted"
        assert not any(e["type"] == "error" for e in log)

        # free again (the other runtime exits): the first takes it back with its prompt
        second.close_stdin()
        assert second.wait() == 0, second.stderr()
        rid = first.request("session/prompt", {"sessionId": "s",
                                               "contentBlocks": blocks("again")})
        frames = first.until("session.status", lambda f: f["params"]["status"] == "idle",
                             timeout=30)
        assert "result" in next(f for f in frames if f.get("id") == rid)
        again = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
        assert again[0]["seq"] == len(log)
        assert again[-1]["data"]["reason"]["kind"] == "completed"
        first.close_stdin()
        assert first.wait() == 0, first.stderr()
    finally:
        first.finish()
        if second is not None:
            second.finish()


def test_a_headless_run_whose_lease_is_taken_over_ends_with_the_error(
        dsh_home: Path, tmp_path: Path) -> None:
    slow = patch(tmp_path, "slow", [{"text": "thinking for a long time", "delay_ms": 60000}])
    run = subprocess.Popen(
        [sys.executable, "-m", "dsh", "--profile", "headless", "--patch", str(OFFLINE_PATCH),
         "--patch", str(slow), "take your time"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    other = None
    try:
        deadline = time.monotonic() + 30
        while (session := turn_started(dsh_home)) is None:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the headless turn never started"
            time.sleep(0.05)
        other = start([OFFLINE_PATCH, patch(tmp_path, "quick", [{"text": "unused"}])])
        run.send_signal(signal.SIGSTOP)
        try:
            take_over(other, session, run)
        finally:
            run.send_signal(signal.SIGCONT)
        try:
            out, err = run.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the headless run never ended after losing its lease") \
                from None
        assert run.returncode == 1, err
        [last] = [line for line in err.splitlines() if line.startswith("dsh: error:")]
        assert "was taken over by another runtime" in last and "(lease-lost)" in last, err
        assert f"pid {other.proc.pid}" in last
        assert out == ""
        other.close_stdin()
        assert other.wait() == 0, other.stderr()
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if other is not None:
            other.finish()


def turn_started(home: Path) -> str | None:
    """The id of the session whose turn has started (None before)."""
    if not (home / "sessions.db").exists():
        return None
    conn = sqlite3.connect(home / "sessions.db", timeout=5)
    try:
        row = conn.execute("SELECT session_id FROM events WHERE type = 'step/start'"
                           ).fetchone()
    except sqlite3.OperationalError:  # its tables are being created
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])
