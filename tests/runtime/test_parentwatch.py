"""``dsh.runtime.kernel.parentwatch``: each way of noticing that the SDK program is gone.

A real parent process starts a real child that watches it (``DSH_PARENT_PID``); the test
kills the parent with SIGKILL and reads, through the pipe the child inherited, that the
watch fired. ``pidfd`` is Linux's way; ``poll`` (a changed ``getppid()``) is the fallback
of any other POSIX; ``kqueue`` runs where the platform has it (macOS); the Windows way
only on Windows.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="kills a parent by SIGKILL")

CHILD = textwrap.dedent("""\
    import asyncio, os, sys
    from dsh.runtime.kernel.parentwatch import watch_parent

    async def main():
        loop = asyncio.get_running_loop()
        gone = loop.create_future()
        stop = watch_parent(loop, lambda: gone.set_result(None),
                            {"DSH_PARENT_PID": sys.argv[2]}, how=sys.argv[1])
        print("watching" if stop is not None else "nothing", flush=True)
        if stop is None:
            return
        await asyncio.wait_for(gone, 30)
        stop()
        print("gone", flush=True)

    asyncio.run(main())
    """)
PARENT = textwrap.dedent("""\
    import os, subprocess, sys, time
    pid = str(os.getpid()) if sys.argv[3] == "self" else sys.argv[3]
    subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], pid])
    time.sleep(3600)
    """)


def ways() -> list[str]:
    found = ["poll"]
    if hasattr(os, "pidfd_open"):
        found.append("pidfd")
    if hasattr(select, "kqueue"):
        found.append("kqueue")
    return found


def start(how: str, names: str = "self") -> tuple[subprocess.Popen[str], str]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, how, names],
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    return parent, parent.stdout.readline().strip()


@pytest.mark.parametrize("how", ways())
def test_the_watch_fires_when_the_parent_is_killed(how: str) -> None:
    parent, first = start(how)
    try:
        assert first == "watching"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert parent.stdout is not None
        started = time.monotonic()
        assert parent.stdout.readline().strip() == "gone"  # the child's, through the pipe
        assert time.monotonic() - started < 30
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()


@pytest.mark.parametrize("how", ways())
def test_a_pid_that_is_not_the_parent_is_not_watched(how: str) -> None:
    parent, first = start(how, names="1")
    try:
        assert first == "nothing"
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()
