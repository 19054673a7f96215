"""A seccomp filter for sandboxed commands, assembled as classic BPF with the standard library.

Landlock (:mod:`dsh.core.landlock`) decides files and TCP ports; it has no say over socket
*families* (UDP, raw, netlink, vsock), and a few syscalls reach around it. This filter,
installed in the command's process before ``exec`` (:mod:`dsh.core.confinement`), is the
other half of the Landlock rung. No library (libseccomp) is needed: minimal images lack
it and the frozen runtime would have to carry it; a filter is a short array of
``struct sock_filter`` that :func:`program` packs itself. What it decides, in order:

1. **Architecture first.** A syscall made with another ABI than the machine's own (32-bit
   ``int 0x80`` on x86_64, where numbers mean other calls) kills the process; x32 calls
   (bit 30 set on x86_64) are refused. Every later check reads numbers of one table.
2. **Socket families** (``socket``, ``socketpair``): ``AF_UNIX`` always (pipes between a
   build's processes, local servers; connecting to a *path* is not something Landlock or
   seccomp can judge, see ``docs/security.md``); under :data:`NETWORK_TCP` (the allow-list
   proxy) ``AF_INET``/``AF_INET6`` stream sockets of protocol TCP only, so no UDP (DNS
   included: the proxy resolves names), no raw or packet sockets, and no MPTCP or SCTP,
   whose connects Landlock's TCP rules do not see; under :data:`NETWORK_ALL` also
   ``AF_INET``/``AF_INET6`` of any type and ``AF_NETLINK``. Everything else gets EACCES,
   as Landlock's own refusals do.
3. **io_uring** (``io_uring_setup``/``enter``/``register``): ENOSYS. Its operations
   (``IORING_OP_SOCKET``, ``IORING_OP_CONNECT``, ``IORING_OP_OPENAT``) run in the kernel
   without passing this filter, so allowing it would undo step 2.
4. **New namespaces** (``unshare`` and ``clone`` with ``CLONE_NEW*`` flags, ``setns``):
   EPERM; ``clone3``: ENOSYS, so that libc falls back to ``clone``, whose flags can be
   read (``clone3``'s sit behind a pointer). A user namespace would hand the command every
   capability inside it, the kernel's largest attack surface; Landlock would still hold
   (it forbids mounts), so this is depth, and it is what Docker's default profile does.
5. **Terminal injection** (``ioctl`` ``TIOCSTI``, ``TIOCLINUX``): EPERM. Pushing input into
   a terminal the command inherited (``dsh sandbox`` runs in the user's) would type
   commands into the user's shell after it ends.
6. **Kernel keyrings** (``keyctl``, ``add_key``, ``request_key``): EPERM; the session
   keyring is shared with the runtime and may hold credentials. **bpf**,
   **perf_event_open**, **userfaultfd**: EPERM, attack surface no build needs.

Everything else is allowed. ``ptrace`` is left to Landlock, which confines it to processes
inside the same sandbox (a debugger on the command's own children works; the runtime is
out of reach). Installed with ``prctl(PR_SET_SECCOMP)``, so no per-machine number is
needed for installing it, only for the calls it judges (:data:`ARCHES`).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
import sys
from collections.abc import Sequence
from typing import NamedTuple

_LINUX = sys.platform.startswith("linux")

NETWORK_NONE = "none"
"""Only ``AF_UNIX`` sockets."""
NETWORK_TCP = "tcp"
"""``AF_UNIX`` and TCP over IPv4/IPv6 (Landlock then decides the ports)."""
NETWORK_ALL = "all"
"""``AF_UNIX``, ``AF_INET``, ``AF_INET6`` (any type) and ``AF_NETLINK``."""
NETWORKS = (NETWORK_NONE, NETWORK_TCP, NETWORK_ALL)

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCK_STREAM = 1
SOCK_TYPE_MASK = 0xF
IPPROTO_TCP = 6
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000
"""``CLONE_NEWNS``, ``NEWCGROUP``, ``NEWUTS``, ``NEWIPC``, ``NEWUSER``, ``NEWPID``,
``NEWNET``."""
CLONE_NEWTIME = 0x80
"""Only ``unshare`` takes it (in ``clone`` that bit is part of the exit signal)."""

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class Arch(NamedTuple):
    """One machine's seccomp view: its ``AUDIT_ARCH_*`` value and syscall numbers."""

    audit: int
    numbers: dict[str, int]
    x32: bool = False
    """Whether numbers with bit 30 set are another ABI (x86_64's x32)."""


_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
           "clone3": 435}
