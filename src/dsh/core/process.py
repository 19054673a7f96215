"""Process control: the one way dsh starts, signals, stops and reaps a child process.

Every child of dsh starts here: shell commands and background jobs, ripgrep, the
bubblewrap trial, MCP stdio servers, the SDK's runtime (and so every sub-agent), pip for
``dsh plugin``, the doctor's boot check. So the same rules hold for all of them:

* **Its own process group** (a session of its own on POSIX): a signal to the group reaches
  whatever the child started there, and a terminal's Ctrl-C reaches dsh alone, which then
  stops its children in order.
* **Tied to its parent** where the OS allows (``tie``): on Linux the child runs under
  util-linux ``setpriv --pdeathsig SIG``, so the kernel signals it when the thread that
  started it dies, even when dsh is SIGKILLed. Not ``prctl`` in a ``preexec_fn``: that
  runs Python between fork and exec, where a lock held by another thread of the parent
  (the SDK client is often driven from threads) deadlocks the child, and it forces
  ``fork`` over the faster ``vfork``/``posix_spawn``. ``setpriv`` does the same in C
  and then ``exec``s, keeping the pid. On Windows the child's kill-on-close job object
  is the tie (the kernel ends it with dsh); macOS has neither, so there a child outlives
  a SIGKILLed dsh unless it watches its stdin (a runtime does, and its parent pid too:
  ``dsh.runtime.kernel.parentwatch``).
* **Limits** where asked (``limits``, :mod:`dsh.core.limits`): a cgroup of its own where dsh
  can make one, rlimits otherwise, applied by exec-safe wrappers too.
* **Stopped one way**: :meth:`Group.terminate` (SIGTERM to the group), a grace period,
  :meth:`Group.kill` (SIGKILL to the group and to everything left in its cgroup), reaped,
  then :meth:`Group.release` removes the cgroup.
* **A Python child never imports from its working directory** (:func:`python_command`):
  a ``json.py`` planted in a workspace must not run, unsandboxed, in the next sub-agent.

::

    argv ─► prepare (resolve, wrappers, cgroup) ─► spawn / spawn_async / spawn_protocol
                                                        │
                       Group(pid, cgroup) ◄─────────────┘
                         terminate() ─ grace ─► kill() ─► reaped ─► release()

The sync flavour (:class:`Child`, :func:`spawn`, :func:`run`) and the async one
(:class:`AsyncChild`, :func:`spawn_async`, :func:`spawn_protocol`) share :func:`_prepare`
and :class:`Group`; only the waiting differs.

Platforms, three branches behind two guards:

* ``_POSIX`` (process groups and signals by number: Linux, macOS): as above. Keyed off the
  calls themselves (``os.killpg``, ``os.getpgid``, ``signal.SIGKILL``), not ``os.name``, so
  the portable branch runs wherever one is missing and can be exercised on Linux with them
  removed (``tests/process/test_portable.py``).
* ``_WINDOWS``: a child starts in a process group of its own
  (``CREATE_NEW_PROCESS_GROUP``) and in a kill-on-close job object of its own
  (:mod:`dsh.core.winjob`): :meth:`Group.terminate` sends ``CTRL_BREAK_EVENT`` to the group
  (a Python child sees ``SIGBREAK``, which the runtime treats as ``SIGTERM``),
  :meth:`Group.kill` terminates the job, so the whole tree, and the kernel ends the job
  when dsh exits, however it exits (the tie). Without a job, ``taskkill /T /F`` kills
  the tree.
* Anywhere else (or a POSIX missing those calls): the leader alone, through its handle
  (``terminate()``, then ``kill()``).

Every POSIX-only name used in dsh sits behind one of these guards (or ``_LINUX``):
``tests/process/test_platform_guards.py`` scans the source for them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from dsh.core.limits import Cgroup, Limits, Site, plan, sites

if TYPE_CHECKING:
    from dsh.core.confinement import Confinement, PreExec

if TYPE_CHECKING:
    # Only the async flavour needs asyncio, and imports it itself: the SDK spawns its
    # runtime with spawn() before an event loop exists (dsh.sdk._launch.HeadStart).
    import asyncio

_POSIX = all(hasattr(os, name) for name in ("killpg", "getpgid", "setsid")) \
    and hasattr(signal, "SIGKILL")
"""The POSIX guard: process groups, sessions and signals by number exist here."""
_WINDOWS = sys.platform == "win32"
"""The Windows guard: job objects and console control events (:mod:`dsh.core.winjob`)."""
_LINUX = sys.platform.startswith("linux")
"""The Linux guard: ``setpriv``, ``prctl``, ``/proc`` and cgroups."""

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT

TERM_GRACE = 0.5
"""Default seconds between terminate and kill."""
KILL_WAIT = 5.0
"""Seconds a killed leader is awaited; only a process stuck in the kernel takes longer."""
_POLL = 0.01
_RELEASE_TRIES = 50
"""How often (every :data:`_POLL` s) a stop tries to remove a killed command's cgroup."""
_RUN_SLICE = 0.05
"""How often :func:`run` checks whether the leader exited while its pipes stay open."""
"""How often an async wait checks the exit status (asyncio's own wait also waits for
the pipes to close, which a grandchild holding one would delay forever)."""

