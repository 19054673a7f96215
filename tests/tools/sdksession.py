"""One prompt through a real ``dsh --profile sdk`` process with the scripted model.

The script makes the given tool calls one per step and then answers "done"; the caller's
patch rows adjust the tools (or the scripted provider) as a user's patch file would.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess


def web_config(**config: Any) -> list[dict[str, Any]]:
    """Patch rows merging ``config`` into the ``tools:web`` row."""
    return [{"id": "tools:web", "merge": {"config": config}}]


def session(tmp_path: Path, calls: Sequence[Mapping[str, Any]],
            rows: Sequence[Mapping[str, Any]], *, scripted: Mapping[str, Any] | None = None,
            work: Path | None = None, env: Mapping[str, str] | None = None,
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the session in ``work`` (default ``tmp_path/work``, with ``env`` added to the
    runtime's environment); the ``tool/result`` messages and the ``turn/end`` events,
    after the process exited cleanly."""
    if work is None:
        work = tmp_path / "work"
        work.mkdir()
    script = [{"text": f"step {i}", "tool_calls": [dict(call)]} for i, call in enumerate(calls)]
    (tmp_path / "script.yml").write_text(json.dumps([*script, {"text": "done"}]))
    provider = {"script": str(tmp_path / "script.yml"), **(scripted or {})}
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": provider}},
                                 *rows]))
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work, env=env)
    try:
        proc.initialize(work, provider="scripted", model="scripted")
        answer = proc.call("session/prompt", {
            "sessionId": "t1", "contentBlocks": [{"type": "text", "text": "go"}]})
        assert "messageId" in answer["result"], answer
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                            timeout=30)
        events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    results = [e["data"]["message"] for e in events if e["type"] == "tool/result"]
    return results, [e for e in events if e["type"] == "turn/end"]


def text_of(message: Mapping[str, Any]) -> str:
    """The text blocks of a message, joined."""
    return "".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
