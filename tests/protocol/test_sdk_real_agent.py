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

from dsh.core import jsonrpc

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


def test_cancel_right_behind_its_prompt_cancels_that_turn(tmp_path: Path) -> None:
    """A client that sends ``session/cancel`` at once after ``session/prompt`` (one write:
    the runtime reads both before the turn starts) cancels that prompt's turn."""
    script = tmp_path / "fast.yml"
    script.write_text('- {text: "the first answer"}\n- {text: "the second answer"}\n')
    patch = tmp_path / "fast-patch.yml"
    patch.write_text(SLOW_PATCH % script)
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=Path.cwd())
    try:
        proc.initialize(Path.cwd(), provider="scripted", model="scripted")
        blocks = [{"type": "text", "text": "go"}]
        proc.send_raw(jsonrpc.encode(jsonrpc.request(
            101, "session/prompt", {"sessionId": "quick", "contentBlocks": blocks}))
            + jsonrpc.encode(jsonrpc.request(102, "session/cancel", {"sessionId": "quick"})))
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle")
        answers = {f["id"]: f for f in frames if "id" in f and "method" not in f}
        assert answers[102]["result"] == {"cancelled": True}
        assert "messageId" in answers[101]["result"]
        assert event_types(frames).count("assistant/message") == 0
        ends = [f["params"]["event"]["data"] for f in frames if f.get("method") ==
                "session.event" and f["params"]["event"]["type"] == "turn/end"]
        assert ends == [{"turn": 1, "reason": {"kind": "cancelled"}}]
        # The next prompt runs, and is the model's first request.
        proc.call("session/prompt", {"sessionId": "quick", "contentBlocks": blocks})
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle")
        said = [f["params"]["event"]["data"]["message"]["content"][0]["text"] for f in frames
                if f.get("method") == "session.event"
                and f["params"]["event"]["type"] == "assistant/message"]
        assert said == ["the first answer"]
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
