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

#: Tests that cannot run on every platform the CI matrix covers, and why: ``linux`` needs
#: Linux (``/proc``, bubblewrap, cgroups), ``posix`` a POSIX system (signals by number,
#: ``sh`` scripts, file modes). Keys are test files relative to ``tests/``, or
#: ``file::test``. Files whose own ``pytestmark`` skips already say so are not listed;
#: applied at collection, so every skip shows with its reason.
PLATFORM_NEEDS: dict[str, tuple[str, str]] = {
    "tools/test_sandbox.py": ("linux", "bubblewrap is Linux's (macOS's Seatbelt: "
                                       "tests/tools/test_seatbelt.py)"),
    "tools/test_sandbox_process.py": ("linux", "bubblewrap is Linux's"),
    "security/test_cd_escape.py": ("linux", "escapes through /proc/self and bubblewrap"),
    "reliability/test_killed_runtime.py": ("linux", "finds orphans in /proc"),
    "mcp/test_mcp_process.py::test_a_killed_runtime_leaves_no_server": (
        "linux", "finds the server in /proc"),
    "acp/test_acp_wire.py": ("posix", "its scripted commands are POSIX shell"),
    "sdk/test_faults.py": ("posix", "kills runtimes by SIGKILL and process group"),
    "sdk/test_startup.py": ("posix", "#!/bin/sh runtimes and file modes"),
    "sdk/test_real_runtime.py::test_parent_pid_naming_another_process_is_ignored": (
        "posix", "a stranger process from sleep(1)"),
    "tools/test_fs.py": ("posix", "file modes and SIGXFSZ"),
    "headless/test_headless_process.py": ("posix", "interrupts dsh with SIGINT"),
    "web/test_web_api.py": ("posix", "stops the server with SIGTERM"),
    "sessions/test_resume_process.py": ("posix", "kills a runtime with SIGKILL"),
    "scripts/test_bench_report.py": ("posix", "#!/bin/sh stand-ins"),
    "launcher/test_layercache.py": ("posix", "file modes"),
    "instructions/test_instructions_files.py": ("posix", "symlinks and file modes"),
    "instructions/test_skills_files.py": ("posix", "symlinks and file modes"),
    "tools/test_confine.py": ("posix", "symlinks and file modes"),
    "headless/test_headless_terminal.py": ("posix", "pseudo-terminals (pexpect)"),
    "headless/test_headless_imports.py::test_a_terminal_run_imports_them": (
        "posix", "a pseudo-terminal (pexpect)"),
    "launcher/test_termstyle.py::test_always_and_never_decide_outright": (
        "posix", "a pseudo-terminal (os.openpty)"),
    "launcher/test_termstyle.py::test_auto_styles_a_terminal_unless_no_color_or_dumb": (
        "posix", "a pseudo-terminal (os.openpty)"),
}
_HERE = Path(__file__).resolve().parent
# Helpers and stand-ins shared across suites (``tests/fixtures``) import by their names.
if str(_HERE / "fixtures") not in sys.path:
    sys.path.insert(0, str(_HERE / "fixtures"))


def _platform_has(need: str) -> bool:
    return sys.platform.startswith("linux") if need == "linux" else os.name == "posix"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip what :data:`PLATFORM_NEEDS` says this platform cannot run, naming why."""
    for item in items:
        try:
            rel = item.path.resolve().relative_to(_HERE).as_posix()
        except ValueError:
            continue
        rule = PLATFORM_NEEDS.get(f"{rel}::{item.name.split('[')[0]}") or \
            PLATFORM_NEEDS.get(rel)
        if rule is not None and not _platform_has(rule[0]):
            where = "Linux" if rule[0] == "linux" else "a POSIX system"
            item.add_marker(pytest.mark.skip(reason=f"needs {where}: {rule[1]}"))


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
