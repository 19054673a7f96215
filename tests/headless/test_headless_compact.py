"""``dsh --profile headless --session-id ID --compact``: compaction triggered by hand."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = ROOT / "examples" / "offline" / "patch.yml"


def _patch(tmp_path: Path, name: str, script: list[dict[str, Any]]) -> Path:
    (tmp_path / f"{name}.yml").write_text(json.dumps(script))  # JSON is YAML
    patch = tmp_path / f"{name}-patch.yml"
    patch.write_text(json.dumps([
        {"id": "llm-scripted", "merge": {"config": {"script": str(tmp_path / f"{name}.yml"),
                                                    "context_window": 60}}},
        {"id": "agent", "merge": {"config": {"compact_at": 0}}},  # only by hand
    ]))
    return patch


def test_compact_flag_summarises_the_resumed_session(
        run_dsh: Callable[..., Any], tmp_path: Path) -> None:
    first = _patch(tmp_path, "first", [
        {"text": "The first answer is long enough to be worth summarising later on."}])
    done = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch", str(first),
                   "a first task with several words in it")
    assert done.returncode == 0, done.stderr
    session = re.search(r"dsh: session (\S+)", done.stderr).group(1)
    done = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch", str(first),
                   "--session-id", session, "another task so there is a turn to summarise")
    assert done.returncode == 0, done.stderr

    second = _patch(tmp_path, "second", [
        {"text": "Summary: a first task was answered."},  # the summarisation request
        {"text": "Second answer."},
    ])
    done = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch", str(second),
                   "--session-id", session, "--compact", "--json", "and a second task")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    compacted = [e for e in events if e["type"] == "context/compacted"]
    assert compacted and compacted[0]["data"]["reason"] == "manual"
    assert compacted[0]["data"]["removedCount"] >= 1
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"]["kind"] == "completed"


def test_compact_needs_a_session_id(run_dsh: Callable[..., Any]) -> None:
    done = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--compact", "task")
    assert done.returncode == 2
    assert done.stderr.startswith("dsh: error: --compact needs --session-id")
