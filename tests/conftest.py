"""Fixtures shared by every suite: a private home and cwd per test, and the real ``dsh``.

Every test runs with ``DSH_HOME`` pointing at its own fresh folder (created, 0700), no
other ``DSH_*`` variable, and the working directory set to a fresh folder, so no test can
read or write a developer's ``~/.dsh`` or pick up a stray ``.env``. ``run_dsh`` spawns the
real launcher as a process with the interpreter under test (``python -m dsh``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def dsh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's ``DSH_HOME`` (``tmp_path/home``); the cwd becomes ``tmp_path/cwd``."""
    for name in list(os.environ):
        if name.startswith("DSH_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("DSH_HOME", str(home))
    monkeypatch.chdir(cwd)
    return home


@pytest.fixture
def run_dsh() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real ``dsh`` (``sys.executable -m dsh ARGS``) and return the finished process.

    ``env`` entries override the test's environment (a ``None`` value removes the name);
    stdin is empty unless ``input`` is given; output is text.
    """

    def run(*args: str, input: str | None = None,
            env: Mapping[str, str | None] | None = None,
            cwd: str | os.PathLike[str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        environ = dict(os.environ)
        for name, value in (env or {}).items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
        return subprocess.run(
            [sys.executable, "-m", "dsh", *args],
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            env=environ,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )

    return run
