"""Input that is not what it claims, over real ACP (``dsh --profile acp``): -32602 before
the agent sees it, never -32603 or a dead prompt, and the connection goes on.

:class:`RawAcp` sends ASCII JSON, so a lone surrogate travels as its ``\\uXXXX`` escape.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from acpkit import OFFLINE_PATCH, RawAcp, write_patch

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

SURROGATE = "\ud800"


def cases(session_id: str) -> list[tuple[str, Any, str]]:
    cwd = os.getcwd()
    text = [{"type": "text", "text": "hi"}]
    return [
        ("session/prompt", {"sessionId": session_id, "prompt": [
            {"type": "text", "text": f"a {SURROGATE} b"}]},
         "params.prompt[0].text: holds a lone surrogate (U+D800)"),
        ("session/prompt", {"sessionId": session_id, "prompt": [
            {"type": "resource", "resource": {"uri": "file:///a", "text": "\udfff"}}]},
         "params.prompt[0].resource.text: holds a lone surrogate (U+DFFF)"),
        ("session/load", {"sessionId": f"s{SURROGATE}", "cwd": cwd, "mcpServers": []},
         "params.sessionId: holds a lone surrogate"),
        ("session/new", {"cwd": f"{cwd}/{SURROGATE}", "mcpServers": []},
         "params.cwd: holds a lone surrogate"),
        ("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": 7}]},
         'prompt[0]: "text" must be a string'),
        ("session/prompt", {"sessionId": session_id, "prompt": [{"type": "hologram"}]},
         "prompt[0]: unknown content block type 'hologram'"),
        ("session/prompt", [session_id, text], "params must be an object"),
        ("session/new", [cwd], "params must be an object"),
        ("session/prompt", {"sessionId": 12, "prompt": text},
         '"sessionId" must be a non-empty string'),
        ("session/load", {"sessionId": None, "cwd": cwd, "mcpServers": []},
         '"sessionId" must be a non-empty string'),
        ("session/new", {"cwd": 12, "mcpServers": []}, '"cwd" must be a non-empty string'),
        ("session/new", {"cwd": ["/"], "mcpServers": []}, '"cwd" must be a non-empty string'),
        ("session/set_mode", {"sessionId": session_id, "modeId": 3},
         '"modeId" must be a non-empty string'),
    ]


def test_bad_input_is_invalid_params_and_a_prompt_still_runs(tmp_path: Path) -> None:
    raw = RawAcp(write_patch(tmp_path, [{"text": "still here"}]))
    try:
        version = raw.call("initialize", {"protocolVersion": {"major": 1}})
        assert version["error"]["code"] == -32602, version
        assert '"protocolVersion" is required' in version["error"]["message"]
        assert raw.call("initialize", {"protocolVersion": 1})["result"]["protocolVersion"] == 1
        session_id = raw.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})[
            "result"]["sessionId"]
        for method, params, expected in cases(session_id):
            answer = raw.call(method, params)
            assert answer.get("error", {}).get("code") == -32602, (method, params, answer)
            assert expected in answer["error"]["message"], (expected, answer)
        rid = raw.request("session/prompt", {"sessionId": session_id, "prompt": [
            {"type": "text", "text": "and now a real one"}]})
        frames = raw.until(lambda f: f.get("id") == rid and "method" not in f)
        assert frames[-1]["result"] == {"stopReason": "end_turn"}
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()
