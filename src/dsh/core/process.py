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
* **Contained** in a runtime (:func:`contain`, :mod:`dsh.core.containers`): a cgroup of
  its own (its limits' cgroup when it has one), else found by its marker as the runtime's
  orphans' subreaper, so nothing it starts outlives its stop.
* **Confined** where the sandbox's Landlock rung asks (``confine``,
  :mod:`dsh.core.confinement`): the one ``preexec_fn`` of process control, built in the
  parent. The child is placed first (it joins its cgroups), then confined, then
  execs; a start that fails undoes both.
* **Stopped one way**: :meth:`Group.terminate` (SIGTERM to the group), a grace period,
  :meth:`Group.kill` (SIGKILL to the group and to everything left in its cgroup), reaped,
  then :meth:`Group.release` removes the cgroup.
* **A Python child never imports from its working directory** (:func:`python_command`):
  a ``json.py`` planted in a workspace must not run, unsandboxed, in the next sub-agent.

::

    argv ─► prepare (resolve, wrappers, cgroups, confinement)
                │
                ▼
    spawn / spawn_async / spawn_protocol ─► Group(pid, cgroup, placed)
                                                 │
        terminate() ─ grace ─► kill() ─► reaped ─► hunt() ─► release()

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
import itertools
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

from dsh.core import containers
from dsh.core.containers import Container
from dsh.core.limits import Cgroup, Limits, Site, join_prefix, plan, sites

if TYPE_CHECKING:
    # Only the async flavour needs asyncio, and imports it itself: the SDK spawns its
    # runtime with spawn() before an event loop exists (dsh.sdk._launch.HeadStart).
    import asyncio

    from dsh.core.confinement import Confinement, PreExec

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
    env: dict[str, str] | None
    placed: _Placed | None = None
    confined: PreExec | None = None

    def started(self) -> None:
        """The child exists (or failed to): the parent's copies of its ruleset and of its
        cgroups' ``cgroup.procs`` go."""
        if self.confined is not None:
            self.confined.close()

    def undo(self) -> None:
        """The child did not start: remove what was made for it (its confinement, its
        limits' cgroup, its container)."""
        self.started()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.placed is not None:
            self.placed.undo()


