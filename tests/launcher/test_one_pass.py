"""A launch resolves its profile once and hands the result down.

From argv to a composed tree (and a :class:`~dsh.core.launch.Launch`), the profile's name
is checked once, each home folder made or checked once, ``profile.toml`` read at most
once and the plugin environment looked up once (a warm launch that finds its composition
in the launch cache checks and makes nothing: the entry exists only for a launch that
did); no function of ``dsh.config.profiles`` is asked
twice. Each launch runs in its own process under ``passprobe.py``'s profile hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from passprobe import CALL  # noqa: E402


def traced(tmp_path: Path, *argv: str) -> dict[str, Any]:
    out = tmp_path / "trace.json"
    done = subprocess.run([sys.executable, "-c", CALL.format(folder=str(HERE)), str(out),
                           *argv], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("argv", [["--profile", "sdk", "--dump-config"],
                                  ["--profile", "sdk", "-h"],
                                  ["--profile", "web", "--dump-config"],
                                  ["--profile", "mine", "--from-default-profile", "sdk",
                                   "--dump-config"]],
                         ids=["dump-config", "launch-help", "live", "from-template"])
def test_one_pass_cold_and_warm(tmp_path: Path, dsh_home: Path, argv: list[str]) -> None:
    for run in ("cold", "warm", "warmer"):
        if run != "cold" and "--from-default-profile" in argv:
            argv = ["--profile", "mine", "--dump-config"]
        trace = traced(tmp_path, *argv)
        assert trace["exit"] == 0, (run, trace)
        assert set(trace["ensure_dir"].values()) <= {1}, (run, trace)
        assert trace["profile_reads"] <= 1 and trace["plugin_dir"] <= 1, (run, trace)
        assert len(trace["entries"]) == len(set(trace["entries"])), (run, trace["entries"])
        if trace["composed"]:
            assert trace["validate_name"] == 1 and trace["plugin_dir"] == 1, (run, trace)
        else:  # the launch cache's composition: nothing to check, make or look up twice
            assert trace["validate_name"] == 0 and trace["ensure_dir"] == {}, (run, trace)
    # A live profile composes every time; only a launch that resolved by itself is kept
    # (the template's first launch is not), so the third launch of the others reads it.
    assert trace["composed"] == (argv[1] == "web"), trace


def test_a_bad_name_is_checked_once_and_touches_nothing(tmp_path: Path,
                                                       dsh_home: Path) -> None:
    dsh_home.rmdir()
    trace = traced(tmp_path, "--profile", "../x", "--dump-config")
    assert (trace["exit"], trace["validate_name"], trace["ensure_dir"]) == (2, 1, {})
    assert not dsh_home.exists()
