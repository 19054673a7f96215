"""Landlock, Linux's unprivileged access control: a ctypes layer over its three syscalls.

Landlock (Linux 5.13+) lets a process restrict itself and every process it starts
afterwards: a *ruleset* says which kinds of access it handles (denied unless a rule allows
them) and *rules* allow some of them beneath given directories (or on given files) and,
from ABI 4, TCP ``bind``/``connect`` on given ports. ``landlock_restrict_self`` then
applies the ruleset to the calling thread, for good; it is inherited across ``fork`` and
``execve``. No stable Python binding exists (the ``landlock`` and ``landlockpy`` packages
are pre-release), so this module is the whole binding dsh needs, standard library only:

- :func:`abi` asks the kernel for the highest ABI it offers
  (``landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)``), 0 when Landlock
  is missing, disabled at boot or refused by an outer seccomp filter;
- :func:`handled` is what dsh asks of each ABI (everything that ABI can restrict, see the
  table below), so the same code runs on every kernel and uses the most it offers;
- :class:`Ruleset` builds a ruleset file descriptor in the *parent*, before any fork:
  creating it and adding rules opens every path (``O_PATH``) and may fail with a message
  worth reading, which is no work for a child between ``fork`` and ``exec``
  (:mod:`dsh.core.confinement` applies it there with one raw syscall).

What each ABI adds, and what dsh handles from it:

===  =====  ===========================================================================
ABI  Linux  added
===  =====  ===========================================================================
1    5.13   files: execute, read, write, read dirs, remove, make (dir, file, socket,
            FIFO, symlink, char and block devices)
2    5.19   ``REFER``: linking or renaming into another directory (denied before)
3    6.2    ``TRUNCATE``
4    6.7    TCP ``bind`` and ``connect`` by port
5    6.10   ``IOCTL_DEV``: ioctls on device files
6    6.12   scopes: abstract unix sockets and signals outside the sandbox
7    6.15   audit logging flags (not used)
8    7.0    ``TSYNC``: restricting every thread at once (not needed: a child has one)
9    7.1    ``RESOLVE_UNIX``: connecting to a unix socket by its path
===  =====  ===========================================================================

Syscall numbers: 444, 445 and 446 on every architecture with the generic table (x86_64,
aarch64, riscv64, ...), which is all dsh supports here (:data:`ARCHES`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import stat
import sys
from typing import Any

_LINUX = sys.platform.startswith("linux")

ARCHES = ("x86_64", "aarch64")
"""Machines whose syscall numbers this module (and :mod:`dsh.core.seccomp`) knows."""

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13
FS_TRUNCATE = 1 << 14
FS_IOCTL_DEV = 1 << 15
FS_RESOLVE_UNIX = 1 << 16

NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

FILE_ACCESS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
"""The only rights a rule on a file (not a directory) may carry."""

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR | FS_RESOLVE_UNIX
"""Read and run (and, from ABI 9, connect to unix sockets there): what the sandbox grants
on the system, toolchains and a read-only root."""
WRITE = (READ | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG
         | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE)
"""Everything but device nodes (``MAKE_CHAR``, ``MAKE_BLOCK``) and device ioctls: a
writable root, the private temporary directory."""
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
"""A device file such as ``/dev/null``: read, write, its ioctls."""

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1,
              9: (1 << 17) - 1}
_ATTR_SIZE = {1: 8, 4: 16, 6: 24}
"""Size of ``struct landlock_ruleset_attr`` from each ABI on (its fields grew)."""
KNOWN_ABI = 9
"""The newest ABI this module was written for; a newer kernel is used as this one."""


class LandlockError(OSError):
    """A Landlock syscall failed; ``errno`` and the message say which and why."""


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def supported_machine() -> bool:
    """Whether this is Linux on a machine whose syscall numbers dsh knows."""
    return _LINUX and platform.machine() in ARCHES


_abi: int | None = None


def abi() -> int:
    """The highest Landlock ABI the kernel offers (0: none). Asked once per process."""
    global _abi
    if _abi is None:
        _abi = _query_abi()
    return _abi


def _query_abi() -> int:
    if not supported_machine():
        return 0
    libc = _libc()
    found = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                         ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(found), 0)


def why_unavailable() -> str:
    """Why :func:`abi` is 0 here, in words for a person."""
    if not _LINUX:
        return f"Landlock is Linux's ({sys.platform} has none)"
    if platform.machine() not in ARCHES:
        return (f"dsh knows no syscall numbers for {platform.machine()} (it knows "
                f"{', '.join(ARCHES)})")
    libc = _libc()
    result = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                          ctypes.c_uint32(CREATE_RULESET_VERSION))
    if result >= 1:
        return ""
    err = ctypes.get_errno()
    if err == 38:  # ENOSYS
        return ("the kernel has no Landlock (Linux 5.13 or later built with "
                "CONFIG_SECURITY_LANDLOCK), or a seccomp filter around dsh hides it")
    if err == 95:  # EOPNOTSUPP
        return "Landlock is built into the kernel but not enabled at boot (add it to lsm=)"
    return f"landlock_create_ruleset failed: {os.strerror(err)}"


def handled(level: int) -> tuple[int, int, int]:
    """``(fs, net, scoped)``: what dsh asks a ruleset of ABI ``level`` to handle.

    Every filesystem right that ABI knows (so nothing is left open by omission), TCP
    bind and connect from 4, both scopes from 6. Raises ValueError for level < 1.
    """
    if level < 1:
        raise ValueError(f"no Landlock ABI {level}")
    level = min(level, KNOWN_ABI)
    fs = _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= level)]
    net = NET_BIND_TCP | NET_CONNECT_TCP if level >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if level >= 6 else 0
    return fs, net, scoped


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class Ruleset:
    """A Landlock ruleset being built: a file descriptor (close-on-exec) and its rules.

    ``level`` is the ABI to use (default: the kernel's); ``net`` false leaves TCP
    unhandled (allowed) even where the ABI could restrict it; ``scoped`` false leaves
    signals and abstract unix sockets unscoped. Rights a rule names that this ruleset
    does not handle are dropped from it (an older ABI simply cannot restrict them);
    a rule on a file keeps only file rights.
    """

    def __init__(self, level: int | None = None, *, net: bool = True,
                 scoped: bool = True) -> None:
        self.level = abi() if level is None else level
        if self.level < 1:
            raise LandlockError(95, f"Landlock is unavailable: {why_unavailable()}")
        fs, handled_net, handled_scopes = handled(self.level)
        self.fs = fs
        self.net = handled_net if net else 0
        self.scoped = handled_scopes if scoped else 0
        self.rules = 0
        self._libc = _libc()
        attr = _RulesetAttr(self.fs, self.net, self.scoped)
        size = _ATTR_SIZE[max(k for k in _ATTR_SIZE if k <= self.level)]
        fd = self._libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr),
                                ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        self.fd: int = int(fd)
        os.set_inheritable(self.fd, False)

    def allow_path(self, path: str, access: int) -> bool:
        """Allow ``access`` beneath ``path`` (on it, for a file); False when the path does
        not exist (nothing to allow). Symbolic links are followed, as a later open by
        that path would be."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise LandlockError(exc.errno or 0, f"{path}: {exc.strerror}") from exc
        try:
            allowed = access & self.fs
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                allowed &= FILE_ACCESS
            if not allowed:
                return False
            rule = _PathBeneath(allowed, fd)
            self._add(RULE_PATH_BENEATH, ctypes.byref(rule), path)
        finally:
            os.close(fd)
        return True

    def allow_port(self, port: int, access: int = NET_CONNECT_TCP) -> None:
        """Allow TCP ``access`` (connect by default) on ``port``; an error when this
        ruleset does not handle TCP (nothing to allow)."""
        if not self.net & access:
            raise LandlockError(22, "this ruleset does not restrict TCP (ABI < 4)")
        rule = _NetPort(access & self.net, port)
        self._add(RULE_NET_PORT, ctypes.byref(rule), f"TCP port {port}")

    def _add(self, kind: int, rule: Any, what: str) -> None:
        result = self._libc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(self.fd),
                                    ctypes.c_int(kind), rule, ctypes.c_uint32(0))
        if result != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_add_rule ({what}): {os.strerror(err)}")
        self.rules += 1

    def close(self) -> None:
        """Close the descriptor (a restricted child has its own reference by then)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Ruleset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
