"""The runtime ends with the SDK program that started it, by watching that process.

An SDK client that located this runtime itself (the python carrier of its own install, or
the ``dsh-runtime-bin`` wheel of its own version) names its process id in
``DSH_PARENT_PID`` instead of having the kernel send a parent-death signal: arming
``PR_SET_PDEATHSIG`` needs a ``preexec_fn``, which makes every spawn a full ``fork`` and
loads ``ctypes`` in the caller, about 3% of a client's start to ``initialize``; and macOS
and Windows have no such signal at all. When the process exits, however it ends, the
runtime stops exactly as on ``SIGTERM``. How it watches, best first:

* **pidfd** (Linux 5.3+): the process's fd becomes readable on the event loop at its exit;
* **kqueue** ``EVFILT_PROC``/``NOTE_EXIT`` (macOS, the BSDs): the same, from the kernel;
* **Windows**: a daemon thread waits on a handle of the process;
* **polling** (any other POSIX): ``os.getppid()`` is checked every :data:`POLL_SECONDS`;
  an orphan is re-parented, so a changed parent pid means the parent is gone.

The variable is honoured only when it names this process's parent: a process that merely
inherited it (a ``dsh`` a tool started) is not tied to the SDK program. A parent that died
before the watch began is caught too: a pidfd or kqueue of an exited process fires at once,
and a parent already reaped shows as a changed ``getppid()``. On Linux without pidfds
the client keeps the kernel's signal (it checks before choosing), so nothing is watched
here. Independently of all this, every stdio application also ends at stdin EOF, which
is what the SDK program's death looks like from its pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Mapping

ENV = "DSH_PARENT_PID"
POLL_SECONDS = 1.0
"""How often the polling fallback looks at the parent pid."""

_Stop = Callable[[], None]


def watch_parent(loop: asyncio.AbstractEventLoop, on_gone: Callable[[], None],
                 environ: Mapping[str, str] = os.environ, *,
                 how: str | None = None) -> _Stop | None:
    """Call ``on_gone`` on ``loop`` once the process ``DSH_PARENT_PID`` names has exited.

    Returns a function that stops the watch, or ``None`` when there is nothing to watch:
    the variable is unset or malformed, names another process than this one's parent, or
    this is Linux without pidfds. ``how`` forces one way (``pidfd``, ``kqueue``,
    ``windows``, ``poll``; default: the best this platform has), for tests.
    """
    raw = environ.get(ENV, "")
    if not raw.isdigit():
        return None
    parent = int(raw)
    if os.getppid() != parent:
        return None
    how = how or best_way()
    if how == "pidfd":
        return _watch_pidfd(loop, parent, on_gone)
    if how == "kqueue":
        return _watch_kqueue(loop, parent, on_gone)
    if how == "windows":
        return _watch_windows(loop, parent, on_gone)
    if how == "poll":
        return _watch_poll(loop, parent, on_gone)
    return None


def best_way() -> str | None:
    """The way this platform watches a parent (None: Linux without pidfds)."""
    if hasattr(os, "pidfd_open"):
        return "pidfd"
    if sys.platform.startswith("linux"):
        return None
    if sys.platform == "win32":
        return "windows"
    import select

    if hasattr(select, "kqueue"):
        return "kqueue"
    return "poll"


def _watch_pidfd(loop: asyncio.AbstractEventLoop, parent: int,
                 on_gone: Callable[[], None]) -> _Stop | None:
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        fd = os.pidfd_open(parent)
    except ProcessLookupError:
        loop.call_soon(on_gone)
        return None
    except OSError:  # no pidfd support in this kernel (the client checks its own)
        return None
    if os.getppid() != parent:  # it died between the two looks: fd may name another pid
        os.close(fd)
        loop.call_soon(on_gone)
        return None
    return _reader(loop, fd, lambda: os.close(fd), on_gone)


def _watch_kqueue(loop: asyncio.AbstractEventLoop, parent: int,
                  on_gone: Callable[[], None]) -> _Stop | None:
    if sys.platform.startswith("linux") or sys.platform == "win32":
        return None  # no kqueue there (macOS and the BSDs have it)
    import select

    kq = select.kqueue()
    event = select.kevent(parent, filter=select.KQ_FILTER_PROC, flags=select.KQ_EV_ADD,
                          fflags=select.KQ_NOTE_EXIT)
    try:
        kq.control([event], 0, 0)
    except ProcessLookupError:
        kq.close()
        loop.call_soon(on_gone)
        return None
    except OSError:
        kq.close()
        return _watch_poll(loop, parent, on_gone)
    if os.getppid() != parent:
        kq.close()
        loop.call_soon(on_gone)
        return None
    return _reader(loop, kq.fileno(), kq.close, on_gone)


def _reader(loop: asyncio.AbstractEventLoop, fd: int, close: Callable[[], None],
            on_gone: Callable[[], None]) -> _Stop:
    """Watch ``fd`` (readable once the parent exited) on the loop; ``close`` frees it."""
    watching = [True]

    def stop() -> None:
        if watching[0]:
            watching[0] = False
            loop.remove_reader(fd)
            close()

    def gone() -> None:
        stop()
        on_gone()

    loop.add_reader(fd, gone)
    return stop


def _watch_poll(loop: asyncio.AbstractEventLoop, parent: int,
                on_gone: Callable[[], None]) -> _Stop:
    handle: list[asyncio.TimerHandle | None] = [None]

    def look() -> None:
        if os.getppid() != parent:
            handle[0] = None
            on_gone()
        else:
            handle[0] = loop.call_later(POLL_SECONDS, look)

    def stop() -> None:
        if handle[0] is not None:
            handle[0].cancel()
            handle[0] = None

    look()
    return stop


def _watch_windows(loop: asyncio.AbstractEventLoop, parent: int,
                   on_gone: Callable[[], None]) -> _Stop | None:
    """A daemon thread waits on a handle of the parent (pids are reused on Windows and
    orphans are never re-parented, so neither a poll of ``getppid`` nor of the pid can
    tell); the handle keeps the pid from being reused meanwhile."""
    import ctypes

    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    synchronize = 0x00100000
    handle = kernel32.OpenProcess(synchronize, False, parent)
    if not handle:
        loop.call_soon(on_gone)
        return None
    stopped = threading.Event()

    def wait() -> None:
        while not stopped.is_set():
            if kernel32.WaitForSingleObject(handle, 500) == 0:  # WAIT_OBJECT_0
                if not stopped.is_set():
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        loop.call_soon_threadsafe(on_gone)
                break
        kernel32.CloseHandle(handle)

    threading.Thread(target=wait, name="dsh-parentwatch", daemon=True).start()
    return stopped.set
