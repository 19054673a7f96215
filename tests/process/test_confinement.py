"""The Landlock rung's core: the ctypes Landlock layer, the seccomp filter, and the pre-exec
step of ``dsh.core.process``, on this real kernel (children really confined).

The ABI handling is tested at every level this module knows: a ruleset pinned to ABI N
handles exactly what N can restrict, and a child confined at N is refused what N refuses
(TCP only from 4). The seccomp filter is read back instruction by instruction (the
architecture check comes first) and then judged by the kernel: each refused socket family
and syscall, in a child. The pre-exec design is checked where it could fail: confined
children started from several threads while other threads hold locks and allocate, and
a confinement that fails in the child starts nothing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dsh.core import landlock, process, seccomp
from dsh.core.confinement import Confinement, PreExec, capabilities_to_drop, prepare

LEVEL = landlock.abi() if sys.platform.startswith("linux") else 0
needs_landlock = pytest.mark.skipif(
    LEVEL < 1 or seccomp.machine_arch() is None,
    reason=f"Landlock cannot run here: {landlock.why_unavailable() or 'no seccomp table'}")


def confined(code: str, confinement: Confinement, **kwargs: object) -> process.Completed:
    """Run Python ``code`` in a confined child; its exit status and outputs."""
    return process.run([sys.executable, "-I", "-S", "-c", textwrap.dedent(code)],
                       confine=confinement, timeout=60, text=True, **kwargs)  # type: ignore[arg-type]


def rules(work: Path) -> tuple[tuple[str, int], ...]:
    return (("/", landlock.READ), (str(work), landlock.WRITE),
            ("/dev/null", landlock.DEVICE))


# -- ABI handling -------------------------------------------------------------------------


def test_each_abi_handles_what_it_can_restrict() -> None:
    fs1, net1, scoped1 = landlock.handled(1)
    assert fs1 == (1 << 13) - 1 and net1 == 0 and scoped1 == 0
    assert landlock.handled(2)[0] == fs1 | landlock.FS_REFER
    assert landlock.handled(3)[0] == fs1 | landlock.FS_REFER | landlock.FS_TRUNCATE
    assert landlock.handled(4) == (landlock.handled(3)[0],
                                   landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP, 0)
    assert landlock.handled(5)[0] == landlock.handled(3)[0] | landlock.FS_IOCTL_DEV
    both = landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL
    assert landlock.handled(6)[2] == both and landlock.handled(7) == landlock.handled(6)
    assert landlock.handled(8) == landlock.handled(7)
    assert landlock.handled(9)[0] == landlock.handled(8)[0] | landlock.FS_RESOLVE_UNIX
    assert landlock.handled(99) == landlock.handled(landlock.KNOWN_ABI)
    with pytest.raises(ValueError):
        landlock.handled(0)


@needs_landlock
@pytest.mark.parametrize("level", range(1, landlock.KNOWN_ABI + 1))
def test_a_ruleset_pinned_to_an_abi_confines_as_that_abi(
        tmp_path: Path, level: int) -> None:
    if level > LEVEL:
        pytest.skip(f"this kernel offers Landlock ABI {LEVEL}")
    with landlock.Ruleset(level) as ruleset:
        assert (ruleset.fs, ruleset.net, ruleset.scoped) == landlock.handled(level)
        assert ruleset.allow_path(str(tmp_path), landlock.WRITE)
        assert not ruleset.allow_path(str(tmp_path / "missing"), landlock.READ)
        if level < 4:
            with pytest.raises(landlock.LandlockError, match="does not restrict TCP"):
                ruleset.allow_port(80)
    work = tmp_path / "work"
    work.mkdir()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        done = confined(f"""
            import errno, os, socket
            open({str(work / 'in')!r}, 'w').write('x')
            try:
                open({str(tmp_path / 'out')!r}, 'w')
            except PermissionError:
                print('write outside refused')
            s = socket.socket()
            try:
                s.connect(('127.0.0.1', {port}))
                print('connected')
            except PermissionError:
                print('connect refused')
            """, Confinement(rules(work), seccomp.NETWORK_TCP, (), level))
    assert done.returncode == 0, done.stderr
    assert "write outside refused" in done.stdout and (work / "in").exists()
    assert not (tmp_path / "out").exists()
    # TCP rules from ABI 4; below it the filter lets TCP through and Landlock cannot stop it.
    expected = "connect refused" if level >= 4 else "connected"
    assert expected in done.stdout, done.stdout


@needs_landlock
def test_tcp_connect_is_allowed_to_the_named_port_only(tmp_path: Path) -> None:
    if LEVEL < 4:
        pytest.skip(f"Landlock ABI {LEVEL} has no TCP rules")
    with socket.socket() as allowed, socket.socket() as other:
        for s in (allowed, other):
            s.bind(("127.0.0.1", 0))
            s.listen(1)
        done = confined(f"""
            import socket
            for port in ({allowed.getsockname()[1]}, {other.getsockname()[1]}):
                try:
                    socket.create_connection(('127.0.0.1', port)).close()
                    print(port, 'ok')
                except OSError as exc:
                    print(port, exc.errno)
            try:
                socket.socket().bind(('127.0.0.1', 0))
                print('bound')
            except OSError as exc:
                print('bind', exc.errno)
            """, Confinement(rules(tmp_path), seccomp.NETWORK_TCP,
                             (allowed.getsockname()[1],)))
        assert done.stdout.splitlines() == [f"{allowed.getsockname()[1]} ok",
                                            f"{other.getsockname()[1]} {errno.EACCES}",
                                            f"bind {errno.EACCES}"], done


@needs_landlock
def test_root_keeps_its_uid_but_no_capability_and_no_new_privileges(tmp_path: Path) -> None:
    done = confined("""
        fields = dict(line.split(':', 1) for line in open('/proc/self/status'))
        for name in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):
            print(name, fields[name].strip())
        """, Confinement(rules(tmp_path)))
    found = dict(line.split() for line in done.stdout.splitlines())
    assert found["NoNewPrivs"] == "1" and found["Seccomp"] == "2", found
    assert int(found["CapEff"], 16) == 0 and int(found["CapPrm"], 16) == 0
    assert int(found["CapAmb"], 16) == 0
    if os.geteuid() == 0:
        assert capabilities_to_drop() and int(found["CapBnd"], 16) == 0, found


# -- the seccomp filter -------------------------------------------------------------------


def test_the_filter_checks_the_architecture_first_and_only_jumps_forward() -> None:
    arch = seccomp.ARCHES["x86_64"]
    for network in seccomp.NETWORKS:
        code = seccomp.describe(seccomp.program(network, arch))
        assert code[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
        assert code[1] == (0x15, 1, 0, arch.audit)  # ours: skip the kill
        assert code[2] == (0x06, 0, 0, seccomp.RET_KILL_PROCESS)
        assert code[3] == (0x20, 0, 0, 0)  # then the syscall number
        assert code[4] == (0x35, code[4][1], 0, 0x40000000)  # x32 refused
        assert code[-1][0] == 0x06  # ends in an answer
    aarch64 = seccomp.describe(seccomp.program(seccomp.NETWORK_NONE, seccomp.ARCHES["aarch64"]))
    assert aarch64[1] == (0x15, 1, 0, 0xC00000B7) and aarch64[4][0] != 0x35
    with pytest.raises(ValueError):
        seccomp.program("some", arch)
    for arch in seccomp.ARCHES.values():
        assert len(set(arch.numbers.values())) == len(arch.numbers)


@needs_landlock
@pytest.mark.parametrize("network", seccomp.NETWORKS)
def test_the_filter_refuses_socket_families_and_escapes(tmp_path: Path, network: str) -> None:
    done = confined("""
        import ctypes, errno, fcntl, os, socket, termios
        libc = ctypes.CDLL(None, use_errno=True)
        def try_(name, make):
            try:
                make()
                print(name, 'ok')
            except OSError as exc:
                print(name, errno.errorcode[exc.errno])
        try_('unix', lambda: socket.socket(socket.AF_UNIX).close())
        try_('pair', lambda: [s.close() for s in socket.socketpair()])
        try_('tcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
        try_('tcp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close())
        try_('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
        try_('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).close())
        try_('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close())
        try_('packet', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close())
        def call(name, number, *args):
            result = libc.syscall(number, *args)
            print(name, 'ok' if result >= 0 else errno.errorcode[ctypes.get_errno()])
        params = ctypes.create_string_buffer(120)
        call('io_uring_setup', 425, 8, params)
        call('clone3', 435, None, 0)
        call('unshare', 272, 0x10000000)
        call('keyctl', 250, 0, 0)
        call('bpf', 321, 0, None, 0)
        # stdin is /dev/null: the kernel would say ENOTTY, the filter says EPERM first.
        try_('tiocsti', lambda: fcntl.ioctl(0, termios.TIOCSTI, b'x'))
        """, Confinement(rules(tmp_path), network))
    found = dict(line.split() for line in done.stdout.splitlines())
    inet = {"none": "EACCES", "tcp": "ok", "all": "ok"}[network]
    assert found == {
        "unix": "ok", "pair": "ok", "tcp": inet, "tcp6": inet,
        "udp": "ok" if network == "all" else "EACCES",
        "mptcp": {"none": "EACCES", "tcp": "EACCES", "all": found["mptcp"]}[network],
        "netlink": "ok" if network == "all" else "EACCES", "packet": "EACCES",
        "io_uring_setup": "ENOSYS", "clone3": "ENOSYS", "unshare": "EPERM",
        "keyctl": "EPERM", "bpf": "EPERM", "tiocsti": "EPERM"}, done


# -- the pre-exec step --------------------------------------------------------------------


@needs_landlock
def test_confined_starts_from_threads_while_others_hold_locks(tmp_path: Path) -> None:
    """The child runs only raw syscalls: with another thread holding a lock of the
    program's own for the whole time (the SDK client's, say; the child inherits it held)
    and one allocating and importing, several threads starting confined children at once,
    nothing deadlocks (each start is bounded by its timeout: a hang would fail it).
    CPython's own at-fork handlers take the import lock and logging's module lock in the
    parent around each fork, so those are never inherited held."""
    confinement = Confinement(rules(tmp_path))
    stop = threading.Event()
    held = threading.Event()
    program_lock = threading.Lock()

    def hold() -> None:
        with program_lock:
            held.set()
            stop.wait(60)

    def churn() -> None:
        while not stop.is_set():
            [bytearray(4096) for _ in range(64)]
            __import__("json")

    background = [threading.Thread(target=hold), threading.Thread(target=churn)]
    for thread in background:
        thread.start()
    held.wait(10)
    results: list[int] = []

    def start_some() -> None:
        for _ in range(5):
            done = process.run(["true"], confine=confinement, timeout=30)
            results.append(-1 if done.timed_out else done.returncode)

    starters = [threading.Thread(target=start_some) for _ in range(4)]
    try:
        for thread in starters:
            thread.start()
        for thread in starters:
            thread.join(120)
    finally:
        stop.set()
        for thread in background:
            thread.join(10)
    assert results == [0] * 20


@needs_landlock
def test_a_confinement_that_fails_in_the_child_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    pre = prepare(Confinement(rules(tmp_path)))
    assert isinstance(pre, PreExec)
    pre.close()  # the child would restrict itself with a closed ruleset: EBADF
    import subprocess

    with pytest.raises(subprocess.SubprocessError, match="preexec_fn"):
        subprocess.run(["sh", "-c", f"touch {marker}"], preexec_fn=pre, check=False)
    assert not marker.exists()


def test_an_unknown_abi_is_refused_before_anything_starts() -> None:
    with pytest.raises(OSError, match=r"Landlock is unavailable|cannot confine"):
        prepare(Confinement((("/", landlock.READ),), level=0))


@needs_landlock
def test_landlock_reports_its_abi_as_the_kernel_gives_it() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    raw = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    assert landlock.abi() == raw >= 1 and landlock.why_unavailable() == ""
