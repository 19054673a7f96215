"""The SDK runtime with the real agent and a slow scripted model: mid-turn cancel, signals.

The offline patch's provider is pointed at a script whose answer takes long
(``delay_ms``), so the turn is reliably in flight when the test acts.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = [
    pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

SLOW_SCRIPT = """\
- {text: "thinking for a long time", delay_ms: 60000}
"""
SLOW_PATCH = """\
- {id: llm-scripted, merge: {config: {script: %s}}}
"""


def slow_runtime(tmp_path: Path) -> RuntimeProcess:
    script = tmp_path / "slow.yml"
    script.write_text(SLOW_SCRIPT)
    patch = tmp_path / "slow-patch.yml"
    patch.write_text(SLOW_PATCH % script)
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=Path.cwd())
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    answer = proc.call("session/prompt", {"sessionId": "slow",
                                          "contentBlocks": [{"type": "text", "text": "go"}]})
    assert "messageId" in answer["result"], answer
    proc.until("session.event", lambda f: f["params"]["event"]["type"] == "step/start")
    return proc


def event_types(frames: list[dict[str, Any]]) -> list[str]:
    return [f["params"]["event"]["type"] for f in frames if f.get("method") == "session.event"]


def test_cancellation_mid_turn(tmp_path: Path) -> None:
    proc = slow_runtime(tmp_path)
    try:
        rid = proc.request("session/cancel", {"sessionId": "slow"})
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle")
        ends = [f["params"]["event"] for f in frames if f.get("method") == "session.event"
                and f["params"]["event"]["type"] == "turn/end"]
        assert ends[-1]["data"]["reason"]["kind"] == "cancelled"
        answer = next((f for f in frames if f.get("id") == rid), None) or proc.response(rid)
        assert answer["result"] == {"cancelled": True}
        assert proc.call("session/list")["result"]["sessions"][0]["status"] == "idle"
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_signal_mid_turn_exits_within_the_bound(tmp_path: Path, signum: int, code: int) -> None:
    proc = slow_runtime(tmp_path)
    try:
        proc.signal(signum)
        assert proc.wait(8) == code
    finally:
        proc.finish()


def test_eof_mid_turn_exits_zero(tmp_path: Path) -> None:
    proc = slow_runtime(tmp_path)
    try:
        proc.close_stdin()
        assert proc.wait(8) == 0
    finally:
        proc.finish()