TIE_KILL = "KILL"
"""``tie`` value: the child is killed outright when its parent dies (tools, servers)."""
TIE_TERM = "TERM"
"""``tie`` value: the child gets SIGTERM, to stop its own children in order (runtimes)."""

Stream = int | IO[Any] | None


class Completed(NamedTuple):
    """What :func:`run` returns: exit status, both outputs, and whether it timed out."""

    returncode: int
    stdout: Any
    stderr: Any
    timed_out: bool = False


# -- starting ------------------------------------------------------------------------------


def python_command(module: str, *, executable: str | None = None) -> list[str]:
    """The argv that runs ``python -m module`` with no project path on ``sys.path``.

    Python puts the working directory first on ``sys.path`` for ``-m`` and ``-c``, so a
    child started in a workspace would import that workspace's ``json.py`` before the
    standard library's. 3.11+ has ``-P`` for exactly this; on 3.10 the module is run by
    ``-c`` code that first drops that entry (``''``, the working directory), before any
    import can look there. ``executable`` defaults to this interpreter (whose version
    decides the form).
    """
    python = executable or sys.executable
    if sys.version_info >= (3, 11):
        return [python, "-P", "-m", module]
    return [python, "-c", _SAFE_MAIN, module]


_SAFE_MAIN = ("import sys\n"
              "if sys.path and sys.path[0] in ('', '.'): del sys.path[0]\n"
              "import runpy\n"
              "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n")
"""The 3.10 form of ``-P -m``: drop the working directory from ``sys.path``, then run the
module named by the first argument as ``__main__`` (``sys.argv`` as ``-m`` makes it)."""


class _Prepared(NamedTuple):
    argv: list[str]
    options: dict[str, Any]
    cgroup: Cgroup | None
    confined: PreExec | None = None

    def started(self) -> None:
        """The child exists (or failed to): the parent's copy of its ruleset goes."""
        if self.confined is not None:
            self.confined.close()

    def failed(self) -> None:
        """The start failed: release what was made for it."""
        self.started()
        if self.cgroup is not None:
            self.cgroup.remove()


