"""The subreaper reaps orphans, and only orphans: a child's exit status stays its owner's.

Run in a process of its own (a subreaper changes what its process inherits): it contains
its children (:func:`dsh.core.process.contain`), starts a child that exits 7 through
:func:`dsh.core.process.spawn` and one that exits 5 the way a plugin would (plain
``subprocess``, in the process's own session), leaves an orphan that exits at once
(``setsid -f true``: its zombie is inherited), waits until all three are zombies, and
reaps. The orphan is reaped; both children keep their statuses for ``wait``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the child subreaper is Linux's"),
              pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1)")]

SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    from dsh.core import containers, process

    process.contain(sys.argv[1])
    ours = process.spawn(["sh", "-c", "exit 7"], stdout=process.DEVNULL,
                         stderr=process.DEVNULL)
    plugins = subprocess.Popen(["sh", "-c", "exit 5"])
    process.run(["setsid", "-f", "true"])

    def zombies():
        found = {}
        for pid in containers.children(os.getpid()):
            s = containers.stat(pid)
            if s is not None and s.state == "Z":
                found[pid] = s
        return found

    deadline = time.monotonic() + 20
    while len(zombies()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    before = sorted(zombies())
    reaped = process.reap_orphans()
    after = sorted(zombies())
    print(len(before), reaped, after == sorted([ours.pid, plugins.pid]),
          ours.wait(5), plugins.wait(5))
""")


def test_only_the_orphan_is_reaped_and_each_status_kept(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "home")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "1", "True", "7", "5"], proc.stdout
