"""Test kit for the SDK client: fake-runtime launchers and process/thread/fd probes."""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAKE_RUNTIME = HERE / "fake_runtime.py"
REPO = HERE.parent.parent
OFFLINE_PATCH = REPO / "examples" / "offline" / "patch.yml"

# A bound on waiting for something the OS does asynchronously (a reaped child, a watcher
# thread ending). Never an assertion on duration: only a cap on a hang.
SETTLE = 10.0


def write_fake_bin(directory: Path, mode: str) -> Path:
    """An executable wrapper that runs the fake runtime in ``mode`` (keeps its pid: exec)."""
    path = directory / f"fake-dsh-{mode}"
    path.write_text(
        "#!/bin/sh\n"
        f"exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_RUNTIME))} "
        f"{shlex.quote(mode)} \"$@\"\n"
    )
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def eventually(check: Callable[[], bool], what: str) -> None:
    """Wait (bounded by :data:`SETTLE`) until ``check()``; fail naming ``what``."""
    deadline = time.monotonic() + SETTLE
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {SETTLE} s: {what}")
        time.sleep(0.01)


def assert_gone(pid: int | None) -> None:
    """The process ``pid`` is not running (allowing the OS a moment to reap it)."""
    assert pid is not None
    eventually(lambda: not alive(pid), f"process {pid} gone")


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def thread_count() -> int:
    return threading.active_count()


def children() -> set[int]:
    """This process's live children (Linux ``/proc``)."""
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children", encoding="ascii") as f:
                found.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            continue
    return {pid for pid in found if alive(pid)}