def _prepare(argv: Sequence[str], *, env: Mapping[str, str] | None, tie: str | None,
             limits: Limits | None, confine: Confinement | None = None) -> _Prepared:
    """The final argv (wrappers first), Popen options and the cgroup made for it.

    The command's executable is resolved first, on the child's own ``PATH``: behind a
    wrapper a missing program would only show as a wrapper exiting 127, so the error a
    plain exec gives (``FileNotFoundError``, ``PermissionError``) is raised here instead.
    """
    if _guard == "asked":
        _hide_from_children()
    command = list(argv)
    options: dict[str, Any] = {}
    prefix: list[str] = []
    cgroup: Cgroup | None = None
    if _POSIX:
        options["start_new_session"] = True
    elif _WINDOWS:
        from dsh.core.winjob import CREATE_SUSPENDED

        # Suspended until it is in its job (``_adopt``): nothing it starts escapes the job.
        options["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP | CREATE_SUSPENDED
    if _LINUX and tie is not None:
        setpriv = shutil.which("setpriv")
        if setpriv:
            prefix += [setpriv, "--pdeathsig", tie, "--"]
    if limits is not None and _POSIX:
        planned = plan(limits, _site(limits))
        prefix += planned.prefix
        cgroup = planned.cgroup
    if prefix:
        try:
            command[0] = _resolve(command[0], env)
        except OSError:
            if cgroup is not None:
                cgroup.remove()
            raise
    confined = _pre_exec(confine, cgroup) if confine is not None else None
    if confined is not None:
        options["preexec_fn"] = confined
    return _Prepared([*prefix, *command], options, cgroup, confined)


def spawn(argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
          stdin: Stream = DEVNULL, stdout: Stream = PIPE, stderr: Stream = PIPE,
          tie: str | None = TIE_KILL, limits: Limits | None = None,
          text: bool = False, confine: Confinement | None = None) -> Child:
    """Start ``argv`` (blocking flavour); OSError when it cannot be started.

    ``confine`` (the sandbox's Landlock rung) is applied in the child before ``exec``
    (:func:`_pre_exec`)."""
    prepared = _prepare(argv, env=env, tie=tie, limits=limits, confine=confine)
    try:
        popen = subprocess.Popen(prepared.argv, cwd=cwd, env=_env(env), stdin=stdin,
                                 stdout=stdout, stderr=stderr, text=text, **prepared.options)
    except BaseException as exc:
        prepared.failed()
        if (refused := _refused(exc, prepared)) is not None:
            raise refused from exc
        raise
    prepared.started()
    return Child(popen, prepared.cgroup, _adopt(popen.pid, popen.kill))


async def spawn_async(argv: Sequence[str], *, cwd: str | None = None,
                      env: Mapping[str, str] | None = None, stdin: Stream = DEVNULL,
                      stdout: Stream = PIPE, stderr: Stream = PIPE,
                      tie: str | None = TIE_KILL, limits: Limits | None = None,
                      limit: int = 2 ** 16, pass_fds: Sequence[int] = (),
                      confine: Confinement | None = None) -> AsyncChild:
    """Start ``argv`` on the running loop; ``limit`` bounds a line read from its pipes,
    ``pass_fds`` are kept open in the child (ripgrep reads a directory opened beneath the
    workspace root through one), ``confine`` is applied in the child before ``exec``.

    Cancel-safe: cancelled while the process is being set up, the process (which may
    already run) is killed and reaped before the cancellation goes on.
    """
    import asyncio

    prepared = _prepare(argv, env=env, tie=tie, limits=limits, confine=confine)
    starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *prepared.argv, cwd=cwd, env=_env(env), stdin=stdin, stdout=stdout, stderr=stderr,
        limit=limit, pass_fds=tuple(pass_fds), **prepared.options))
    starting.add_done_callback(lambda _: prepared.started())
    try:
        process = await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            started = await starting
            await AsyncChild(started, prepared.cgroup, _adopt(started.pid, started.kill)
                             ).stop(0)
        raise
    except BaseException as exc:
        prepared.failed()
        if (refused := _refused(exc, prepared)) is not None:
            raise refused from exc
        raise
    return AsyncChild(process, prepared.cgroup, _adopt(process.pid, process.kill))


async def spawn_protocol(factory: Callable[[], asyncio.SubprocessProtocol],
                         argv: Sequence[str], *, cwd: str | None = None,
                         env: Mapping[str, str] | None = None,
                         tie: str | None = TIE_TERM) -> Group:
    """Start ``argv`` with three pipes driven by the protocol ``factory`` makes (the SDK's
    frame reader); returns the group handle. OSError when it cannot be started."""
    import asyncio

    prepared = _prepare(argv, env=env, tie=tie, limits=None)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.subprocess_exec(
        factory, *prepared.argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, cwd=cwd,
        env=_env(env), **prepared.options)
    return Group(transport.get_pid(), transport, None, _adopt(transport.get_pid(),
                                                              transport.kill))


