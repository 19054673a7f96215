"""Fault-injection kit for the reliability suite: scripts, database probes, mounts, kills.

Everything here acts on real things: a patch and script the real runtime loads, the real
``sessions.db`` opened with :mod:`sqlite3`, real tmpfs and bind mounts (root only; a
test that needs one skips with the reason otherwise), and :func:`killing_launcher`, which
runs the unmodified ``dsh`` in a process that SIGKILLs itself at an exact point, chosen by
an audit event (:pep:`578`), so a kill between two syscalls is reproducible without any
change to the code under test.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = REPO / "examples" / "offline" / "patch.yml"

SETTLE = 20.0
"""Bound on any wait for something asynchronous; never an assertion on duration."""

Figure = Callable[[str, object], None]
"""The ``figure`` fixture (``conftest.py``): ``figure(name, value)`` records a checked
figure of the test, shown in the terminal summary."""

MARKER_ROW = "reliability-stderr-marker"
"""A patch op on this unknown id makes the launcher warn on stderr at every start: a line
the runtime really wrote, for checking the stderr tail a client reports."""


def scripted_patch(tmp: Path, steps: Sequence[dict[str, Any]], *, name: str = "fault",
                   extra: str = "") -> Path:
    """A patch that points the scripted provider at ``steps`` (written as JSONL) and adds
    the stderr marker row; ``extra`` is appended verbatim (more YAML ops)."""
    script = tmp / f"{name}-script.jsonl"
    script.write_text("".join(json.dumps(step) + "\n" for step in steps))
    patch = tmp / f"{name}-patch.yml"
    where = json.dumps(str(script))
    patch.write_text(f"- {{id: llm-scripted, merge: {{config: {{script: {where}}}}}}}\n"
                     f"- {{id: {MARKER_ROW}, disabled: true}}\n{extra}")
    return patch


def stored_events(home: Path, session_id: str) -> tuple[str, list[dict[str, Any]]]:
    """``PRAGMA integrity_check``'s verdict and the session's stored events, by seq."""
    conn = sqlite3.connect(home / "sessions.db")
    try:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        rows = conn.execute("SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq",
                            (session_id,)).fetchall()
    finally:
        conn.close()
    for seq, body in rows:
        assert json.loads(body)["seq"] == seq, (seq, body)
    return verdict, [json.loads(body) for _, body in rows]


def lost(sent: Sequence[dict[str, Any]], stored: Sequence[dict[str, Any]]) -> int:
    """How many events a client received that the log does not hold as received."""
    kept = {event["seq"]: event for event in stored}
    return sum(1 for event in sent if kept.get(event["seq"]) != event)


def assert_gapless(events: Sequence[dict[str, Any]]) -> None:
    """Seqs are 0, 1, 2, ... with no gap or repeat."""
    seqs = [event["seq"] for event in events]
    assert seqs == list(range(len(seqs))), seqs


def eventually(check: Callable[[], bool], what: str, bound: float = SETTLE) -> None:
    """Wait (bounded) until ``check()``; fail naming ``what``."""
    deadline = time.monotonic() + bound
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {bound} s: {what}")
        time.sleep(0.02)


def files_under(root: Path) -> dict[str, bytes]:
    """Every regular file below ``root`` (relative path to bytes): a before/after probe."""
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


# -- mounts (root only) -------------------------------------------------------------------


def _need_root(what: str) -> None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip(f"{what} needs root on Linux (mount); permission bits cannot fake it "
                    "for root, and a non-root run cannot mount")


def _mount(*argv: str) -> None:
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here ({' '.join(argv)}): {done.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=True, capture_output=True)


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path``: the honest full disk (ENOSPC)."""
    _need_root("a full disk")
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` bind-mounted read-only onto itself: EROFS for everyone, root included."""
    _need_root("a read-only home")
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,bind,ro", str(path))
        yield path
    finally:
        _umount(path)


def fill(path: Path, leave: int) -> Path:
    """Fill the file system of ``path`` up to ``leave`` free bytes, with one ballast file."""
    ballast = path / ".ballast"
    free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
    with open(ballast, "ab") as f:
        f.write(b"\0" * max(0, free - leave))
    return ballast


# -- a launcher that kills itself at an exact point -------------------------------------

_KILLER = """\
import os, runpy, signal, sys
event, needle, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = 0
def hook(name, args):
    global seen
    if name == event and needle in repr(args):
        seen += 1
        if seen == nth:
            os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
sys.argv = ["dsh", *sys.argv[4:]]
runpy.run_module("dsh", run_name="__main__", alter_sys=True)
"""


def killing_launcher(event: str, needle: str, nth: int, *args: str,
                     **popen: Any) -> subprocess.CompletedProcess[str]:
    """Run ``dsh ARGS`` (the real launcher, unmodified) in a process that SIGKILLs itself
    when audit event ``event`` fires for the ``nth`` time with ``needle`` in its
    arguments (``os.rename`` of the plugin folder, say): a crash between two syscalls."""
    return subprocess.run([sys.executable, "-c", _KILLER, event, needle, str(nth), *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=180, check=False, **popen)
