"""The Landlock rung's pre-exec step: confine a child between ``fork`` and ``exec``.

The sandbox (:mod:`dsh.runtime.tools.sandbox`) describes what a command may touch as a
:class:`Confinement`: Landlock rules (paths and rights), the TCP ports it may connect to,
and the socket families seccomp lets through. :mod:`dsh.core.process` hands it to
:func:`prepare` when it starts the command, and runs the returned :class:`PreExec` in
the child. Why there and how:

- **In the child, before exec, not through a helper process.** Landlock and seccomp
  apply to the calling thread and everything it starts afterwards, so the forked child
  must apply them to itself; a Python helper that confines itself and then ``exec``\\s
  the command would cost a whole interpreter start per command, more than the bubblewrap
  rung takes in all.
- **Everything built before the fork.** The runtime has threads (the event loop, the
  SDK's loop thread, ``asyncio.to_thread`` workers). Between ``fork`` and ``exec`` only
  the forking thread exists in the child, and any lock another thread held at the fork
  stays held forever: the import lock, a logging handler's lock, an allocator's lock in
  some C library. So :func:`prepare` does all the work that takes locks or may fail
  interestingly in the parent: it opens every path and creates the Landlock ruleset
  (a file descriptor, close-on-exec, still open in the child when it runs), assembles
  the seccomp program into a buffer, builds every ``ctypes`` argument object, and reads
  ``/proc`` for the capabilities to drop. The child runs one small function
  (:meth:`PreExec.__call__`) making five to fifty raw syscalls with those ready-made
  arguments: no import, no I/O through Python file objects, no logging, no lock.
- **``preexec_fn``, and why that is safe here.** ``subprocess`` runs ``preexec_fn`` in
  the child after ``fork`` (so it forks rather than ``vfork``\\s or ``posix_spawn``\\s for
  these commands: a few milliseconds for a large runtime, measured in
  ``scripts/benchlib/shell.py``). CPython makes that call safe as far as the
  interpreter goes: it takes its own runtime locks around the fork and re-initialises
  them in the child, disables the garbage collector first (no finaliser can run there),
  and calls the function after the session and process group are set and before the
  other file descriptors are closed; its at-fork handlers take the import lock and
  ``logging``'s module lock in the parent around the fork (so a confined start waits for
  them, briefly, when another thread holds one), so neither is inherited held. What it
  cannot make safe is code that takes any other lock another thread may hold; the
  function above takes none. The rest of process control
  keeps ``posix_spawn``/``vfork`` and applies its parent-death tie and limits with
  exec-safe wrappers (``setpriv``, ``prlimit``), which then run confined too.
- **What the child does**, in order: first it joins its cgroups (its container and its
  limits' cgroup, :mod:`dsh.core.containers`) by writing ``0`` (the writer itself) to
  their ``cgroup.procs`` files, opened in the parent; unconfined commands leave that to
  a ``/bin/sh`` wrapper, but a confined one joins here, before any confinement, so the
  ruleset grants no ``cgroup.procs`` at all and the command can neither move itself to
  another cgroup nor pull another process into its own. Then, as root (or with any
  capability), drop the bounding
  set and ambient capabilities and clear the rest (``capset``), so a root command keeps
  its uid but no capability (module loading, raw I/O, ``CAP_DAC_OVERRIDE``); set
  ``PR_SET_NO_NEW_PRIVS`` (no set-uid or file capabilities regained by ``exec``, and
  what lets an unprivileged process install the two filters); restrict itself with the
  ruleset; install the seccomp filter (:mod:`dsh.core.seccomp`). A failed step raises, so
  ``subprocess`` reports the start as failed and nothing runs unconfined or uncontained.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from collections.abc import Sequence
from typing import NamedTuple

from dsh.core import landlock, seccomp  # the pre-exec step of dsh.core.process

_LINUX = sys.platform.startswith("linux")


class Confinement(NamedTuple):
    """What one command may reach under the Landlock rung.

    ``rules`` are ``(path, rights)`` pairs (:data:`dsh.core.landlock.READ`, ``WRITE``,
    ``DEVICE`` or any mask of its bits); a path that does not exist is skipped.
    ``network`` is the seccomp socket policy (:data:`dsh.core.seccomp.NETWORKS`):
    ``none`` and ``tcp`` also make Landlock handle TCP, allowing ``connect`` only to
    ``tcp_connect`` ports (``tcp`` with no ports reaches nothing); ``all`` leaves TCP
    alone. ``level`` pins the Landlock ABI used (default: the kernel's).
    """

    rules: tuple[tuple[str, int], ...]
    network: str = seccomp.NETWORK_NONE
    tcp_connect: tuple[int, ...] = ()
    level: int | None = None


_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class PreExec:
    """One command's confinement, ready to apply in its child (``preexec_fn``).

    Holds the ruleset descriptor, the seccomp program and every ``ctypes`` argument,
    so that :meth:`__call__` allocates nothing worth naming and takes no lock. Close it
    in the parent once the child has started (or failed to).
    """

    def __init__(self, ruleset: landlock.Ruleset, program: seccomp.Filter, *,
                 drop_caps: Sequence[int], join: Sequence[int] = ()) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._write = libc.write
        self._write.restype = ctypes.c_ssize_t
        self.join = tuple(join)
        self._join_args = tuple((ctypes.c_int(fd), ctypes.c_char_p(b"0"), ctypes.c_size_t(1))
                                for fd in self.join)
        self._prctl = libc.prctl
        self._prctl.restype = ctypes.c_int
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long
        self._capset = libc.capset
        self._capset.restype = ctypes.c_int
        self.ruleset = ruleset
        self.program = program
        self.level = ruleset.level
        ulong = ctypes.c_ulong
        self._zero = ulong(0)
        self._one = ulong(1)
        self._nnp = ctypes.c_int(_PR_SET_NO_NEW_PRIVS)
        self._restrict_args = (ctypes.c_long(landlock.SYS_RESTRICT_SELF),
                               ctypes.c_int(ruleset.fd), ctypes.c_uint32(0))
        self._seccomp_args = (ctypes.c_int(seccomp.PR_SET_SECCOMP),
                              ulong(seccomp.SECCOMP_MODE_FILTER), ulong(program.address),
                              self._zero, self._zero)
        self._bounding = tuple((ctypes.c_int(_PR_CAPBSET_DROP), ulong(cap), self._zero,
                                self._zero, self._zero) for cap in drop_caps)
        self._ambient = (ctypes.c_int(_PR_CAP_AMBIENT), ulong(_PR_CAP_AMBIENT_CLEAR_ALL),
                         self._zero, self._zero, self._zero)
        self._cap_header = _CapHeader(_CAP_VERSION_3, 0)
        self._cap_data = (_CapData * 2)()
        self._capset_args = (ctypes.pointer(self._cap_header), ctypes.pointer(self._cap_data))
        self._drop = bool(drop_caps)
        self._failure = OSError(errno.EPERM, "the sandbox could not confine the command")

    def __call__(self) -> None:
        """Join the cgroups, then confine the calling (child) process; raise when a step
        fails."""
        for join in self._join_args:
            if self._write(*join) != 1:
                raise self._failure
        prctl = self._prctl
        if self._drop:
            for args in self._bounding:
                prctl(*args)  # best effort: without CAP_SETPCAP, NO_NEW_PRIVS still holds
            prctl(*self._ambient)
            if self._capset(*self._capset_args) != 0:
                raise self._failure
        if prctl(self._nnp, self._one, self._zero, self._zero, self._zero) != 0:
            raise self._failure
        if self._syscall(*self._restrict_args) != 0:
            raise self._failure
        if prctl(*self._seccomp_args) != 0:
            raise self._failure

    def close(self) -> None:
        """Close the ruleset descriptor and the ``cgroup.procs`` files (the parent's
        copies); closing again does nothing."""
        self.ruleset.close()
        join, self.join, self._join_args = self.join, (), ()
        _close(join)


def prepare(confinement: Confinement, *, join: Sequence[str] = ()) -> PreExec:
    """Build ``confinement`` for one child: ruleset, filter, arguments (in the parent).

    ``join`` are the cgroup folders the child moves itself into before it is confined
    (its container, its limits' cgroup): their ``cgroup.procs`` files are opened here,
    so the ruleset needs no rule for them. Raises OSError naming what failed (a rule the
    kernel refused, a cgroup that cannot be opened, an unsupported machine).
    """
    network = confinement.network
    fds: list[int] = []
    try:
        for folder in join:
            fds.append(os.open(os.path.join(folder, "cgroup.procs"),
                               os.O_WRONLY | os.O_CLOEXEC))
        ruleset = landlock.Ruleset(confinement.level,
                                   net=network != seccomp.NETWORK_ALL)
    except OSError as exc:
        _close(fds)
        raise OSError(exc.errno or errno.EPERM, f"cannot confine the command: {exc}") from exc
    try:
        for path, rights in confinement.rules:
            ruleset.allow_path(path, rights)
        if ruleset.net:
            for port in confinement.tcp_connect:
                ruleset.allow_port(port)
        program = seccomp.Filter.for_network(network)
        return PreExec(ruleset, program, drop_caps=capabilities_to_drop(), join=fds)
    except OSError as exc:
        ruleset.close()
        _close(fds)
        raise OSError(exc.errno or errno.EPERM, f"cannot confine the command: {exc}") from exc
    except BaseException:
        ruleset.close()
        _close(fds)
        raise


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def capabilities_to_drop() -> tuple[int, ...]:
    """Every capability number when this process is root or holds any capability (the
    bounding set is then dropped in the child); empty for an ordinary user, whom
    ``PR_SET_NO_NEW_PRIVS`` already keeps from gaining one."""
    if not _LINUX:
        return ()
    status = _status()
    held = any(int(status.get(name, "0"), 16) for name in ("CapPrm", "CapAmb"))
    if os.geteuid() != 0 and not held:
        return ()
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 40
    return tuple(range(last + 1))


def _status() -> dict[str, str]:
    found: dict[str, str] = {}
    status = "/proc/self/status"  # platform: only called behind _LINUX
    with contextlib.suppress(OSError), open(status) as f:
        for line in f:
            name, _, value = line.partition(":")
            found[name] = value.strip()
    return found


def available() -> tuple[int, str]:
    """``(abi, reason)``: the Landlock ABI usable with the seccomp filter here (0 and why
    not when the rung cannot run)."""
    if seccomp.machine_arch() is None:
        import platform

        where = platform.machine() if sys.platform.startswith("linux") else sys.platform
        return 0, f"dsh has no Landlock and seccomp support for {where}"
    level = landlock.abi()
    if level < 1:
        return 0, landlock.why_unavailable()
    return level, ""