ARCHES: dict[str, Arch] = {
    "x86_64": Arch(0xC000003E, {
        **_COMMON, "socket": 41, "socketpair": 53, "ioctl": 16, "clone": 56,
        "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323}, x32=True),
    "aarch64": Arch(0xC00000B7, {
        **_COMMON, "socket": 198, "socketpair": 199, "ioctl": 29, "clone": 220,
        "unshare": 97, "setns": 268, "keyctl": 219, "add_key": 217, "request_key": 218,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282}),
}
"""The machines dsh can filter; on any other the Landlock rung is not offered."""

# Classic BPF opcodes (linux/filter.h).
_LD_ABS_W = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_AND = 0x54
_RET = 0x06
# Offsets in struct seccomp_data: nr, arch, then the u64 args (low half first here: the
# machines above are little-endian).
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    return 16 + 8 * index


def machine_arch() -> Arch | None:
    """This machine's :class:`Arch`, or None when dsh cannot filter here."""
    if not _LINUX:
        return None
    return ARCHES.get(platform.machine())


class _Asm:
    """A tiny assembler: instructions with jumps to labels, resolved at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int = 0, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def ret(self, value: int) -> None:
        self.op(_RET, value)

    def load(self, offset: int) -> None:
        self.op(_LD_ABS_W, offset)

    def jump_if(self, code: int, k: int, target: str) -> None:
        """To ``target`` when the test holds, else on to the next instruction."""
        self.op(code, k, target, 0)

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self.code):
            out += struct.pack("=HBBI", code, self._offset(index, jt),
                               self._offset(index, jf), k)
        return bytes(out)

    def _offset(self, index: int, target: object) -> int:
        if isinstance(target, int):
            return target
        distance = self.labels[str(target)] - index - 1
        if not 0 <= distance <= 255:  # forward only, within a u8
            raise ValueError(f"seccomp jump to {target} out of range ({distance})")
        return distance


def _deny(err: int) -> int:
    return RET_ERRNO | err


def program(network: str = NETWORK_NONE, arch: Arch | None = None) -> bytes:
    """The filter's instructions (``struct sock_filter`` array) for ``network``."""
    if network not in NETWORKS:
        raise ValueError(f"unknown network policy {network!r}")
    arch = arch or machine_arch()
    if arch is None:
        raise OSError(errno.ENOSYS, f"dsh has no seccomp table for {platform.machine()}")
    n = arch.numbers
    asm = _Asm()
    asm.load(_ARCH)
    asm.op(_JEQ, arch.audit, 1, 0)
    asm.ret(RET_KILL_PROCESS)
    asm.load(_NR)
    if arch.x32:
        asm.jump_if(_JGE, 0x40000000, "eperm")
    for name, target in (("socket", "socket"), ("socketpair", "socketpair"),
                         ("io_uring_setup", "enosys"), ("io_uring_enter", "enosys"),
                         ("io_uring_register", "enosys"), ("clone3", "enosys"),
                         ("unshare", "unshare"), ("clone", "clone"), ("setns", "eperm"),
                         ("ioctl", "ioctl"), ("keyctl", "eperm"), ("add_key", "eperm"),
                         ("request_key", "eperm"), ("bpf", "eperm"),
                         ("perf_event_open", "eperm"), ("userfaultfd", "eperm")):
        asm.jump_if(_JEQ, n[name], target)
    asm.ret(RET_ALLOW)

    asm.label("socket")
    asm.load(_arg(0))
    asm.jump_if(_JEQ, AF_UNIX, "allow")
    if network == NETWORK_ALL:
        for family in (AF_INET, AF_INET6, AF_NETLINK):
            asm.jump_if(_JEQ, family, "allow")
    elif network == NETWORK_TCP:
        asm.jump_if(_JEQ, AF_INET, "stream")
        asm.jump_if(_JEQ, AF_INET6, "stream")
    asm.ret(_deny(errno.EACCES))
    if network == NETWORK_TCP:
        asm.label("stream")
        asm.load(_arg(1))
        asm.op(_AND, SOCK_TYPE_MASK)
        asm.op(_JEQ, SOCK_STREAM, 1, 0)
        asm.ret(_deny(errno.EACCES))
        asm.load(_arg(2))
        asm.jump_if(_JEQ, 0, "allow")
        asm.jump_if(_JEQ, IPPROTO_TCP, "allow")
        asm.ret(_deny(errno.EACCES))

    asm.label("socketpair")
    asm.load(_arg(0))
    asm.jump_if(_JEQ, AF_UNIX, "allow")
    asm.ret(_deny(errno.EACCES))

    asm.label("unshare")
    asm.load(_arg(0))
    asm.jump_if(_JSET, CLONE_NEW | CLONE_NEWTIME, "eperm")
    asm.ret(RET_ALLOW)

    asm.label("clone")
    asm.load(_arg(0))
    asm.jump_if(_JSET, CLONE_NEW, "eperm")
    asm.ret(RET_ALLOW)

    asm.label("ioctl")
    asm.load(_arg(1))
    asm.jump_if(_JEQ, TIOCSTI, "eperm")
    asm.jump_if(_JEQ, TIOCLINUX, "eperm")
    asm.ret(RET_ALLOW)

    # Shared answers last: classic BPF only jumps forward.
    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("eperm")
    asm.ret(_deny(errno.EPERM))
    asm.label("enosys")
    asm.ret(_deny(errno.ENOSYS))
    return asm.assemble()


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Filter:
    """A filter ready to install: its instructions in memory and the ``sock_fprog`` that
    points at them, both kept alive by this object (built before a fork, used after)."""

    def __init__(self, code: bytes) -> None:
        if len(code) % 8 or not code:
            raise ValueError("a seccomp program is a whole number of 8-byte instructions")
        self.code = code
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self.fprog = _Fprog(len(code) // 8, ctypes.addressof(self._buffer))
        self.address = ctypes.addressof(self.fprog)

    @classmethod
    def for_network(cls, network: str) -> Filter:
        """The sandbox's filter for ``network`` on this machine."""
        return cls(program(network))


def describe(code: bytes) -> Sequence[tuple[int, int, int, int]]:
    """The instructions as ``(code, jt, jf, k)`` tuples (for tests and debugging)."""
    return [struct.unpack("=HBBI", code[i:i + 8]) for i in range(0, len(code), 8)]