def run(argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
        input: str | bytes | None = None, timeout: float | None = None,
        tie: str | None = TIE_KILL, text: bool = False,
        confine: Confinement | None = None) -> Completed:
    """Run ``argv`` to its end and capture both outputs (stdin is ``input`` or empty).

    Past ``timeout`` seconds the whole group is killed and the result says
    ``timed_out``; nothing the command started outlives the call either way.
    """
    child = spawn(argv, cwd=cwd, env=env, stdin=DEVNULL if input is None else PIPE,
                  tie=tie, text=text, confine=confine)
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            # Short slices: a daemon the command left behind holds the pipes open, and
            # only the leader's exit (then the group's kill) may end the wait.
            try:
                out, err = child.popen.communicate(input, _RUN_SLICE)
                break
            except subprocess.TimeoutExpired:
                input = None  # written already; communicate() keeps what it read
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
            if timed_out or child.popen.poll() is not None:
                child.kill()
                out, err = child.popen.communicate()
                break
    finally:
        child.stop(0)
    return Completed(child.popen.returncode, out, err, timed_out)


def hand_over(argv: Sequence[str]) -> int:
    """Run ``argv`` in this process's place (the ``dsh`` command handing its command line
    to the frozen runtime): its stdio, environment and working directory are this
    process's, and so are its signals and exit status.

    POSIX: ``exec`` (the pid stays, so an SDK client or a shell waiting on it sees the
    runtime itself); never returns. Elsewhere: a child sharing this console and stdio,
    tied to this process by a job (Windows), whose exit status is returned; a console
    Ctrl-C reaches the child, which decides, so this process ignores it meanwhile.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if os.name == "posix":
        os.execv(argv[0], list(argv))
    creationflags = 0
    if _WINDOWS:
        from dsh.core.winjob import CREATE_SUSPENDED

        creationflags = CREATE_SUSPENDED
    popen = subprocess.Popen(list(argv), creationflags=creationflags)
    job = _adopt(popen.pid, popen.kill)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return popen.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        if job is not None:
            job.close()


# -- the pre-exec confinement (the sandbox's Landlock rung) ------------------------------


def _pre_exec(confine: Confinement, cgroup: Cgroup | None) -> PreExec:
    """The confinement, built now in the parent, for ``preexec_fn`` in the child.

    :mod:`dsh.core.confinement` says why this one step runs between fork and exec (and
    why that is safe with threads: nothing in it takes a lock or imports). The cgroup
    join wrapper runs confined, so its ``cgroup.procs`` files are allowed to it.
    """
    from dsh.core.confinement import prepare

    files = [os.path.join(folder, "cgroup.procs") for folder in cgroup.dirs] \
        if cgroup is not None else []
    try:
        return prepare(confine, writable_files=files)
    except OSError:
        if cgroup is not None:
            cgroup.remove()
        raise


def _refused(exc: BaseException, prepared: _Prepared) -> OSError | None:
    """A confined child that refused its confinement (its ``preexec_fn`` raised, which
    ``subprocess`` reports as a bare SubprocessError) as an OSError naming the sandbox,
    like any other failed start; None for every other failure."""
    if prepared.confined is None or not isinstance(exc, subprocess.SubprocessError):
        return None
    import errno

    return PermissionError(errno.EPERM, "the sandbox could not confine the command "
                                        "(Landlock or seccomp refused it in the child)")


# -- the group handle ----------------------------------------------------------------------


_live: weakref.WeakValueDictionary[int, Group] = weakref.WeakValueDictionary()
"""Groups started and not yet released, for :func:`kill_children` (a forced exit). Weak:
a handle nobody holds any more must not keep its owner (an abandoned SDK client, whose
finalizer kills its runtime) alive."""
_live_lock = threading.Lock()


class Group:
    """A started child's process group (and cgroup or job): signalled, killed, released here.

    ``handle`` is what started it (a Popen, an asyncio Process or subprocess transport),
    used where process groups do not exist; ``job`` is its Windows job object, if any.
    """

    def __init__(self, pid: int, handle: Any, cgroup: Cgroup | None,
                 job: Any = None) -> None:
        self.pid = pid
        self.cgroup = cgroup
        self.job = job
        self._handle = handle
        with _live_lock:
            _live[id(self)] = self

    def terminate(self) -> bool:
        """Ask the whole group to end (SIGTERM; Windows: CTRL_BREAK_EVENT); False when
        none of it is left, or the request cannot be delivered (then kill at once)."""
        if _POSIX:
            return _signal_group(self.pid, signal.SIGTERM)
        if _WINDOWS:
            # Reaches the group only when it shares dsh's console; otherwise the OSError
            # says so and the stop ladder kills without a grace.
            return _call(lambda: os.kill(self.pid, signal.CTRL_BREAK_EVENT))
        return _call(self._handle.terminate)

    def kill(self) -> bool:
        """Kill the whole group and everything in its cgroup (Windows: its job, the whole
        tree); False when none was left."""
        if _WINDOWS:
            return self._kill_tree()
        if not _POSIX:
            return _call(self._handle.kill)
        hit = _signal_group(self.pid, signal.SIGKILL)
        cgroup = self.cgroup
        if cgroup is not None and not cgroup.kill_switch():
            # A fork bomb may still fork between reading and killing: a few rounds.
            for _ in range(50):
                members = cgroup.members()
                if not members:
                    break
                for pid in members:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                        hit = True
        return hit

    def _kill_tree(self) -> bool:
        """Windows: terminate the job; without one, ``taskkill /T /F`` walks the tree."""
        if self.job is not None and self.job.terminate():
            return True
        alive = pid_alive(self.pid)
        if alive and shutil.which("taskkill"):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(["taskkill", "/T", "/F", "/PID", str(self.pid)],
                               stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL,
                               timeout=KILL_WAIT, check=False)
        return _call(self._handle.kill) or alive

    def release(self) -> bool:
        """Forget the group and try once to remove its cgroup (after the leader was
        reaped); False when the cgroup is still busy (killed members leave it a moment
        later: the stop ladders retry, and a later dsh sweeps what a dead one left).
        A Windows job is closed here (what is left in it dies with it)."""
        with _live_lock:
            _live.pop(id(self), None)
        if self.job is not None:
            self.job.close()
        return self.cgroup is None or self.cgroup.remove()


class Child(Group):
    """A child started by :func:`spawn`; ``popen`` is its :class:`subprocess.Popen`."""

    def __init__(self, popen: subprocess.Popen[Any], cgroup: Cgroup | None,
                 job: Any = None) -> None:
        super().__init__(popen.pid, popen, cgroup, job)
        self.popen = popen
        self.stdin, self.stdout, self.stderr = popen.stdin, popen.stdout, popen.stderr

    @property
    def returncode(self) -> int | None:
        """The exit status once the leader exited (negative: killed by that signal)."""
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, or None when the leader is still running after ``timeout``."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = TERM_GRACE) -> int | None:
        """Terminate the group, kill it after ``grace`` (at once when 0), reap, release."""
        if grace > 0 and self.returncode is None and self.terminate():
            self.wait(grace)
        self.kill()
        code = self.wait(KILL_WAIT)
        for _ in range(_RELEASE_TRIES):
            if self.release():
                break
            time.sleep(_POLL)
        return code


class AsyncChild(Group):
    """A child started by :func:`spawn_async`; ``process`` is its asyncio Process."""

    def __init__(self, process: asyncio.subprocess.Process, cgroup: Cgroup | None,
                 job: Any = None) -> None:
        super().__init__(process.pid, process, cgroup, job)
        self.process = process
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr

    @property
    def returncode(self) -> int | None:
        """The exit status as soon as the leader exited (its pipes may still be open)."""
        return self.process.returncode

    async def exited(self, timeout: float | None = None) -> bool:
        """Whether the leader exits within ``timeout`` seconds (None: wait for it)."""
        import asyncio

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.process.returncode is None:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL)
        return True

    async def stop(self, grace: float = TERM_GRACE) -> int | None:
        """Terminate the group, kill it after ``grace`` (at once when 0), reap, release.

        Bounded, and runs to its end even when the awaiting task is being cancelled.
        """
        import asyncio

        task = asyncio.ensure_future(self._stop(grace))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await task
            raise

    async def _stop(self, grace: float) -> int | None:
        import asyncio

        if grace > 0 and self.returncode is None and self.terminate():
            await self.exited(grace)
        self.kill()
        await self.exited(KILL_WAIT)
        for _ in range(_RELEASE_TRIES):  # never blocking the loop while members leave
            if self.release():
                break
            await asyncio.sleep(_POLL)
        return self.returncode


def _signal_group(pid: int, signum: int) -> bool:
    """``signum`` to the group ``pid`` leads (POSIX only); False when nothing of it is left.

    PermissionError counts as gone: a group of zombies answers it on macOS, and a pid that
    became someone else's is not ours to signal.
    """
    if not _POSIX:
        return False
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _adopt(pid: int, kill: Callable[[], None]) -> Any:
    """Windows: the job object of the just-started (suspended) ``pid``, which then runs;
    None elsewhere, or when no job can be made. A child that cannot be resumed is killed
    (``kill``) and the OSError raised: it would otherwise wait forever."""
    if not _WINDOWS:
        return None
    from dsh.core.winjob import adopt

    try:
        return adopt(pid)
    except OSError:
        with contextlib.suppress(OSError):
            kill()
        raise


def _call(action: Callable[[], None]) -> bool:
    try:
        action()
    except (ProcessLookupError, OSError):
        return False
    return True


# -- processes in general ------------------------------------------------------------------


_guard = "off"
"""``off``, ``asked`` (by :func:`protect_parent`, applied at the next start) or ``on``."""


def protect_parent() -> None:
    """Keep this process's own environment and memory from its children (the runtime).

    A child running as the same user can read its parent's ``/proc/PID/environ`` (the
    launch environment, API keys included) and ptrace it, whatever environment the child
    itself was given; the sandbox's pid namespace hides the parent, an unsandboxed command
    or an MCP server does not. So the runtime makes itself non-dumpable (Linux
    ``PR_SET_DUMPABLE`` 0): its ``/proc`` files become root's, and same-user processes can
    neither read them nor attach. Applied just before the first child starts (loading
    ``ctypes`` would cost every boot about 2 ms, one that starts no child too); root's
    children can still read it. No core dumps of the runtime follow either. Not for the
    SDK: it would change the embedding program.
    """
    global _guard
    if _LINUX and _guard == "off":
        _guard = "asked"


def _hide_from_children() -> None:
    global _guard
    _guard = "on"
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


_PR_SET_DUMPABLE = 4


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a reused pid reads as alive: the safe mistake)."""
    if pid <= 0:
        return False
    if _WINDOWS:  # os.kill(pid, 0) would send CTRL_C_EVENT there
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)  # QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        kernel32.CloseHandle(handle)
        return code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_children() -> None:
    """Kill every child still alive, with its group: the last line of a forced exit.

    Children started here and not yet released (Windows: their jobs), and (Linux) any
    other direct child found in ``/proc`` (a plugin that started one its own way).
    """
    with _live_lock:
        groups = list(_live.values())
    for group in groups:
        group.kill()
    if not _POSIX:
        return
    for pid in _direct_children():
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def _direct_children() -> list[int]:
    """Direct children of this process (Linux ``/proc``; elsewhere none are found)."""
    pids: list[int] = []
    if not _LINUX:
        return pids
    task_dir = f"/proc/{os.getpid()}/task"
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return pids


