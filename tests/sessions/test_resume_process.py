"""Sessions outlive their runtime: real ``dsh --profile sdk`` processes over JSON-RPC.

The first process runs a turn (or is killed with SIGKILL in the middle of one); a second
process on the same home resumes the session from ``sessions.db``.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

CRASH_SCRIPT = """\
- text: "Let me look first."
  tool_calls: [{name: working_directory, arguments: {}}]
- {text: "thinking for a long time", delay_ms: 60000}
"""
CRASH_PATCH = "- {id: llm-scripted, merge: {config: {script: %s}}}\n"


def start(patches: list[Path]) -> RuntimeProcess:
    proc = RuntimeProcess("sdk", patches, cwd=Path.cwd())
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    return proc


def prompt(proc: RuntimeProcess, session_id: str, text: str) -> int:
    """Send a prompt; the caller reads the frames (events may precede the answer)."""
    return proc.request("session/prompt", {"sessionId": session_id,
                                           "contentBlocks": [{"type": "text", "text": text}]})


def events_of(frames: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"
            and f["params"]["sessionId"] == session_id]


def run_to_idle(proc: RuntimeProcess, session_id: str, text: str) -> list[dict[str, Any]]:
    """Prompt and collect the session's events until it reports ``idle``."""
    rid = prompt(proc, session_id, text)
    frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                        timeout=30)
    answer = next(f for f in frames if f.get("id") == rid)
    assert "messageId" in answer.get("result", {}), answer
    return events_of(frames, session_id)


def stop(proc: RuntimeProcess) -> None:
    proc.close_stdin()
    assert proc.wait() == 0, proc.stderr()
    proc.finish()


def history(proc: RuntimeProcess, session_id: str) -> list[dict[str, Any]]:
    assert "result" in proc.call("session/resume", {"sessionId": session_id})
    answer = proc.call("session/history", {"sessionId": session_id})
    return answer["result"]["events"]


def stored(home: Path, session_id: str) -> tuple[str, list[int]]:
    """The database's integrity verdict and the seqs stored for ``session_id``."""
    conn = sqlite3.connect(home / "sessions.db")
    try:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        seqs = [r[0] for r in conn.execute(
            "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
    finally:
        conn.close()
    return verdict, seqs


def test_a_session_resumes_in_a_new_process(dsh_home: Path) -> None:
    first = start([OFFLINE_PATCH])
    try:
        seen = run_to_idle(first, "keep", "look around")
        stop(first)
    finally:
        first.finish()
    assert seen[-1]["type"] == "turn/end" and seen[-1]["data"]["reason"]["kind"] == "completed"

    second = start([OFFLINE_PATCH])
    try:
        assert history(second, "keep") == seen
        listed = second.call("session/list")["result"]["sessions"]
        assert [s["sessionId"] for s in listed] == ["keep"]
        # The script asked to move to the parent, outside the root: nobody approved it.
        assert Path(listed[0]["cwd"]) == Path.cwd()
        more = run_to_idle(second, "keep", "and now?")
        stop(second)
    finally:
        second.finish()
    assert [e["seq"] for e in more] == list(range(len(seen), len(seen) + len(more)))
    assert next(e["data"] for e in more if e["type"] == "turn/start") == {"turn": 2}
    assert not [e for e in more if e["type"] in ("system/message", "session/title")]
    assert more[-1]["data"]["reason"]["kind"] == "completed"
    assert stored(dsh_home, "keep") == ("ok", list(range(len(seen) + len(more))))
    conn = sqlite3.connect(dsh_home / "sessions.db")
    try:  # a clean exit closes what it held; the row keeps profile, cwd and title
        row = conn.execute("SELECT status, owner_pid, profile, cwd, title FROM sessions").fetchall()
    finally:
        conn.close()
    # the offline script's move to the parent is refused every turn, so the cwd stays;
    # the workspace root is kept with the row's state
    assert row == [("closed", None, "sdk", str(Path.cwd()), "look around")]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_killed_runtime_loses_nothing_it_sent(dsh_home: Path, tmp_path: Path) -> None:
    script = tmp_path / "crash.yml"
    script.write_text(CRASH_SCRIPT)
    patch = tmp_path / "crash-patch.yml"
    patch.write_text(CRASH_PATCH % script)
    doomed = start([OFFLINE_PATCH, patch])
    try:
        prompt(doomed, "crash", "look, then think")
        frames = doomed.until("session.event", lambda f: f["params"]["event"]["type"]
                              == "step/start" and f["params"]["event"]["data"]["step"] == 2)
        doomed.signal(signal.SIGKILL)
        doomed.wait()
        while True:  # frames already written before the kill still count as sent
            try:
                frames.append(doomed.recv(timeout=2))
            except EOFError:
                break
    finally:
        doomed.finish()
    sent = events_of(frames, "crash")
    assert any(e["type"] == "tool/result" for e in sent)

    verdict, seqs = stored(dsh_home, "crash")
    assert verdict == "ok"
    assert seqs[:len(sent)] == [e["seq"] for e in sent]

    after = start([OFFLINE_PATCH])  # a working model this time
    try:
        restored = history(after, "crash")
        assert restored[:len(sent)] == sent
        tail = restored[len(sent):]
        assert [e["type"] for e in tail][-2:] == ["step/end", "turn/end"]
        assert tail[-1]["data"]["reason"] == {
            "kind": "error",
            "error": {"message": "the runtime stopped during this turn", "code": "interrupted"}}
        more = run_to_idle(after, "crash", "try again")
        stop(after)
    finally:
        after.finish()
    assert more[0]["seq"] == len(restored)
    assert more[-1]["type"] == "turn/end"
    assert more[-1]["data"]["reason"]["kind"] == "completed"
    assert stored(dsh_home, "crash") == ("ok", list(range(len(restored) + len(more))))
