"""``dsh --profile acp`` over raw pipes: stdout purity, bad input, frames, help, signals."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from acpkit import OFFLINE_PATCH, RawAcp, write_patch

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

NOISY_SCRIPT = [
    {"text": "Running a noisy command.", "tool_calls": [
        {"name": "bash", "arguments": {"command": "echo to-stdout; echo to-stderr >&2"}},
        {"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]},
    {"text": "All done."},
]


def allow(frame: dict[str, Any]) -> dict[str, Any]:
    assert frame["method"] == "session/request_permission", frame
    return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}


def init(raw: RawAcp) -> None:
    answer = raw.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert answer["result"]["protocolVersion"] == 1, answer


def new_session(raw: RawAcp, cwd: str | None = None) -> str:
    answer = raw.call("session/new", {"cwd": cwd or os.getcwd(), "mcpServers": []})
    return answer["result"]["sessionId"]


def prompt_until_answer(raw: RawAcp, session_id: str, text: str,
                        on_request: Callable[[dict[str, Any]], Any] = allow
                        ) -> list[dict[str, Any]]:
    rid = raw.request("session/prompt", {"sessionId": session_id,
                                         "prompt": [{"type": "text", "text": text}]})
    return raw.until(lambda f: f.get("id") == rid and "method" not in f, on_request)


def test_stdout_carries_only_frames_through_a_noisy_turn(tmp_path: Path) -> None:
    raw = RawAcp(write_patch(tmp_path, NOISY_SCRIPT))
    try:
        init(raw)
        session_id = new_session(raw)
        frames = prompt_until_answer(raw, session_id, "make noise")
        assert frames[-1]["result"] == {"stopReason": "end_turn"}
        methods = [f.get("method") for f in frames]
        assert "session/request_permission" in methods and "session/update" in methods
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()
    assert raw.lines, "no output at all"
    for line in raw.lines:
        frame = json.loads(line)
        assert frame["jsonrpc"] == "2.0" and line.endswith(b"\n")
    # The command's stdout reached the client inside a frame, as the tool's result.
    results = [json.loads(line)["params"]["update"] for line in raw.lines
               if b'"tool_call_update"' in line and b'"completed"' in line]
    assert any("to-stdout" in r["content"][0]["content"]["text"] for r in results)


def error_of(frame: dict[str, Any]) -> int:
    assert "error" in frame, frame
    return frame["error"]["code"]


def test_bad_input_gets_json_rpc_errors_and_the_connection_lives(tmp_path: Path) -> None:
    raw = RawAcp(write_patch(tmp_path, NOISY_SCRIPT))
    try:
        assert error_of(raw.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})) \
            == -32600  # before initialize
        assert error_of(raw.call("initialize", {})) == -32602  # no protocolVersion
        answer = raw.call("initialize", {"protocolVersion": 2})
        assert answer["result"]["protocolVersion"] == 1  # negotiated down, not refused
        assert error_of(raw.call("initialize", {"protocolVersion": 1})) == -32600  # again
        assert raw.call("authenticate", {"methodId": "none"})["result"] == {}
        assert error_of(raw.call("no/such/method", {})) == -32601
        assert error_of(raw.call("session/new", {"cwd": "relative/dir",
                                                 "mcpServers": []})) == -32602
        assert error_of(raw.call("session/new", {"mcpServers": []})) == -32602
        assert error_of(raw.call("session/new", {"cwd": os.getcwd(),
                                                 "mcpServers": "none"})) == -32602
        missing = raw.call("session/prompt", {"sessionId": "nope",
                                              "prompt": [{"type": "text", "text": "hi"}]})
        assert error_of(missing) == -32602 and "unknown session" in missing["error"]["message"]
        load = raw.call("session/load", {"sessionId": "nope", "cwd": os.getcwd(),
                                         "mcpServers": []})
        assert error_of(load) == -32602
        session_id = new_session(raw)
        for prompt in ("text", [], [{"text": "no type"}], [{"type": "text"}],
                       [{"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                       [{"type": "resource", "resource": {"uri": "file:///x"}}],
                       [{"type": "video"}]):
            bad = raw.call("session/prompt", {"sessionId": session_id, "prompt": prompt})
            assert error_of(bad) == -32602, (prompt, bad)
        raw.send_raw(b"{not json\n")
        assert error_of(raw.recv()) == -32700
        raw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "x"}})
        raw.send({"jsonrpc": "2.0", "method": "unknown/notification"})
        # Still alive and still serving: a real prompt completes.
        frames = prompt_until_answer(raw, session_id, "after all that")
        assert frames[-1]["result"] == {"stopReason": "end_turn"}
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()


def test_embedded_context_and_resource_links_reach_the_model(tmp_path: Path) -> None:
    raw = RawAcp(write_patch(tmp_path, [{"text": "seen"}]))
    try:
        init(raw)
        session_id = new_session(raw)
        rid = raw.request("session/prompt", {"sessionId": session_id, "prompt": [
            {"type": "text", "text": "look at"},
            {"type": "resource_link", "uri": "file:///etc/hosts", "name": "hosts"},
            {"type": "resource", "resource": {"uri": "file:///a.py", "text": "print(1)"}}]})
        frames = raw.until(lambda f: f.get("id") == rid and "method" not in f)
        assert frames[-1]["result"] == {"stopReason": "end_turn"}
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()


def test_frames_up_to_the_limit_pass_and_oversize_is_an_error(tmp_path: Path) -> None:
    small = {"id": "acp-server", "merge": {"config": {"max_frame_bytes": 65536}}}
    raw = RawAcp(write_patch(tmp_path, [{"text": "ok"}], extra=[small]))
    try:
        init(raw)
        raw.send({"jsonrpc": "2.0", "id": 99, "method": "session/new",
                  "params": {"cwd": os.getcwd(), "mcpServers": [], "_meta": {"p": "x" * 70000}}})
        assert error_of(raw.recv()) == -32600
        ok = raw.call("session/new", {"cwd": os.getcwd(), "mcpServers": [],
                                      "_meta": {"p": "x" * 60000}})
        assert "sessionId" in ok["result"]
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()


def test_a_ten_mib_frame_is_taken_by_default(tmp_path: Path) -> None:
    raw = RawAcp(write_patch(tmp_path, [{"text": "ok"}]))
    try:
        init(raw)
        ok = raw.call("session/new", {"cwd": os.getcwd(), "mcpServers": [],
                                      "_meta": {"p": "x" * (10 * 1024 * 1024)}})
        assert "sessionId" in ok["result"]
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()


def test_cancel_in_the_same_write_as_its_prompt_is_not_lost(tmp_path: Path) -> None:
    raw = RawAcp(write_patch(tmp_path, [{"text": "slow", "delay_ms": 600_000}]))
    try:
        init(raw)
        session_id = new_session(raw)
        prompt = {"jsonrpc": "2.0", "id": 50, "method": "session/prompt",
                  "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "x"}]}}
        cancel = {"jsonrpc": "2.0", "method": "session/cancel",
                  "params": {"sessionId": session_id}}
        raw.send_raw((json.dumps(prompt) + "\n" + json.dumps(cancel) + "\n").encode())
        frames = raw.until(lambda f: f.get("id") == 50)
        assert frames[-1]["result"] == {"stopReason": "cancelled"}
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_signal_mid_turn_exits_within_the_bound(tmp_path: Path, signum: int, code: int) -> None:
    raw = RawAcp(write_patch(tmp_path, [{"text": "slow", "delay_ms": 600_000}]))
    try:
        init(raw)
        session_id = new_session(raw)
        raw.request("session/prompt", {"sessionId": session_id,
                                       "prompt": [{"type": "text", "text": "x"}]})
        raw.until(lambda f: f.get("params", {}).get("update", {}).get("sessionUpdate")
                  == "session_info_update")
        raw.proc.send_signal(signum)
        assert raw.wait(8) == code
    finally:
        raw.finish()


def test_help_starts_no_transport(run_dsh: Callable[..., Any]) -> None:
    done = run_dsh("--profile", "acp", "--patch", str(OFFLINE_PATCH), "-h", input="")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dsh --profile acp")
    assert "session/request_permission" in done.stdout