# -- limits --------------------------------------------------------------------------------


class Enforcement(NamedTuple):
    """How :class:`~dsh.core.limits.Limits` are enforced here, for ``dsh doctor``."""

    how: str
    """``cgroup v2``, ``cgroup v1``, ``systemd scope``, ``rlimits`` or ``none``."""
    detail: str


_sites: dict[tuple[bool, bool], Site | None] = {}
_sites_lock = threading.Lock()


def enforcement(limits: Limits) -> Enforcement:
    """Which mechanism bounds a command under ``limits`` here, and with what values."""
    site = _site(limits)
    values = limits.describe()
    if site is not None:
        rest = limits.rlimits(cgroup_memory="memory" in site.controllers,
                              cgroup_pids="pids" in site.controllers)
        extra = f", rlimits for {', '.join(sorted(rest))}" if rest else ""
        how = "systemd scope" if site.kind == "systemd" else f"cgroup {site.kind}"
        return Enforcement(how, f"{values}: {site.describe()}{extra}")
    rest = limits.rlimits(cgroup_memory=False, cgroup_pids=False)
    if not rest:
        return Enforcement("none", f"{values}: nothing to enforce")
    from dsh.core.limits import rlimits_available

    if not _LINUX:
        return Enforcement("none", f"{values}: resource limits need Linux (cgroups, "
                                   f"util-linux prlimit); on {sys.platform} nothing bounds "
                                   "commands")
    if not _POSIX or not rlimits_available():
        return Enforcement("none", f"{values}: no cgroup can be made here and prlimit "
                                   "(util-linux) was not found, so nothing bounds commands")
    why = "cgroups off in config" if not limits.cgroup else "no cgroup can be made here"
    return Enforcement("rlimits", f"{values}: {why}; rlimits for {', '.join(sorted(rest))}"
                                  " (per process)")


