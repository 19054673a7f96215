"""One ``dsh plugin`` command per profile at a time, leaving no file behind.

The lock is ``profiles/.<name>.plugins.lock``, held with ``flock``. Unlike a plain lock
file it is removed when released, so a command that fails leaves the home exactly as it
found it. Removing a lock file is only safe with a check on the other side: a command
that was waiting on the old file wakes up holding a lock on a name nobody uses any more.
So after every ``flock`` the holder checks that the path still names the file it locked
(same device and inode) and starts over when it does not. Whoever holds a lock on the
file the path names is the one owner.

Where ``fcntl`` is missing (Windows) this falls back to :mod:`filelock`, whose file stays.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

SUFFIX = ".plugins.lock"


def lock_path(profiles_dir: Path, name: str) -> Path:
    """The lock file of profile ``name``, beside its folder (never inside: a new profile's
    folder does not exist until the command that creates it succeeds)."""
    return profiles_dir / f".{name}{SUFFIX}"


class ProfileLock:
    """An exclusive lock on one profile's plugin state; a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._fallback: Any = None

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock; False when ``blocking`` is off and someone else holds it.

        Raises ``OSError`` when the lock file cannot be created (a read-only home).
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self._acquire_fallback(blocking)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        while True:
            fd = os.open(self.path, flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is not None and (current.st_dev, current.st_ino) == (
                    mine.st_dev, mine.st_ino):
                self._fd = fd
                return True
            os.close(fd)  # the file was removed by the previous holder: lock the new one

    def release(self) -> None:
        """Remove the lock file, then let go (in that order: see the module docstring)."""
        if self._fallback is not None:  # pragma: no cover - Windows
            self._fallback.release()
            self._fallback = None
            return
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # a read-only home keeps it: still sound
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def _acquire_fallback(self, blocking: bool) -> bool:  # pragma: no cover - Windows
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path), timeout=-1 if blocking else 0)
        try:
            lock.acquire()
        except Timeout:
            return False
        self._fallback = lock
        return True

    def __enter__(self) -> ProfileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
