"""One real process: ``dsh --profile sdk-minimal`` over JSON-RPC, a scripted model using the
new tools on real files in a temp working directory; the files on disk are the verdict."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

SCRIPT = [
    {"text": "Reading the config.",
     "tool_calls": [{"name": "read_file", "arguments": {"path": "src/config.py"}}]},
    {"text": "Raising the limit.",
     "tool_calls": [{"name": "edit_file", "arguments": {
         "path": "src/config.py", "old_string": "LIMIT = 10", "new_string": "LIMIT = 20"}}]},
    {"text": "Checking every use.",
     "tool_calls": [{"name": "grep", "arguments": {"pattern": "LIMIT"}}]},
    {"text": "Done: LIMIT is now 20."},
]


def test_read_edit_grep_through_the_real_runtime(tmp_path: Path) -> None:
    work = tmp_path / "project"
    (work / "src").mkdir(parents=True)
    (work / "src" / "config.py").write_text("NAME = 'demo'\nLIMIT = 10\n")
    (work / "README.md").write_text("Set LIMIT in src/config.py.\n")
    script = tmp_path / "script.yml"
    script.write_text(json.dumps(SCRIPT))  # JSON is YAML
    patch = tmp_path / "patch.yml"
    row = {"id": "llm-scripted", "merge": {"config": {"script": str(script)}}}
    patch.write_text(json.dumps([row]))

    proc = RuntimeProcess("sdk-minimal", [OFFLINE_PATCH, patch], cwd=work)
    try:
        proc.initialize(work, provider="scripted", model="scripted")
        answer = proc.call("session/prompt", {
            "sessionId": "t1", "contentBlocks": [{"type": "text", "text": "raise LIMIT to 20"}]})
        assert "messageId" in answer["result"], answer
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                            timeout=30)
        events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
        results: list[dict[str, Any]] = [e["data"]["message"] for e in events
                                         if e["type"] == "tool/result"]
        texts = ["".join(b.get("text", "") for b in m["content"]) for m in results]
        assert [m["isError"] for m in results] == [False, False, False], texts
        assert "     2\tLIMIT = 10" in texts[0]
        assert texts[1] == "Edited src/config.py: replaced 1 occurrence."
        # Clients get the change as a unified diff beside the result (data.diff).
        read, edit, _ = [e["data"] for e in events if e["type"] == "tool/result"]
        assert edit["diff"]["path"] == "src/config.py" and edit["diff"]["kind"] == "update"
        assert "-LIMIT = 10\n+LIMIT = 20\n" in edit["diff"]["unified"]
        assert (edit["diff"]["added"], edit["diff"]["removed"]) == (1, 1)
        assert "diff" not in read
        assert texts[2] == ("README.md:1:Set LIMIT in src/config.py.\n"
                            "src/config.py:2:LIMIT = 20")
        ends = [e for e in events if e["type"] == "turn/end"]
        assert ends[-1]["data"]["reason"]["kind"] == "completed"
        assert (work / "src" / "config.py").read_text() == "NAME = 'demo'\nLIMIT = 20\n"
        assert sorted(p.name for p in (work / "src").iterdir()) == ["config.py"]
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
