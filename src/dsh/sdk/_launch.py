"""The launch contract: the exact argv, environment and cwd a runtime is spawned with.

``<runtime> --profile P --patch ABS ...`` with the home passed as ``DSH_HOME`` and
``DSH_SERVE=sdk`` (:data:`SERVE_ENV`: serve the protocol; a chat profile never opens its
terminal chat when an SDK client spawned it). Every path
the caller gave relative (patches, home, cwd) is made absolute against the caller's own
working directory here, before spawn, because the runtime runs in another directory and
would otherwise resolve them against the wrong one. Everything that can be checked
without a process is checked here, so a missing patch file or an unusable home fails
at stage ``configured`` with its path, not as a runtime crash with a stderr to decode.

The runtime must end with the program that started it. A runtime the client located
itself (the python carrier of this install, or the ``dsh-runtime-bin`` wheel of this
version) watches this process on its own (``DSH_PARENT_PID``, see
``dsh.runtime.kernel.parentwatch``); any other executable is tied to it by the kernel's
parent-death signal on Linux (``tie`` of :func:`dsh.core.process.spawn`) and, everywhere, ends
at stdin EOF.

:class:`HeadStart` is the part of a start that needs no event loop: the runtime found, its
launch checked and, on POSIX, the process spawned. A blocking client spawns before it
makes its loop thread and loop, so the runtime boots meanwhile: on the caller's own thread
when the runtime watches this process (nothing ties it to a thread), else on the loop
thread, which lives as long as the client as the kernel's tie needs.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dsh._version import __version__
from dsh.core.errors import ConfigError, DshError, SpawnError
from dsh.core.home import ensure_dir
from dsh.core.process import KILL_WAIT, PIPE, TIE_TERM, Child, spawn
from dsh.sdk._config import ClientConfig
from dsh.sdk._locate import WHEEL_MODULE, RuntimeInfo, locate

PARENT_ENV = "DSH_PARENT_PID"
SERVE_ENV = "DSH_SERVE"
"""Set to ``sdk`` for every runtime spawned: serve the profile's protocol on stdio and never
open the terminal chat, even for a chat profile, whose ``dsh NAME`` on a terminal opens
the chat (which spawns that same profile this way). The launcher reads it as
:data:`dsh.cli.main.SERVE_ENV` and takes it out of its environment at once."""

SPAWNS_FIRST = os.name == "posix"
"""Whether the runtime is spawned before an event loop owns its pipes. A POSIX selector
loop adopts the pipes of a process already running (:mod:`._transport`); Windows'
proactor loop reads only the overlapped pipes it creates itself, so there asyncio spawns
the runtime, once the loop runs."""


@dataclass(frozen=True)
class LaunchSpec:
    """One runtime process to spawn: ``argv``, full ``env``, absolute ``cwd`` and home.

    ``watches_parent``: the runtime ends itself when this process exits (it was told so
    in ``DSH_PARENT_PID``), so the spawn needs no parent-death signal from the kernel.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    home: str
    watches_parent: bool = False

    @property
    def tie(self) -> str | None:
        """The parent-death signal the kernel sends it (``tie`` of
        :func:`dsh.core.process.spawn`): none when it watches this process itself. A tied
        runtime is tied to its spawning *thread*, so that thread must live as long as the
        client."""
        return None if self.watches_parent else TIE_TERM


