"""The SDK examples run offline, as their own processes, exactly as a reader would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sdkkit import REPO

EXAMPLES = REPO / "examples" / "sdk"
NO_PROJECT = "There is no `pyproject.toml` here to tell me what the project is."


def run_example(name: str, *args: str, tmp_path: Path) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    environ["HOME"] = str(tmp_path / "user")  # a stray ~/.dsh would show up here
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], env=environ,
                          cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "user" / ".dsh").exists()
    return done.stdout


def test_examples_folder_holds_exactly_these() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == ["minimal.py", "stream_async.py"]


@pytest.mark.parametrize("explicit_home", [False, True])
def test_minimal_example(tmp_path: Path, explicit_home: bool) -> None:
    home = tmp_path / "example-home"
    out = run_example("minimal.py", *([str(home)] if explicit_home else []),
                      tmp_path=tmp_path)
    tools = next(line for line in out.splitlines() if line.startswith("tools: "))
    assert "working_directory" in tools.removeprefix("tools: ").split(", ")
    assert "tool call: working_directory {}" in out
    assert 'tool call: read_file {"path": "pyproject.toml", "limit": 12}' in out
    assert f"answer (completed): You are working in `{tmp_path}`." in out
    assert NO_PROJECT in out
    assert home.is_dir() == explicit_home


def test_async_streaming_example(tmp_path: Path) -> None:
    out = run_example("stream_async.py", tmp_path=tmp_path)
    assert out.startswith("Let me see where this session works, and what the project is.")
    assert "[tool working_directory {}]" in out
    assert f"You are working in `{tmp_path}`." in out and NO_PROJECT in out
    assert out.rstrip().endswith("only with your approval.\n[turn ended: completed]")
