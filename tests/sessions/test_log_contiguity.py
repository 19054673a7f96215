"""No event is ever skipped in the stored sequence: a real ``dsh --profile sdk`` runs one
session through a normal turn, a cancelled one, one that ends in a model error and one
killed mid-tool-call; after each, the stored seqs are 0..n-1 and equal, event for event,
to what the client received. A second runtime takes the session over and goes on.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = [pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
              pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")]

STEPS = [
    {"text": "A normal answer."},
    {"text": "thinking slowly", "delay_ms": 60000},
    {"error": {"message": "rate limited", "code": "rate-limit"}},
    {"text": "Sleeping.", "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 120"}}]},
]


def scripted(tmp: Path, name: str, steps: list[dict[str, Any]]) -> Path:
    script = tmp / f"{name}.jsonl"
    script.write_text("".join(json.dumps(step) + "\n" for step in steps))
    patch = tmp / f"{name}.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {
        "script": str(script)}}}]))
    return patch


def start(patches: list[Path]) -> RuntimeProcess:
    proc = RuntimeProcess("sdk", patches, cwd=Path.cwd())
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    return proc


def stored(home: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(home / "sessions.db")
    try:
        rows = conn.execute("SELECT seq, body FROM events WHERE session_id = 'log' "
                            "ORDER BY seq").fetchall()
    finally:
        conn.close()
    assert [seq for seq, _ in rows] == list(range(len(rows))), "a seq is skipped"
    return [json.loads(body) for _, body in rows]


def received(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"]


def prompt(proc: RuntimeProcess, text: str) -> int:
    return proc.request("session/prompt", {"sessionId": "log", "contentBlocks": [
        {"type": "text", "text": text}]})


def until_idle(proc: RuntimeProcess) -> list[dict[str, Any]]:
    return proc.until("session.status", lambda f: f["params"]["status"] == "idle", timeout=30)


def turn_end(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in reversed(events) if e["type"] == "turn/end")["data"]["reason"]


def test_every_seq_is_stored_once_whatever_ends_the_turn(dsh_home: Path,
                                                         tmp_path: Path) -> None:
    proc = start([OFFLINE_PATCH, scripted(tmp_path, "steps", STEPS)])
    after = None
    seen: list[dict[str, Any]] = []
    try:
        prompt(proc, "normal")
        seen += received(until_idle(proc))
        assert turn_end(seen)["kind"] == "completed"
        assert stored(dsh_home) == seen

        prompt(proc, "to be cancelled")
        frames = proc.until("session.event", lambda f: f["params"]["event"]["type"]
                            == "request/context")
        assert proc.call("session/cancel", {"sessionId": "log"})["result"] == {"cancelled": True}
        seen += received(frames + until_idle(proc))
        assert turn_end(seen)["kind"] == "cancelled"
        assert stored(dsh_home) == seen

        prompt(proc, "to fail")
        seen += received(until_idle(proc))
        assert turn_end(seen)["kind"] == "error"
        assert stored(dsh_home) == seen

        prompt(proc, "to be killed")
        frames = proc.until("session.event", lambda f: f["params"]["event"]["type"]
                            == "tool/call", timeout=30)
        proc.signal(signal.SIGKILL)
        proc.wait()
        seen += received(frames)
        while True:  # frames written before the kill were sent too
            try:
                frame = proc.recv(timeout=2)
            except EOFError:
                break
            seen += received([frame])
        log = stored(dsh_home)
        assert log[:len(seen)] == seen  # all it sent is stored; it may have stored more

        after = start([OFFLINE_PATCH, scripted(tmp_path, "after", [{"text": "Back."}])])
        prompt(after, "again")
        more = received(until_idle(after))
        assert turn_end(more)["kind"] == "completed"
        whole = stored(dsh_home)
        assert whole == log + more  # the killed turn closed on resume, then the new one
        closing = next(e for e in more if e["type"] == "turn/end")
        assert closing["data"]["reason"]["error"]["code"] == "interrupted"
        after.close_stdin()
        assert after.wait() == 0
    finally:
        proc.finish()
        if after is not None:
            after.finish()
    assert [e["seq"] for e in stored(dsh_home)] == list(range(len(whole)))