def child_environment(config: ClientConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The runtime's environment: the caller's (unless ``config.inherit_env`` is off),
    with ``config.env`` on top, and ``config.trace_context`` as ``TRACEPARENT`` and
    ``TRACESTATE``."""
    env = dict(environ) if config.inherit_env else {}
    if config.env is not None:
        env.update(config.env)
    if config.trace_context:
        env.pop("TRACESTATE", None)  # a state belongs to its parent, never to another
        env.update({key.upper(): value for key, value in config.trace_context.items()})
    return env


def launch_spec(config: ClientConfig, runtime: RuntimeInfo, env: dict[str, str]) -> LaunchSpec:
    """Resolve and check every path of ``config``; ``env`` gains the absolute ``DSH_HOME``.

    Raises :class:`ConfigError` naming the path for: no home given, a home that cannot be
    created, a working directory that is not one, a patch file that does not exist.
    """
    env["DSH_HOME"] = _home(config, env)
    env[SERVE_ENV] = "sdk"
    cwd = _absolute(config.cwd) if config.cwd is not None else os.getcwd()
    if not os.path.isdir(cwd):
        raise ConfigError(f"cwd {cwd}: not an existing directory")
    argv = [*runtime.command, "--profile", config.profile]
    for patch in config.patches:
        path = _absolute(patch)
        if not os.path.isfile(path):
            given = os.fspath(patch)
            origin = "" if given == path else f" (given as {given!r})"
            raise ConfigError(f"patch file {path}{origin}: no such file")
        argv += ["--patch", path]
    watches = watches_parent(runtime)
    if watches:
        env[PARENT_ENV] = str(os.getpid())
    else:  # inherited from a runtime above this program: not about this child
        env.pop(PARENT_ENV, None)
    return LaunchSpec(tuple(argv), env, cwd, env["DSH_HOME"], watches)


def watches_parent(runtime: RuntimeInfo) -> bool:
    """Whether ``runtime`` is dsh's own of this version (so it honours ``DSH_PARENT_PID``)
    and can watch this process: the python carrier of this install, or the
    ``dsh-runtime-bin`` wheel built as this version. An explicit ``dsh_bin`` or
    ``DSH_RUNTIME_BIN`` may be anything, so it gets the kernel's signal instead (Linux).
    On Linux the runtime watches through a pidfd, so a kernel without pidfds keeps the
    kernel's signal; elsewhere there is no such signal and the runtime always watches
    (kqueue on macOS, a process handle on Windows, else a poll of its parent pid)."""
    ours = runtime.source in ("sys.executable", WHEEL_MODULE) and runtime.version == __version__
    return ours and _parent_watchable()


@functools.cache
def _parent_watchable() -> bool:
    if not sys.platform.startswith("linux"):
        return True
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an old kernel (before Linux 5.3) or a filter refusing the call
        return False
    return True


def _home(config: ClientConfig, env: Mapping[str, str]) -> str:
    if config.dsh_home is not None:
        raw = os.fspath(config.dsh_home)
    elif env.get("DSH_HOME", "").strip():
        raw = env["DSH_HOME"]
    else:
        raise ConfigError(
            "no dsh home: pass dsh_home=... or set DSH_HOME",
            hint="the SDK never uses ~/.dsh implicitly, so an embedded agent cannot "
                 "write into a user's personal home by accident",
        )
    home = _absolute(raw)
    ensure_dir(Path(home))
    return home


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def spawn_runtime(spec: LaunchSpec) -> Child:
    """Start the runtime with three pipes through :mod:`dsh.core.process`, on this thread.

    On Linux a runtime not watching its parent is tied to the spawning *thread* by the
    kernel's parent-death signal, so such a runtime (:attr:`HeadStart.tied`) is spawned
    on a thread that lives as long as the client. :class:`SpawnError` when the OS refuses
    to run it.
    """
    try:
        return spawn(spec.argv, cwd=spec.cwd, env=spec.env, stdin=PIPE, stdout=PIPE,
                     stderr=PIPE, tie=spec.tie)
    except OSError as exc:
        raise spawn_error(spec, exc) from exc


def spawn_error(spec: LaunchSpec, exc: OSError) -> SpawnError:
    """The error for a runtime the OS would not start."""
    hint = None
    if isinstance(exc, FileNotFoundError) and os.path.exists(spec.argv[0]):
        hint = "the file exists, so what was not found is its #! interpreter"
    return SpawnError(f"cannot start {spec.argv[0]}: {exc.strerror or exc}", hint=hint)


class HeadStart:
    """What a start does before it needs an event loop: locate the runtime and check its
    launch (:func:`launch_spec`); then :meth:`spawn` it where :data:`SPAWNS_FIRST`.

    Never raises a :class:`DshError`: it is kept in ``error`` for the client to annotate
    with its stage and raise from ``start()``, as it would any other startup error.
    ``child`` is handed to the client's transport (:meth:`take`); one nobody takes is
    killed by :meth:`discard`.
    """

    def __init__(self, config: ClientConfig, environ: Mapping[str, str]) -> None:
        self.runtime: RuntimeInfo | None = None
        self.spec: LaunchSpec | None = None
        self.error: DshError | None = None
        self._child: Child | None = None
        self._spawned = False
        try:
            env = child_environment(config, environ)
            self.runtime = locate(config, env)
            self.spec = launch_spec(config, self.runtime, env)
        except DshError as exc:
            self.error = exc

    @property
    def tied(self) -> bool:
        """Whether the runtime will be tied to its spawning thread by the kernel's
        parent-death signal (it does not watch this process itself): it must then be
        spawned on a thread that lives as long as the client."""
        return self.spec is not None and self.spec.tie is not None

    def spawn(self) -> None:
        """Spawn the runtime, once, where :data:`SPAWNS_FIRST` and the launch checked out;
        elsewhere asyncio spawns it later. A refusal by the OS is kept in ``error``."""
        if not SPAWNS_FIRST or self._spawned or self.spec is None or self.error is not None:
            return
        self._spawned = True
        try:
            self._child = spawn_runtime(self.spec)
        except DshError as exc:
            self.error = exc

    @property
    def child(self) -> Child | None:
        """The runtime spawned here and not yet taken (None: not spawned here)."""
        return self._child

    def take(self) -> Child | None:
        """The spawned runtime, from now on the caller's to stop."""
        child, self._child = self._child, None
        return child

    def discard(self) -> None:
        """Kill and reap a runtime spawned here that no transport took."""
        child = self.take()
        if child is not None:
            for pipe in (child.stdin, child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()
            child.kill()
            child.wait(KILL_WAIT)
            child.release()
