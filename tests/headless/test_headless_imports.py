"""What a headless run imports, pinned in real processes: the terminal's view and styling
only on a terminal, the Codex format only when asked for.

``PYTHONPROFILEIMPORTTIME=1`` makes the interpreter report every module it imports on
stderr. A piped run (a script's, a CI job's) must not pay for the spinner, the styling or
the Codex mapping; the same measurement on a pseudo-terminal is the control that sees
them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
OFFLINE_PATCH = Path(__file__).resolve().parents[2] / "examples" / "offline" / "patch.yml"
TERMINAL_ONLY = ("dsh.runtime.headless.live", "dsh.core.termstyle")
CODEX_ONLY = ("dsh.runtime.headless.codexjson",)


def imported_modules(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


@pytest.mark.parametrize("args", [(), ("--json",)])
def test_a_piped_run_imports_no_terminal_ui(run_dsh: RunDsh, args: tuple[str, ...]) -> None:
    proc = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), *args,
                   "Where am I working?", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = imported_modules(proc.stderr)
    assert "dsh.runtime.headless.views" in modules  # the measurement sees the run
    assert sorted(modules.intersection(TERMINAL_ONLY + CODEX_ONLY)) == []


def test_the_codex_format_is_imported_when_asked_for(run_dsh: RunDsh) -> None:
    proc = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--json-format",
                   "codex", "Where am I working?", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = imported_modules(proc.stderr)
    assert set(CODEX_ONLY) <= modules
    assert sorted(modules.intersection(TERMINAL_ONLY)) == []


def test_a_terminal_run_imports_them() -> None:
    """The control: on a pseudo-terminal the same measurement sees the live view."""
    pexpect = pytest.importorskip("pexpect")
    environ = {**os.environ, "TERM": "xterm-256color", "PYTHONPROFILEIMPORTTIME": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "dsh", "--profile", "headless", "--patch",
                                           str(OFFLINE_PATCH), "Where am I working?"],
                          env=environ, timeout=60, cwd=os.getcwd(), dimensions=(24, 200))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    modules = imported_modules(bytes(child.before).decode(errors="replace"))
    assert "dsh.runtime.headless.views" in modules
    assert set(TERMINAL_ONLY) <= modules
    assert sorted(modules.intersection(CODEX_ONLY)) == []
