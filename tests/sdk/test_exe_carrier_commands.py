"""Launcher commands on the frozen runtime: ``dsh plugin`` refuses, naming the python carrier.

The frozen bytecode has no docstrings (``python -OO``), so help texts must survive that.

``dsh plugin`` installs with pip for a Python interpreter, which the frozen executable is
not, and the freeze leaves out the libraries it locks and edits ``profile.toml`` with. The
python carrier runs the same command line (``tests/launcher/test_plugins*.py``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def _runtime() -> str:
    try:
        import dsh_runtime_bin  # type: ignore[import-not-found]
    except ImportError:
        pytest.skip("exe carrier: the dsh-runtime-bin wheel is not installed; it is built by "
                    "wheels/ (pip install 'dsh-harness[runtime]')")
    return os.fspath(dsh_runtime_bin.runtime_path())


@pytest.mark.parametrize("action", [["list"], ["add", "dsh-hello-plugin"]])
def test_plugin_command_is_refused_with_one_line(dsh_home: Path, action: list[str]) -> None:
    proc = subprocess.run([_runtime(), "--home", str(dsh_home), "plugin", "--profile", "p",
                           *action], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "python carrier" in lines[0] and "`dsh` launcher" in lines[0]
    assert not (dsh_home / "profiles" / "p").exists()  # nothing written


def test_other_launcher_commands_still_run(dsh_home: Path) -> None:
    proc = subprocess.run([_runtime(), "--home", str(dsh_home), "info", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert '"carriers"' in proc.stdout


def test_help_texts_survive_the_docstring_free_bytecode(dsh_home: Path) -> None:
    proc = subprocess.run([_runtime(), "info", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "What this installation is: version, carriers, profiles." in proc.stdout


def test_the_postgres_sessions_row_is_refused_naming_the_python_carrier(
        dsh_home: Path) -> None:
    """The frozen runtime does not carry psycopg (the wheel would pass 15 MB): the row is
    refused at start with one line, before any DSN is read."""
    patch = Path(__file__).resolve().parents[2] / "examples" / "postgres" / "patch.yml"
    env = {**os.environ, "DSH_POSTGRES_DSN": "postgresql://dsh:pw-not-shown@127.0.0.1:1/dsh"}
    proc = subprocess.run([_runtime(), "--home", str(dsh_home), "--profile", "headless",
                           "--patch", str(patch), "hello"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "sessions-postgres needs the python carrier" in lines[0]
    assert "pw-not-shown" not in proc.stderr
