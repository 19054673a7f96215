"""The runtime ends with the SDK program that started it, by watching that process.

An SDK client that located this runtime itself (the python carrier of its own install, or
the ``dsh-runtime-bin`` wheel of its own version) names its process id in
``DSH_PARENT_PID`` instead of having the kernel send a parent-death signal: arming
``PR_SET_PDEATHSIG`` needs a ``preexec_fn``, which makes every spawn a full ``fork`` and
loads ``ctypes`` in the caller, about 3% of a client's start to ``initialize``. The
runtime then holds a pidfd of that process (Linux 5.3+) on its event loop and, when the
process exits however it ends, stops exactly as on ``SIGTERM``.

The variable is honoured only when it names this process's parent: a process that merely
inherited it (a ``dsh`` a tool started) is not tied to the SDK program. A parent that died
before the watch began is caught too: the pidfd of an exited process is readable at once,
and a parent already reaped shows as a changed ``getppid()``. Where pidfds are missing the
client keeps the kernel's signal (it checks before choosing), so nothing is watched here.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

ENV = "DSH_PARENT_PID"


def watch_parent(loop: asyncio.AbstractEventLoop, on_gone: Callable[[], None],
                 environ: Mapping[str, str] = os.environ) -> Callable[[], None] | None:
    """Call ``on_gone`` on ``loop`` once the process ``DSH_PARENT_PID`` names has exited.

    Returns a function that stops the watch (closing the pidfd), or ``None`` when there is
    nothing to watch: the variable is unset or malformed, names another process than this
    one's parent, or this platform has no pidfds.
    """
    raw = environ.get(ENV, "")
    if not raw.isdigit() or not hasattr(os, "pidfd_open"):
        return None
    parent = int(raw)
    if os.getppid() != parent:
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

    watching = [True]

    def stop() -> None:
        if watching[0]:
            watching[0] = False
            loop.remove_reader(fd)
            os.close(fd)

    def gone() -> None:
        stop()
        on_gone()

    loop.add_reader(fd, gone)
    return stop