def _site(limits: Limits) -> Site | None:
    """The first cgroup site whose trial run works (tried once per process and kind of
    need); None when there is none."""
    key = (bool(limits.processes), bool(limits.memory_bytes()))
    if not limits.cgroup or not any(key):
        return None
    with _sites_lock:
        if key not in _sites:
            _sites[key] = next((s for s in sites(limits) if _trial(s, limits)), None)
        return _sites[key]


def _trial(site: Site, limits: Limits) -> bool:
    """Run ``true`` inside a fresh cgroup of ``site``: joining needs permissions that only
    trying shows (a delegated v2 subtree, a user systemd that answers)."""
    try:
        planned = plan(limits._replace(file_size_mb=0, cpu_seconds=0), site)
    except OSError:
        return False
    try:
        proc = subprocess.run([*planned.prefix, "true"], stdin=DEVNULL, capture_output=True,
                              timeout=10, check=False, start_new_session=True)
        return proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        if planned.cgroup is not None:
            planned.cgroup.remove()


# -- helpers -------------------------------------------------------------------------------


def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if env is None else dict(env)


def _resolve(program: str, env: Mapping[str, str] | None) -> str:
    """``program`` as exec would find it, or the OSError exec would give.

    A script whose ``#!`` interpreter is missing fails exec with ENOENT although the file
    exists; that is checked too, so callers can still tell the two apart.
    """
    path_var = (env if env is not None else os.environ).get("PATH", os.defpath)
    if os.sep not in program and not (os.altsep and os.altsep in program):
        found = shutil.which(program, path=path_var)
        if found is None:
            raise FileNotFoundError(2, "No such file or directory", program)
        program = found
    if not os.path.exists(program):
        raise FileNotFoundError(2, "No such file or directory", program)
    if os.path.isdir(program) or not os.access(program, os.X_OK):
        raise PermissionError(13, "Permission denied", program)
    try:
        with open(program, "rb") as f:
            head = f.read(256)
    except OSError:
        return program
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].split()
        interpreter = os.fsdecode(words[0]) if words else ""
        if interpreter and not os.path.exists(interpreter):
            raise FileNotFoundError(2, "No such file or directory", program)
    return program
