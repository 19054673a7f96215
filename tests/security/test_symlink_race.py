"""The symlink race: a path checked, then swapped for a link out, then opened.

Issue 19: the file tools checked a path and then opened it by name, so a symlink swapped
in between (``renameat2(RENAME_EXCHANGE)`` from a background job) read and wrote outside
the workspace. Here a thread swaps ``work/race`` (a real directory) with a symlink to a
directory outside, atomically and as fast as it can, while

* a scripted model in a real ``dsh`` process reads ``race/file.txt`` and writes
  ``race/new-N.txt`` hundreds of times (list, glob and grep of ``race`` too), and
* :mod:`dsh.runtime.tools.safeopen` is called directly thousands of times, through
  ``openat2`` and through the component walk.

An escape is any read that returns the outside file's secret and any file written
outside: the count must be zero. The swapper must have swapped while the calls ran.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from boundarykit import Attack

from dsh.runtime.tools import safeopen

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="renameat2(RENAME_EXCHANGE) is Linux's")

SECRET = "OUTSIDE-SECRET"
RENAME_EXCHANGE = 2
AT_FDCWD = -100


class Swapper(threading.Thread):
    """Exchanges two names atomically in a loop until stopped; counts the swaps."""

    def __init__(self, a: Path, b: Path) -> None:
        super().__init__(daemon=True)
        libc = ctypes.CDLL(None, use_errno=True)
        self._renameat2 = libc.renameat2
        self._a, self._b = os.fsencode(a), os.fsencode(b)
        self.swaps = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if self._renameat2(AT_FDCWD, self._a, AT_FDCWD, self._b, RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2 failed")
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


def arena(tmp_path: Path) -> tuple[Path, Path]:
    """``work`` with ``race`` (a real directory) and ``swap`` (a link to ``outside``)."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "race").mkdir(parents=True)
    outside.mkdir()
    (work / "race" / "file.txt").write_text("inside\n")
    (outside / "file.txt").write_text(f"{SECRET}\n")
    (work / "swap").symlink_to(outside, target_is_directory=True)
    return work, outside


def test_the_tools_never_follow_a_swapped_link(tmp_path: Path) -> None:
    work, outside = arena(tmp_path)
    rounds = 150
    calls: list[dict[str, Any]] = []
    for n in range(rounds):
        calls += [{"name": "read_file", "arguments": {"path": "race/file.txt"}},
                  {"name": "write_file", "arguments": {"path": f"race/new-{n}.txt",
                                                       "content": "x"}}]
        if n % 10 == 0:
            calls += [{"name": "list_directory", "arguments": {"path": "race"}},
                      {"name": "glob", "arguments": {"pattern": "*", "path": "race"}},
                      {"name": "grep", "arguments": {"pattern": SECRET, "path": "race"}},
                      {"name": "edit_file", "arguments": {"path": "race/file.txt",
                                                          "old_string": "inside",
                                                          "new_string": "inside"}}]
    with Attack(tmp_path, calls, cwd=work, per_step=25) as attack, \
            Swapper(work / "race", work / "swap") as swapper:
        turn = attack.turn(timeout=120)
        swaps = swapper.swaps
    assert turn.reason == {"kind": "completed"}
    assert len(turn.results) == len(calls)
    leaked = [r["text"] for r in turn.results if SECRET in r["text"]]
    written_outside = sorted(p.name for p in outside.iterdir() if p.name != "file.txt")
    assert swaps > 0
    assert (leaked, written_outside) == ([], []), (
        f"{len(leaked)} reads and {len(written_outside)} writes escaped in "
        f"{len(calls)} calls over {swaps} swaps")
    assert (outside / "file.txt").read_text() == f"{SECRET}\n"


@pytest.mark.parametrize("strategy", ["walk", pytest.param("openat2", marks=pytest.mark.skipif(
    not safeopen.openat2_available(), reason="no openat2 here"))])
def test_safeopen_under_a_swapper(tmp_path: Path, strategy: str) -> None:
    work, outside = arena(tmp_path)
    anchor = safeopen.Anchor(str(work))
    safeopen.use_openat2(strategy == "openat2")
    outcomes = {"inside": 0, "refused": 0, "escaped": 0}
    try:
        with Swapper(work / "race", work / "swap") as swapper:
            for n in range(3000):
                try:
                    fd = safeopen.open_regular(anchor, "race/file.txt")
                    with os.fdopen(fd) as f:
                        text = f.read()
                    outcomes["escaped" if SECRET in text else "inside"] += 1
                except (safeopen.BeneathError, OSError):
                    outcomes["refused"] += 1
                with contextlib.suppress(safeopen.BeneathError, OSError):
                    safeopen.write_file(anchor, f"race/w-{n}.txt", b"x")
            swaps = swapper.swaps
    finally:
        safeopen.use_openat2(True)
    written_outside = [p.name for p in outside.iterdir() if p.name != "file.txt"]
    assert swaps > 0
    assert outcomes["escaped"] == 0 and written_outside == [], (outcomes, written_outside)
