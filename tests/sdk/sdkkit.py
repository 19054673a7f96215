"""Test kit for the SDK client: fake-runtime launchers and process/thread/fd probes.

The fake runtime starts through a ``#!/bin/sh`` wrapper, so tests using it need a POSIX
system (the ``fake`` fixture skips elsewhere, saying so). :func:`alive` works everywhere;
:func:`children` and :func:`fd_count` read Linux's ``/proc``, so each test calling them
carries :data:`READS_PROC`: the suite is collected on every system and each skip says why.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dsh.core.process import pid_alive

HERE = Path(__file__).resolve().parent
FAKE_RUNTIME = HERE / "fake_runtime.py"
REPO = HERE.parent.parent
OFFLINE_PATCH = REPO / "examples" / "offline" / "patch.yml"

# A bound on waiting for something the OS does asynchronously (a reaped child, a watcher
# thread ending). Never an assertion on duration: only a cap on a hang.
SETTLE = 10.0

LINUX = sys.platform.startswith("linux")
READS_PROC = pytest.mark.skipif(
    not LINUX, reason="needs Linux: counts this process's children or descriptors in /proc")
"""The mark of a test that calls :func:`children` or :func:`fd_count`."""


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
    """Whether ``pid`` runs. On Linux a zombie does not count (it runs nothing); elsewhere
    it counts until it is reaped (:func:`dsh.core.process.pid_alive`), which a bounded
    wait (:func:`assert_gone`) allows for."""
    if not LINUX:
        return pid_alive(pid)
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
    """This process's open descriptors (Linux ``/proc``: see :data:`READS_PROC`)."""
    return len(os.listdir("/proc/self/fd"))


def thread_count() -> int:
    return threading.active_count()


def children() -> set[int]:
    """This process's live children (Linux ``/proc``: see :data:`READS_PROC`)."""
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children", encoding="ascii") as f:
                found.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            continue
    return {pid for pid in found if alive(pid)}
