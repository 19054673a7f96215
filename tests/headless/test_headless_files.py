"""``dsh --profile headless --json`` doing real work: a scripted model reads, edits, greps
and writes real files in a temporary project; the files on disk are the verdict."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = ROOT / "examples" / "offline" / "patch.yml"

SCRIPT = [
    {"text": "Reading the config.",
     "tool_calls": [{"name": "read_file", "arguments": {"path": "src/config.py"}}]},
    {"text": "Raising the limit.",
     "tool_calls": [{"name": "edit_file", "arguments": {
         "path": "src/config.py", "old_string": "LIMIT = 10", "new_string": "LIMIT = 20"}}]},
    {"text": "Checking every use.",
     "tool_calls": [{"name": "grep", "arguments": {"pattern": "LIMIT"}}]},
    {"text": "Recording the change.",
     "tool_calls": [{"name": "write_file", "arguments": {
         "path": "CHANGES.md", "content": "- LIMIT raised to 20\n"}}]},
    {"text": "Done: LIMIT is 20 and CHANGES.md says so."},
]


def test_headless_json_reads_edits_greps_and_writes_files(
        run_dsh: Callable[..., Any], tmp_path: Path) -> None:
    work = tmp_path / "project"
    (work / "src").mkdir(parents=True)
    (work / "src" / "config.py").write_text("NAME = 'demo'\nLIMIT = 10\n")
    (work / "README.md").write_text("Set LIMIT in src/config.py.\n")
    script = tmp_path / "script.yml"
    script.write_text(json.dumps(SCRIPT))  # JSON is YAML
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted",
                                  "merge": {"config": {"script": str(script)}}}]))

    done = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch", str(patch),
                   "--json", "raise LIMIT to 20", cwd=work)

    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    results = [e["data"]["message"] for e in events if e["type"] == "tool/result"]
    texts = ["".join(b.get("text", "") for b in m["content"]) for m in results]
    assert [m["isError"] for m in results] == [False] * 4, texts
    assert texts[2] == "README.md:1:Set LIMIT in src/config.py.\nsrc/config.py:2:LIMIT = 20"
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"]["kind"] == "completed"
    assert (work / "src" / "config.py").read_text() == "NAME = 'demo'\nLIMIT = 20\n"
    assert (work / "CHANGES.md").read_text() == "- LIMIT raised to 20\n"
    assert sorted(p.name for p in work.iterdir()) == ["CHANGES.md", "README.md", "src"]
