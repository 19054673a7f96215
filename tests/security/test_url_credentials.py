"""Credentials inside URLs never reach a message, a log line or a stored event.

A provider whose base URL carries ``?api_key=`` (a base URL with ``user:password@`` is
refused before any request, without quoting it), and an MCP server whose URL carries
both, both unreachable (a closed loopback port): the turn fails and the MCP failure is
reported, and the runtime's frames, its whole stderr at debug level and every file it
left in the home show the URLs with those parts masked, never the values.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from seckit import FullLogRuntime, assert_clean, home_files

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX")

CANARIES = {"provider query key": "query-key-" + "77ab" * 5,
            "mcp password": "mcp-pass-" + "19fe" * 5,
            "mcp query token": "mcp-token-" + "0d0d" * 5}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_url_credentials_are_masked_everywhere(dsh_home: Path, tmp_path: Path) -> None:
    port = _closed_port()
    c = CANARIES
    base_url = f"http://127.0.0.1:{port}/v1?api_key={c['provider query key']}"
    mcp_url = (f"http://bob:{c['mcp password']}@127.0.0.1:{port}/mcp"
               f"?access_token={c['mcp query token']}")
    patch = tmp_path / "patch.yml"
    patch.write_text("- {id: llm, merge: {config: {max_retries: 0}}}\n"
                     "- id: tools:mcp\n"
                     "  merge: {config: {servers: [{name: tracker, url: !env TRACKER_URL}]}}\n")
    env = {"DEEPSEEK_API_KEY": "sk-" + "5" * 32, "DEEPSEEK_BASE_URL": base_url,
           "TRACKER_URL": mcp_url, "DSH_LOG_LEVEL": "debug"}
    cwd = Path.cwd()
    proc = FullLogRuntime("sdk", [patch], cwd=cwd, env=env)
    try:
        proc.initialize(cwd)
        for text in ("first", "second"):  # the second turn reports the MCP failure
            proc.call("session/prompt", {"sessionId": "s1", "contentBlocks": [
                {"type": "text", "text": text}]})
            frames = proc.until("session.status",
                                lambda f: f["params"]["status"] == "idle", timeout=60)
        history = proc.call("session/history", {"sessionId": "s1"})
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    events = history["result"]["events"]
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends[0]["kind"] == "error", ends
    message = ends[0]["error"]["message"]
    # (the provider appends /chat/completions to the base URL as given, query and all)
    assert f"cannot reach http://127.0.0.1:{port}/v1?api_key=***" in message, message
    errors = [e["data"]["message"] for e in events if e["type"] == "error"]
    assert any(f"http://***@127.0.0.1:{port}/mcp?access_token=***" in m for m in errors), \
        (errors, frames)
    assert_clean("the runtime's frames and stderr", proc.captured(), CANARIES)
    for name, data in home_files(dsh_home):
        assert_clean(f"$DSH_HOME/{name}", data, CANARIES)