def _prepare(argv: Sequence[str], *, env: Mapping[str, str] | None, tie: str | None,
             limits: Limits | None, confine: Confinement | None = None) -> _Prepared:
    """The final argv (wrappers first), Popen options, environment, the cgroups made for
    it (its limits' and, in a runtime, its container: :func:`contain`) and, for a command
    to ``confine``, the step its child runs before ``exec``: join those cgroups, then
    confine itself (:func:`_pre_exec`).

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
    site = _site(limits) if limits is not None and _POSIX else None
    placed = _place(site)
    env = _env(env) if placed is None else placed.environment(env)
    join = placed.join if placed is not None else ()
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
    confined: PreExec | None = None
    try:
        if limits is not None and _POSIX:
            planned = plan(limits, site, join=join, wrapper=confine is None,
                           name=placed.name if placed is not None else None)
            prefix += planned.prefix
            cgroup = planned.cgroup
        elif confine is None:
            prefix += join_prefix(join)
        if placed is not None:
            placed.adopt(cgroup)
        if prefix:
            command[0] = _resolve(command[0], env)
        if confine is not None:
            confined = _pre_exec(confine, (*(cgroup.dirs if cgroup is not None else ()),
                                           *join))
    except BaseException:
        _Prepared([], options, cgroup, env, placed, confined).undo()
        raise
    if confined is not None:
        options["preexec_fn"] = confined
    return _Prepared([*prefix, *command], options, cgroup, env, placed, confined)


def spawn(argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
          stdin: Stream = DEVNULL, stdout: Stream = PIPE, stderr: Stream = PIPE,
          tie: str | None = TIE_KILL, limits: Limits | None = None,
          text: bool = False, confine: Confinement | None = None) -> Child:
    """Start ``argv`` (blocking flavour); OSError when it cannot be started.

    ``confine`` (the sandbox's Landlock rung) is applied in the child before ``exec``
    (:func:`_pre_exec`)."""
    prepared = _prepare(argv, env=env, tie=tie, limits=limits, confine=confine)
    try:
        popen = subprocess.Popen(prepared.argv, cwd=cwd, env=prepared.env, stdin=stdin,
                                 stdout=stdout, stderr=stderr, text=text, **prepared.options)
    except BaseException as exc:
        prepared.undo()
        if (refused := _refused(exc, prepared)) is not None:
            raise refused from exc
        raise
    prepared.started()
    return Child(popen, prepared.cgroup, _adopt(popen.pid, popen.kill), prepared.placed)


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
        *prepared.argv, cwd=cwd, env=prepared.env, stdin=stdin, stdout=stdout, stderr=stderr,
        limit=limit, pass_fds=tuple(pass_fds), **prepared.options))
    starting.add_done_callback(lambda _: prepared.started())
    try:
        process = await asyncio.shield(starting)
    except asyncio.CancelledError:
        try:
            started = await starting
        except Exception:
            prepared.undo()
        else:
            with contextlib.suppress(Exception):
                await AsyncChild(started, prepared.cgroup, _adopt(started.pid, started.kill),
                                 prepared.placed).stop(0)
        raise
    except BaseException as exc:
        prepared.undo()
        if (refused := _refused(exc, prepared)) is not None:
            raise refused from exc
        raise
    return AsyncChild(process, prepared.cgroup, _adopt(process.pid, process.kill),
                      prepared.placed)


async def spawn_protocol(factory: Callable[[], asyncio.SubprocessProtocol],
                         argv: Sequence[str], *, cwd: str | None = None,
                         env: Mapping[str, str] | None = None,
                         tie: str | None = TIE_TERM) -> Group:
    """Start ``argv`` with three pipes driven by the protocol ``factory`` makes (the SDK's
    frame reader); returns the group handle. OSError when it cannot be started."""
    import asyncio

    prepared = _prepare(argv, env=env, tie=tie, limits=None)
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await loop.subprocess_exec(
            factory, *prepared.argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, cwd=cwd,
            env=prepared.env, **prepared.options)
    except BaseException:
        prepared.undo()
        raise
    return Group(transport.get_pid(), transport, None, _adopt(transport.get_pid(),
                                                              transport.kill),
                 prepared.placed)


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


def _pre_exec(confine: Confinement, join: tuple[str, ...]) -> PreExec:
    """The confinement, built now in the parent, for ``preexec_fn`` in the child.

    :mod:`dsh.core.confinement` says why this one step runs between fork and exec (and
    why that is safe with threads: nothing in it takes a lock or imports). The child
    first joins the cgroups in ``join`` (its limits' cgroup and its container), and only
    then confines itself: the order is place, confine, exec, so the command starts
    inside its container and with no ``cgroup.procs`` writable to it (no wrapper joins
    for it after the confinement, and none needs a Landlock rule to do so).
    """
    from dsh.core.confinement import prepare

    return prepare(confine, join=join)


def _refused(exc: BaseException, prepared: _Prepared) -> OSError | None:
    """A confined child that refused its confinement (its ``preexec_fn`` raised, which
    ``subprocess`` reports as a bare SubprocessError) as an OSError naming the sandbox,
    like any other failed start; None for every other failure."""
    if prepared.confined is None or not isinstance(exc, subprocess.SubprocessError):
        return None
    import errno

    return PermissionError(errno.EPERM, "the sandbox could not confine the command "
                                        "(joining its cgroup, Landlock or seccomp failed "
                                        "in the child)")


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
                 job: Any = None, placed: _Placed | None = None) -> None:
        self.pid = pid
        self.cgroup = cgroup
        self.job = job
        self.placed = placed
        self._handle = handle
        with _live_lock:
            _live[id(self)] = self
        if placed is not None:
            placed.started(pid)

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
        if self.placed is not None and self.placed.container is not None:
            hit = _empty(self.placed.container) or hit
        return hit

    def hunt(self) -> bool:
        """Kill what this child started that left its group and its container's reach
        (in a runtime without a cgroup for it: :func:`contain`); False when none was found.

        Slower than :meth:`kill` (it reads ``/proc``), so the stop ladders run it last,
        the async one off the event loop."""
        placed = self.placed
        if placed is None or placed.container is not None:
            return False
        return _hunt(placed.word, self.pid, placed.start)

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
        done = self.cgroup is None or self.cgroup.remove()
        if self.placed is not None:
            done = self.placed.ended() and done
        return done


class Child(Group):
    """A child started by :func:`spawn`; ``popen`` is its :class:`subprocess.Popen`."""

    def __init__(self, popen: subprocess.Popen[Any], cgroup: Cgroup | None,
                 job: Any = None, placed: _Placed | None = None) -> None:
        super().__init__(popen.pid, popen, cgroup, job, placed)
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
        self.hunt()
        for _ in range(_RELEASE_TRIES):
            if self.release():
                break
            time.sleep(_POLL)
        return code


class AsyncChild(Group):
    """A child started by :func:`spawn_async`; ``process`` is its asyncio Process."""

    def __init__(self, process: asyncio.subprocess.Process, cgroup: Cgroup | None,
                 job: Any = None, placed: _Placed | None = None) -> None:
        super().__init__(process.pid, process, cgroup, job, placed)
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
        if self.placed is not None and self.placed.container is None:
            await asyncio.to_thread(self.hunt)
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
    other direct child found in ``/proc`` (a plugin that started one its own way); in a
    runtime that contains its children (:func:`contain`), every process below it, its
    containers are removed and its record with them.
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
    _end_everything()


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


# -- containment (dsh.core.containers) ------------------------------------------------------


_HUNT_ROUNDS = 20
"""How often a sweep looks again (every :data:`_POLL` s): what it killed may have forked
before it died, and takes a moment to exit."""
_EMPTY_ROUNDS = 50
"""How often a container without ``cgroup.kill`` is read and its members killed."""
_PR_SET_CHILD_SUBREAPER = 36
_RECORD_DELAY = 0.05
"""Seconds a record waits for more children before it is written (its folders: none)."""
CONTAINMENT_ENV = "DSH_CONTAINMENT"
"""Which containment a runtime uses (:data:`dsh.core.containers.PREFER`; default ``auto``)."""
_UNSET: Any = object()


class _Containment:
    """A runtime's containment, from :func:`contain` to the end of the process."""

    def __init__(self, home: str | os.PathLike[str], prefer: str) -> None:
        self.me = containers.identity()
        self.record = containers.record_path(home, self.me)
        self.prefer = prefer
        self.inherited = os.environ.get(containers.MARKER, "")
        self.session = os.getsid(0)  # platform: only contain() makes one, on Linux
        self.lock = threading.Lock()
        self.numbers = itertools.count(1)
        self.children: dict[int, int] = {}
        """``pid -> start time`` of each child started and not yet released."""
        self.boxes: dict[str, Container] = {}
        """The containers of those children, by folder."""
        self.parents: set[str] = set()
        self.spawning = 0
        self.armed = False
        self._site: Any = _UNSET
        self._written: containers.Record | None = None
        self._kept = False
        """Whether the record is on disk (a first child after none writes it at once)."""
        self._flush: threading.Timer | None = None

    def arm(self) -> None:
        """Become the subreaper of whatever this runtime starts (once, before its first
        child: ``ctypes`` costs a boot that starts none about 2 ms)."""
        if self.armed:
            return
        self.armed = True
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def site(self) -> containers.Site | None:
        """Where this runtime's containers go: the first site whose trial join works
        (tried once), after ending what dead runtimes left in it; None: no cgroup."""
        with self.lock:
            if self._site is not _UNSET:
                return self._site  # type: ignore[no-any-return]
            self._site = None
            for site in containers.sites(self.prefer):
                if _trial_join(site, self.me):
                    self._site = site
                    break
            found = self._site
        if found is not None:
            for box in containers.abandoned(found):
                _empty(box)
                box.remove()
        return found  # type: ignore[no-any-return]

    def started(self, placed: _Placed, pid: int) -> None:
        start = containers.start_time(pid) or 0
        with self.lock:
            self.spawning -= 1
            self.children[pid] = start
            box = placed.container
            if box is not None:
                self.boxes[box.folder] = box
            self.parents.update(os.path.dirname(folder) for folder in placed.folders)
            self._save()
        placed.pid, placed.start = pid, start

    def ended(self, placed: _Placed) -> bool:
        box = placed.container
        gone = box is None or box.remove()
        with self.lock:
            self.children.pop(placed.pid, None)
            if gone and box is not None:
                self.boxes.pop(box.folder, None)
            self._save()
        return gone

    def undo(self, placed: _Placed) -> None:
        if placed.container is not None:
            placed.container.remove()
        with self.lock:
            self.spawning -= 1

    def close(self) -> None:
        """At the end: remove the containers that are empty now, and the record when
        nothing is left for a later start to sweep."""
        for _ in range(_RELEASE_TRIES):
            with self.lock:
                boxes = list(self.boxes.values())
            if not boxes:
                break
            for box in boxes:
                if box.remove():
                    with self.lock:
                        self.boxes.pop(box.folder, None)
            time.sleep(_POLL)
        with self.lock:
            self.children = {pid: start for pid, start in self.children.items()
                             if containers.alive(pid, start)}
            if self._flush is not None:
                self._flush.cancel()
            self._save(now=True)

    def _save(self, *, now: bool = False) -> None:
        """The record as things stand (under the lock): written at once when its folders
        changed (or ``now``), else a moment later, off the start's path, so a burst of
        children costs one write; removed when nothing is left running."""
        record = containers.Record(self.me, tuple(sorted(self.parents)),
                                   tuple(sorted(self.children.items())))
        if record == self._written:
            return
        written = self._written
        if now or written is None or not self._kept or record.parents != written.parents:
            self._write(record)
        elif self._flush is None:
            self._flush = threading.Timer(_RECORD_DELAY, self._later)
            self._flush.daemon = True
            self._flush.start()

    def _later(self) -> None:
        with self.lock:
            self._flush = None
            self._save(now=True)

    def _write(self, record: containers.Record) -> None:
        with contextlib.suppress(OSError):
            self._kept = bool(self.boxes or record.children)
            if self._kept:
                containers.write_record(self.record, record)
            else:
                self.record.unlink(missing_ok=True)
            self._written = record


class _Placed:
    """Where one child of a contained runtime lives: its container (None where no cgroup
    can be made for it), its marker word and its number (the names of its cgroups);
    ``join`` are the folders it joins besides its limits' cgroup, ``folders`` all its
    cgroups."""

    __slots__ = ("container", "folders", "number", "pid", "start", "state")

    def __init__(self, state: _Containment, container: Container | None, number: int) -> None:
        self.state = state
        self.container = container
        self.number = number
        self.folders: tuple[str, ...] = (container.folder,) if container is not None else ()
        self.pid = 0
        self.start = 0

    @property
    def word(self) -> str:
        return f"{self.state.me.token}/{self.number}"

    @property
    def name(self) -> str:
        return containers.name(self.state.me, self.number)

    @property
    def join(self) -> tuple[str, ...]:
        return (self.container.folder,) if self.container is not None else ()

    def environment(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """The child's environment: ``env`` (None: this process's) with its marker."""
        found = dict(os.environ if env is None else env)
        found[containers.MARKER] = containers.marker_value(self.state.inherited, self.word)
        return found

    def adopt(self, cgroup: Cgroup | None) -> None:
        """A cgroup made for the child's limits is its container too: it holds whatever
        the child starts, as a container does (v1: its first hierarchy's folder)."""
        if cgroup is None or not cgroup.dirs:
            return
        self.folders = (*self.folders, *cgroup.dirs)
        if self.container is None:
            self.container = Container(cgroup.kind, cgroup.dirs[0])

    def started(self, pid: int) -> None:
        self.state.started(self, pid)

    def ended(self) -> bool:
        return self.state.ended(self)

    def undo(self) -> None:
        self.state.undo(self)


_contained: _Containment | None = None


def contain(home: str | os.PathLike[str]) -> int:
    """Make this process (a runtime) contain every child it starts from now on, so that
    nothing it started outlives it (:mod:`dsh.core.containers`): a container for each
    (a cgroup where one can be made), its marker in each one's environment, this process
    its children's subreaper, and a record in ``home`` that a later start reads. First
    ends what runtimes of ``home`` that died left running; returns how many processes.

    ``DSH_CONTAINMENT`` (``auto``, ``cgroup-v2``, ``cgroup-v1``, ``subreaper``) narrows
    the choice; a value that cannot be used here falls to the subreaper. Linux only
    (elsewhere a child has its process group, and on Windows its job object).
    """
    global _contained
    prefer = _preference()
    ended = sweep(home)
    if _LINUX and _POSIX:
        _contained = _Containment(home, prefer)
    return ended


def _preference() -> str:
    """``DSH_CONTAINMENT``, checked (a ConfigError naming it when it is no known value)."""
    prefer = os.environ.get(CONTAINMENT_ENV, "").strip() or "auto"
    if prefer not in containers.PREFER:
        from dsh.core.errors import ConfigError

        raise ConfigError(f"{CONTAINMENT_ENV}: expected one of "
                          f"{', '.join(containers.PREFER)}")
    return prefer


def containment() -> str:
    """How this process's children are contained, in a sentence (``dsh doctor``; the
    mechanism a runtime with the same environment would use here, tried as it would be).
    ConfigError for a ``DSH_CONTAINMENT`` that is no known value."""
    if _WINDOWS:
        return ("Windows job objects: each child in a kill-on-close job of its own, so "
                "whatever it starts ends with it and with dsh")
    if not _LINUX or not _POSIX:
        return ("process groups only: a process that leaves its group (setsid) outlives "
                "its command, and every child outlives a SIGKILLed dsh")
    prefer = _preference()
    state = _contained or _Containment(os.devnull, prefer)
    site = state.site()
    if site is not None:
        return f"{site.describe()}; the runtime is their subreaper"
    why = {"auto": "no cgroup can be made here", "subreaper": f"{CONTAINMENT_ENV}=subreaper"
           }.get(prefer, f"{CONTAINMENT_ENV}={prefer}, and none can be made here")
    return (f"the runtime as child subreaper ({why}): what a command starts is found "
            "through the process tree and its DSH_CONTAINER marker; a process that both "
            "leaves its parent and clears its environment is ended only with the runtime, "
            "and survives a SIGKILLed one")


def _place(limits_site: Site | None) -> _Placed | None:
    """The container and marker of a child about to start (None: not in a runtime)."""
    state = _contained
    if state is None:
        return None
    state.arm()
    number = next(state.numbers)
    site = state.site()
    container = None
    # A cgroup made for the child's limits is its container too (joining one more would
    # cost another migration, a few milliseconds each), and a systemd scope moves its
    # command out of any cgroup it joined first: the subreaper's means contain that one.
    if site is not None and limits_site is None:
        with contextlib.suppress(OSError):
            container = containers.make(site, state.me, number)
    with state.lock:
        state.spawning += 1
    return _Placed(state, container, number)


def _trial_join(site: containers.Site, me: containers.Identity) -> bool:
    """Run ``true`` inside a fresh container at ``site``: whether a child may join one
    there depends on delegation rules that only trying shows."""
    try:
        box = containers.make(site, me, 0)
    except OSError:
        return False
    try:
        proc = subprocess.run([*join_prefix((box.folder,)), "true"], stdin=DEVNULL,
                              capture_output=True, timeout=10, check=False,
                              start_new_session=True)
        return proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        for _ in range(_RELEASE_TRIES):
            if box.remove():
                break
            time.sleep(_POLL)


def _empty(box: Container) -> bool:
    """Kill everything in ``box`` (and beneath it); False when it held nothing."""
    members = box.members()
    if box.kill_switch():
        return bool(members)
    hit = False
    for _ in range(_EMPTY_ROUNDS):
        frozen = box.freeze(True)  # nothing forks while the members are read and killed
        members = box.members()
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # platform: containers exist on Linux only
                hit = True
        if frozen:
            box.freeze(False)  # a frozen v1 task dies of its SIGKILL once thawed
        if not members:
            break
    return hit


def _hunt(word: str, leader: int, start: int) -> bool:
    """Kill, in rounds until none is left (at most :data:`KILL_WAIT` seconds), every
    process below this one that carries ``word`` or descends from one that does or from
    the ``leader`` while it runs (the subreaper's way to empty a child's container);
    False when none was found."""
    me = os.getpid()
    hit = False
    deadline = time.monotonic() + KILL_WAIT
    while True:
        marked = [pid for pid in containers.descendants([me]) if word in
                  containers.markers(pid)]
        roots = [*marked, leader] if containers.alive(leader, start) else marked
        victims = set(roots) | set(containers.descendants(roots))
        found = {pid: containers.stat(pid) for pid in victims}
        targets = {pid: s.start for pid, s in found.items() if s is not None
                   and s.state != "Z"}
        if not targets or time.monotonic() > deadline:
            break
        for pid, began in targets.items():
            hit = _kill_exact(pid, began) or hit
        reap_orphans()
        time.sleep(_POLL)  # a killed process takes a moment to exit; then look again
    return hit


def _kill_exact(pid: int, start: int) -> bool:
    """SIGKILL to the process that started at ``start`` as ``pid``, never to a process
    that reused the pid: through a pidfd where the kernel has them (the start time read
    after it was opened proves which process it holds), else checked just before."""
    if not _LINUX:
        return False
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return False
        try:
            if containers.start_time(pid) != start:
                return False
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
    if containers.start_time(pid) != start:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def sweep(home: str | os.PathLike[str]) -> int:
    """End what runtimes of ``home`` that died (SIGKILL, a crash) left running: their
    containers emptied and removed, every process carrying their marker, every recorded
    child still running as itself; their records removed. Returns how many processes
    were ended. Linux only (elsewhere nothing is recorded)."""
    if not _LINUX:
        return 0
    ended = 0
    spared = containers.ancestors(os.getpid())
    for path, record in containers.dead_records(home):
        if record is not None:
            ended += _sweep_record(record, spared)
        with contextlib.suppress(OSError):
            path.unlink()
    return ended


def _sweep_record(record: containers.Record, spared: set[int]) -> int:
    ended: set[int] = set()
    boxes = record.containers()
    for box in boxes:
        ended.update(box.members())
        _empty(box)
    for _ in range(_HUNT_ROUNDS):
        found = containers.leftovers(record, spared)
        if not found:
            break
        for pid, start in found.items():
            if _kill_exact(pid, start):
                ended.add(pid)
        time.sleep(_POLL)  # a killed process takes a moment to exit; then look again
    for box in boxes:
        for _ in range(_RELEASE_TRIES):
            if box.remove():
                break
            time.sleep(_POLL)
    return len(ended)


def reap_orphans() -> int:
    """Reap the zombies this runtime inherited as subreaper; returns how many.

    Only orphans, never a child something else waits for (asyncio's child watcher, a
    ``Popen``): a zombie is reaped when it is not a child started here and not yet
    released, is in another session than this process (every child started here starts
    a session of its own, so its descendants are; a plugin's own child is in this one),
    and, while a start is under way, not a session leader (that may be the new child,
    not yet known by its pid). Without :func:`contain`, nothing.
    """
    state = _contained
    if state is None or not _LINUX:
        return 0
    reaped = 0
    for pid in containers.children(os.getpid()):
        found = containers.stat(pid)
        if found is None or found.state != "Z" or found.session == state.session:
            continue
        with state.lock:
            if state.children.get(pid) == found.start or (found.session == pid
                                                          and state.spawning):
                continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)  # platform: _LINUX checked above
        except ChildProcessError:
            continue
        reaped += done == pid
    return reaped


def watch_orphans(loop: asyncio.AbstractEventLoop) -> Callable[[], None] | None:
    """Reap inherited orphans on ``loop`` whenever a child exits (SIGCHLD, at most one
    pass queued at a time, so a storm of exits costs a pass per loop turn); returns the
    function that stops it, or None when nothing needs reaping here."""
    if _contained is None or not _LINUX or not hasattr(signal, "SIGCHLD"):
        return None
    queued = False

    def run() -> None:
        nonlocal queued
        queued = False
        reap_orphans()

    def on_signal() -> None:
        nonlocal queued
        if not queued:
            queued = True
            loop.call_soon(run)

    def stop() -> None:
        loop.remove_signal_handler(signal.SIGCHLD)

    loop.add_signal_handler(signal.SIGCHLD, on_signal)
    return stop


def _end_everything() -> None:
    """Kill every process below this one, in rounds, then tidy the containers and the
    record (the last line of a contained runtime's exit)."""
    state = _contained
    if state is None or not _LINUX:
        return
    me = os.getpid()
    for _ in range(_HUNT_ROUNDS):
        found = {pid: containers.stat(pid) for pid in containers.descendants([me])}
        targets = {pid: s.start for pid, s in found.items() if s is not None
                   and s.state != "Z"}
        if not targets:
            break
        for pid, start in targets.items():
            _kill_exact(pid, start)
        reap_orphans()
        time.sleep(_POLL)
    with state.lock:
        boxes = list(state.boxes.values())
    for box in boxes:
        _empty(box)
    state.close()


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
