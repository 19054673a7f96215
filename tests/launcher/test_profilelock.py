"""``dsh.cli.profilelock``: exclusive across processes, and no file left behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsh.cli.profilelock import ProfileLock, lock_path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock")


def test_the_lock_file_goes_with_the_lock(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "p")
    assert path == tmp_path / ".p.plugins.lock"
    with ProfileLock(path):
        assert path.exists()
    assert not path.exists()


def test_held_means_held(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "p")
    first = ProfileLock(path)
    assert first.acquire()
    second = ProfileLock(path)
    assert not second.acquire(blocking=False)
    first.release()
    assert second.acquire(blocking=False)
    second.release()


def test_a_waiter_on_a_removed_file_takes_the_new_one(tmp_path: Path) -> None:
    """A waiter that opened the file before its holder removed it must not believe it
    holds the lock while a newcomer locks the file now at the path."""
    path = lock_path(tmp_path, "p")
    holder = ProfileLock(path)
    holder.acquire()
    waiter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from dsh.cli.profilelock import ProfileLock
        lock = ProfileLock(Path({str(path)!r}))
        print("waiting", flush=True)
        lock.acquire()
        print("acquired", flush=True)
        sys.stdin.read()
        lock.release()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert waiter.stdout is not None and waiter.stdin is not None
        assert waiter.stdout.readline() == "waiting\n"
        newcomer = ProfileLock(path)
        holder.release()  # removes the file the waiter may be blocked on
        # Whoever gets the path's file first holds the lock; the other must wait.
        if newcomer.acquire(blocking=False):
            assert waiter.poll() is None
            newcomer.release()
        assert waiter.stdout.readline() == "acquired\n"
        assert not ProfileLock(path).acquire(blocking=False)
        waiter.stdin.close()
        assert waiter.wait(30) == 0
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        for stream in (waiter.stdin, waiter.stdout):
            if stream is not None and not stream.closed:
                stream.close()
    assert not path.exists()
