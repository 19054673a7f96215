"""The ``tools-shell`` plugin: the ``bash`` tool.

A command runs as ``bash -c COMMAND`` in the session's working directory, in a new
session (so its own process group), with stdin closed and stdout and stderr merged. The
result text is the output followed by ``[Command finished with exit code N]``, as the
original runtime's was. On Windows the shell is PowerShell (``pwsh``, else Windows
PowerShell: ``-NoProfile -NonInteractive -Command COMMAND``), or ``cmd /d /s /c COMMAND``
when the row's ``shell`` names ``cmd``; the tool keeps its name and result shape, and its
description names the shell the model is writing for (:func:`shell_argv`). Three bounds
keep one call from hurting the session:

- a timeout (the call's ``timeout`` seconds, else the row's ``timeout_seconds``, never
  above ``max_timeout_seconds``), after which the whole group is killed;
- cancellation of the turn kills the whole group too, before the cancel goes on;
- an output cap: the first and last halves of ``max_output_chars`` are kept, with a note
  of what was dropped between them, since errors are usually at the end.

The group never outlives the call: background jobs a command leaves (``sleep 100 &``) are
killed when it ends, which also keeps them from holding the output pipe open. A command
meant to outlive the call runs with ``run_in_background``: it becomes a job of the session
(:mod:`dsh.runtime.tools.jobs`), read with ``job_output`` and stopped with ``job_kill``,
tools this row registers too, so disabling the row disables jobs. ``workdir`` runs one
call elsewhere than the working directory (relative to it, absolute, or ``~/``; it must
exist). The tool is mutating, and ``workdir`` is its one path argument: the agent judges
it (the working directory when absent) against the session's workspace root, so under the
workspace policy it runs unasked inside the root, as the original ran ``bash`` without
asking, and a ``workdir`` outside it is asked about. The sandbox makes the root (and the
granted roots) writable, whatever the working directory.
When the session's client offers a terminal (an ACP editor), a foreground command runs
there instead, as ``dsh sandbox ... -- bash -c COMMAND``, the shell policy's own launcher,
never as the raw command (:mod:`dsh.runtime.tools.terminal`).
Every command starts through :mod:`dsh.core.process` (its own group, tied to the runtime, with
the row's resource ``limits``: :mod:`dsh.core.limits`), the one place processes are started
and stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dsh._version import __version__
from dsh.core import process
from dsh.core.limits import SCHEMA as LIMITS_SCHEMA
from dsh.core.limits import Limits
from dsh.runtime.kernel.envpolicy import SCHEMA as ENV_SCHEMA
from dsh.runtime.kernel.envpolicy import EnvPolicy
from dsh.runtime.kernel.hooks import HookEvent
from dsh.runtime.kernel.plugin import (
    Capability,
    Checkup,
    Diagnosis,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)
from dsh.runtime.tools import confine, terminal
from dsh.runtime.tools.base import ToolContext, ToolResult
from dsh.runtime.tools.confined import Command, prepare
from dsh.runtime.tools.jobs import JobKillTool, JobListTool, JobOutputTool, JobTable
from dsh.runtime.tools.sandbox import CONFIG_SCHEMA as SANDBOX_SCHEMA
from dsh.runtime.tools.sandbox import Policy, SandboxUnavailableError, in_force, prewarm

_DRAIN_SECONDS = 2.0
"""How long output is still read after the group is killed (a daemon that left the group)."""


class CappedOutput:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        """Take the next piece of output."""
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            del self.tail[:-self.tail_limit]

    def text(self) -> str:
        """The kept output, with a note where bytes were dropped."""
        head = self.head.decode("utf-8", "replace")
        dropped = self.total - len(self.head) - len(self.tail)
        if dropped <= 0:
            return head + self.tail.decode("utf-8", "replace")
        return (f"{head}\n[... {dropped} bytes of output omitted; {self.total} in total; "
                f"showing the first {len(self.head)} and last {len(self.tail)} ...]\n"
                f"{self.tail.decode('utf-8', 'replace')}")


_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command to run with bash -c."},
        "timeout": {"type": "number", "minimum": 0,
                    "description": "Seconds before the command is killed "
                                   "(default from the profile)."},
        "description": {"type": "string",
                        "description": "A few words saying what the command does."},
        "workdir": {"type": "string",
                    "description": "Directory to run in, relative to the working "
                                   "directory (default: the working directory)."},
        "run_in_background": {"type": "boolean", "default": False,
                              "description": "Start the command as a background job "
                                             "and return its id at once (no timeout)."},
    },
    "required": ["command"],
    "additionalProperties": False,
}
"""The ``bash`` tool's schema (its ``command`` text names bash; see :meth:`Bash.parameters`)."""


class Bash:
    """Runs a shell command in the working directory."""

    name = "bash"
    base_description = (
        "Run a bash command in the working directory and return its output (stdout and "
        "stderr together) and exit code. Stdin is closed; background jobs are killed when "
        "the command ends. Long outputs are cut in the middle. With run_in_background the "
        "command runs on as a job: its id is returned at once; read it with job_output, stop "
        "it with job_kill."
    )
    mutating = True
    path_arguments: tuple[str, ...] = ("workdir",)

    def __init__(self, plugin: ShellTools) -> None:
        self._plugin = plugin

    @property
    def sandbox(self) -> Policy:
        """The row's sandbox policy now (a sub-agent's shell is given the same)."""
        return self._plugin.policy

    @property
    def limits(self) -> Limits:
        """The row's resource limits now (a sub-agent's shell is given the same)."""
        return self._plugin.limits

    @property
    def description(self) -> str:
        """The description the model sees: the base text (naming the shell, which is bash
        except on Windows) plus the row's sandbox, if any, and the rung that keeps it on
        this machine (so it differs between a machine where bubblewrap runs and one where
        only Landlock does)."""
        base = _DESCRIPTIONS.get(shell_family(self._plugin.config.get("shell") or ""),
                                 self.base_description)
        sandbox = self._plugin.policy.sentence()
        return f"{base} {sandbox}" if sandbox else base

    @property
    def parameters(self) -> Mapping[str, Any]:
        """The schema; its ``command`` says which shell runs it."""
        family = shell_family(self._plugin.config.get("shell") or "")
        if family == "posix":
            return _PARAMETERS
        command = {"type": "string", "description": _COMMAND_HELP[family]}
        return {**_PARAMETERS, "properties": {**_PARAMETERS["properties"], "command": command}}

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the command; report output and exit code, or the timeout.

        In the background, start it as a job of the session and report the job id instead.
        The result's facts name the sandbox rung in force (``sandbox.rung``).
        """
        result = await self._command(args, ctx)
        rung = in_force(Policy.from_config(self._plugin.config.get("sandbox")))
        return result._replace(facts={**result.facts, "sandbox.rung": rung})

    async def _command(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        config = self._plugin.config
        timeout = min(float(args.get("timeout") or config["timeout_seconds"]),
                      float(config["max_timeout_seconds"]))
        workdir = args.get("workdir") or "."
        boundary = confine.of(ctx)
        try:
            boundary.target(ctx.cwd, workdir)
            cwd = os.path.normpath(confine.absolute(ctx.cwd, workdir))
        except confine.PathError as exc:
            return ToolResult(confine.refusal_text(workdir, exc), is_error=True)
        if not os.path.isdir(cwd):
            return ToolResult(f"workdir is not a directory: {workdir} "
                              f"(resolves to {cwd})", is_error=True)
        client = ctx.client
        if client is not None and client.terminal and not args.get("run_in_background"):
            routed = terminal.route(self._plugin.launch, self._plugin.row_id,
                                    shell_argv(config["shell"] or "", args["command"]), cwd,
                                    boundary.root)
            if routed is not None:
                return await terminal.run(client, routed, call_id=ctx.call_id, config=config,
                                          timeout=timeout)
        env = self._plugin.environment(ctx.env)
        try:
            prepared = await sandboxed(config, args["command"], cwd, workspace=boundary.root,
                                       writable=boundary.granted,
                                       protected=boundary.protected, home=self._plugin.home,
                                       env=env, row_id=self._plugin.row_id)
        except SandboxUnavailableError as exc:
            return ToolResult(str(exc), is_error=True)
        if args.get("run_in_background"):
            return await self._plugin.jobs.start(ctx, prepared, cwd, args["command"])
        try:
            return await self._run(prepared, cwd, timeout)
        finally:
            await prepared.close()

    async def _run(self, prepared: Command, cwd: str, timeout: float) -> ToolResult:
        config = self._plugin.config
        output = CappedOutput(config["max_output_chars"])
        if lead := prepared.lead():
            output.feed(lead.encode())  # first, so no output cap drops it
        try:
            child = await process.spawn_async(prepared.argv, cwd=cwd, env=prepared.env,
                                              stdout=process.PIPE, stderr=process.STDOUT,
                                              limits=self._plugin.limits,
                                              confine=prepared.confine)
        except OSError as exc:
            return ToolResult(f"cannot start {prepared.argv[0]}: {exc.strerror or exc}",
                              is_error=True)
        reader = asyncio.ensure_future(_pump(child, output))
        try:
            timed_out = not await child.exited(timeout)
        finally:
            # Runs on success, timeout and cancellation alike: nothing of the group survives.
            child.kill()
            await _finish(child, reader)
        text = output.text()
        if text and not text.endswith("\n"):
            text += "\n"
        if refused := prepared.refusals():
            text += f"{refused}\n"
        if timed_out:
            return ToolResult(f"{text}[Command timed out after {timeout:g} seconds; "
                              "its process group was killed]", is_error=True)
        code = child.returncode if child.returncode is not None else -1
        if code < 0:  # killed by a signal: report it the way a shell would
            code = 128 - code
        return ToolResult(f"{text}[Command finished with exit code {code}]")


async def sandboxed(config: Mapping[str, Any], command: str, cwd: str, *,
                    workspace: str | None = None, writable: Sequence[str] = (),
                    protected: Sequence[str] = (), home: str | None = None,
                    env: Mapping[str, str] | None = None, row_id: str = "shell") -> Command:
    """``command`` made ready to run in ``cwd`` under this row's ``config``.

    The one place a shell command becomes a process, for foreground calls, background
    jobs and ``dsh sandbox`` alike, so the row's sandbox (:mod:`dsh.runtime.tools.sandbox`)
    confines every command on this machine's rung. ``workspace`` is the session's
    workspace root and ``writable`` its granted roots, what the sandbox may make writable
    (default ``cwd``); ``home`` is the dsh home and ``protected`` the other protected
    directories it hides, and ``env`` the environment the process gets (names from the
    dsh home's ``.env`` are dropped). Raises
    :class:`~dsh.runtime.tools.sandbox.SandboxUnavailableError` when the row requires a
    sandbox that cannot run here. Close the result once the command is over.
    """
    return await prepare(Policy.from_config(config.get("sandbox"), row_id=row_id),
                         shell_argv(config["shell"] or "", command), cwd,
                         workspace=workspace, writable=writable, protected=protected,
                         home=home, env=env)


def command_environment(config: Mapping[str, Any], env: Mapping[str, str],
                        declared: Iterable[str], *, row_id: str = "shell") -> Mapping[str, str]:
    """The environment a command of a shell row with ``config`` gets from the runtime's
    ``env`` (``declared``: the names the running rows declare secret)."""
    return EnvPolicy.from_config(config.get("env"), row_id=row_id).build(env, declared)


def shell_family(configured: str, platform: str = sys.platform) -> str:
    """``posix`` (``-c``), ``powershell`` or ``cmd``: how the row's shell takes a command.

    Named by the configured executable's file name (a path in either slash); unset, it is
    PowerShell on Windows and bash (else ``sh``) elsewhere.
    """
    name = re.split(r"[\\/]", configured)[-1].lower().removesuffix(".exe")
    if name in ("pwsh", "powershell"):
        return "powershell"
    if name == "cmd":
        return "cmd"
    if not configured and platform == "win32":
        return "powershell"
    return "posix"


def shell_argv(configured: str, command: str, platform: str = sys.platform) -> list[str]:
    """The argv that runs ``command`` in the row's shell (``configured``, or the default).

    PowerShell runs without the user's profile and never prompts (``-NoProfile
    -NonInteractive``); ``cmd`` without AutoRun commands (``/d``), with ``/s`` so the
    command line is taken as given between its outer quotes.
    """
    family = shell_family(configured, platform)
    if family == "powershell":
        shell = configured or shutil.which("pwsh") or shutil.which("powershell") \
            or "powershell.exe"
        return [shell, "-NoProfile", "-NonInteractive", "-Command", command]
    if family == "cmd":
        return [configured, "/d", "/s", "/c", command]
    return [configured or shutil.which("bash") or "/bin/sh", "-c", command]


_DESCRIPTIONS = {
    "powershell": (
        "Run a PowerShell command in the working directory and return its output (all of "
        "its streams together) and exit code. Stdin is closed; processes it starts are "
        "killed when it ends. Long outputs are cut in the middle. With run_in_background "
        "the command runs on as a job: its id is returned at once; read it with "
        "job_output, stop it with job_kill."),
    "cmd": (
        "Run a cmd.exe command in the working directory and return its output (stdout and "
        "stderr together) and exit code. Stdin is closed; processes it starts are killed "
        "when it ends. Long outputs are cut in the middle. With run_in_background the "
        "command runs on as a job: its id is returned at once; read it with job_output, "
        "stop it with job_kill."),
}
_COMMAND_HELP = {"powershell": "The command to run with PowerShell -Command.",
                 "cmd": "The command to run with cmd /c."}


async def _pump(child: process.AsyncChild, output: CappedOutput) -> None:
    """Read the merged output until EOF."""
    assert child.stdout is not None
    while chunk := await child.stdout.read(65536):
        output.feed(chunk)


async def _finish(child: process.AsyncChild, reader: asyncio.Future[None]) -> None:
    """Drain the output (bounded), then reap the shell and release its group, even when
    the call is being cancelled."""
    with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(reader), _DRAIN_SECONDS)
    if not reader.done():
        reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await child.stop(0)


class ShellTools(Plugin):
    """Plugin row ``tools-shell``: registers :class:`Bash` and the background-job tools.

    The row owns the :class:`~dsh.runtime.tools.jobs.JobTable`: a session's jobs are killed
    on its ``session_end``, and every job on ``dispose`` (runtime end, row disabled or
    replaced).
    """

    manifest = Manifest(
        id="tools-shell",
        version=__version__,
        capabilities=frozenset({Capability.TOOL, Capability.LIFECYCLE}),
        description="The bash tool: a command in the working directory, with a timeout "
                    "and an output cap; its process group is killed on timeout or cancel. "
                    "Background jobs: job_output, job_list, job_kill.",
        config_schema={
            "type": "object",
            "properties": {
                "timeout_seconds": {"type": "number", "minimum": 0, "default": 120,
                                    "description": "Timeout when a call gives none."},
                "max_timeout_seconds": {"type": "number", "minimum": 0, "default": 600,
                                        "description": "Upper bound on any call's timeout."},
                "max_output_chars": {"type": "integer", "minimum": 2, "default": 30000,
                                     "description": "Output kept per call (head and tail)."},
                "shell": {"type": "string", "default": "",
                          "description": "Shell executable; default bash on PATH, else sh "
                                         "(Windows: pwsh, else powershell.exe). A pwsh, "
                                         "powershell or cmd executable gets that shell's "
                                         "flags."},
                "sandbox": SANDBOX_SCHEMA,
                "limits": LIMITS_SCHEMA,
                "env": ENV_SCHEMA,
                "max_jobs": {"type": "integer", "minimum": 1, "default": 32,
                             "description": "Background jobs kept per session."},
                "max_job_output_chars": {"type": "integer", "minimum": 2, "default": 30000,
                                         "description": "Unread output kept per background "
                                                        "job (head and tail)."},
            },
            "additionalProperties": False,
        },
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self.jobs = JobTable(lambda: self.config)

    home: str | None = None
    """The dsh home, which a sandboxed command must not see (known from ``start``)."""
    _rt: RuntimeContext | None = None

    def environment(self, env: Mapping[str, str]) -> Mapping[str, str]:
        """The environment a command gets: the runtime's ``env`` under the row's ``env``
        policy (secrets left out by default: :mod:`dsh.runtime.kernel.envpolicy`)."""
        declared = self._rt.secret_env if self._rt is not None else frozenset()
        return command_environment(self.config, env, declared, row_id=self.row_id)

    @property
    def policy(self) -> Policy:
        """The sandbox policy every command of this row runs under (its config now)."""
        return Policy.from_config(self.config.get("sandbox"), row_id=self.row_id)

    @property
    def launch(self) -> Any:
        """How the runtime was launched (profile, patches, home), which a command in a
        client's terminal repeats (:mod:`dsh.runtime.tools.terminal`); None in process."""
        return getattr(self._rt, "launch", None)

    @property
    def limits(self) -> Limits:
        """The resource limits every command of this row runs with (its config now)."""
        return Limits.from_config(self.config.get("limits"), row_id=self.row_id)

    def apply(self, reg: Registrar) -> None:
        """Register the tools and the hook; they read this row's current config on every call."""
        # Checked now (a bad policy fails the load), and its rung sought meanwhile.
        prewarm(Policy.from_config(self.config.get("sandbox"), row_id=self.row_id))
        Limits.from_config(self.config.get("limits"), row_id=self.row_id)
        EnvPolicy.from_config(self.config.get("env"), row_id=self.row_id)
        reg.tool(Bash(self))
        reg.tool(JobOutputTool(self.jobs, lambda: self.config))
        reg.tool(JobListTool(self.jobs))
        reg.tool(JobKillTool(self.jobs))
        reg.hook("session_end", "kill-session-jobs", self._session_end)

    async def _session_end(self, event: HookEvent) -> None:
        """The session's jobs die with it."""
        if event.session_id is not None:
            await self.jobs.end_session(event.session_id)

    async def dispose(self) -> None:
        """No job outlives the row."""
        await self.jobs.close()

    async def start(self, rt: RuntimeContext) -> None:
        """Learn the dsh home, for the sandbox to hide, and the runtime's secret names."""
        self.home = rt.home
        self._rt = rt

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New limits and sandbox settings apply to the next call."""
        Policy.from_config(config.get("sandbox"), row_id=self.row_id)
        Limits.from_config(config.get("limits"), row_id=self.row_id)
        EnvPolicy.from_config(config.get("env"), row_id=self.row_id)
        self.config = config
        return True

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``sandbox.<row>``: the sandbox policy and the rung that keeps it here
        (bubblewrap, else Landlock with seccomp, on Linux; Seatbelt on macOS; Windows has
        none), with the shell commands run in; ``limits.<row>``: how the resource limits
        are enforced here.

        The Landlock rung is ok, with why bubblewrap did not run and what it keeps less
        well (a warning when an allow-list cannot be kept: ABI < 4). No rung is a warning
        when commands then run unsandboxed (each result says so), and a failure when the
        row requires a sandbox, since every command would be refused. A cgroup bounds a
        command's processes and memory together (ok); rlimits bound each process alone,
        and root ignores the process limit (warn then); none is a warning.
        """
        from dsh.core.errors import DshError
        from dsh.core.process import enforcement
        from dsh.runtime.kernel.schema import validate
        from dsh.runtime.tools.sandbox import BUBBLEWRAP, LANDLOCK, SEATBELT, rung

        sandbox, limits_id = f"sandbox.{row_id}", f"limits.{row_id}"
        try:
            config = validate(cls.manifest.config_schema or {}, config, row_id=row_id)
            policy = Policy.from_config(config["sandbox"], row_id=row_id)
        except DshError as exc:
            return [Diagnosis(sandbox, "fail", str(exc))]
        found: list[Diagnosis] = []
        try:
            limits = Limits.from_config(config.get("limits"), row_id=row_id)
        except DshError as exc:
            found.append(Diagnosis(limits_id, "fail", str(exc)))
        else:
            enforced = enforcement(limits)
            root = hasattr(os, "getuid") and os.getuid() == 0
            if enforced.how == "none" or (enforced.how == "rlimits" and root
                                          and limits.processes):
                extra = (" (running as root, which RLIMIT_NPROC does not bound: processes "
                         "are not limited)" if enforced.how == "rlimits" else "")
                found.append(Diagnosis(limits_id, "warn",
                                       f"{enforced.how}: {enforced.detail}{extra}"))
            else:
                found.append(Diagnosis(limits_id, "ok", f"{enforced.how}: {enforced.detail}"))
        shell = {"posix": "bash -c", "powershell": "PowerShell",
                 "cmd": "cmd /c"}[shell_family(config.get("shell") or "")]
        if policy.mode == "off":
            found.append(Diagnosis(sandbox, "ok", f"off: commands run unsandboxed, as "
                                   f"configured ({shell})"))
            return found
        found_rung = rung(policy)
        if found_rung.name in (BUBBLEWRAP, SEATBELT):
            found.append(Diagnosis(sandbox, "ok", f"{policy.describe()}; "
                                   f"{found_rung.label()} works here ({shell})"))
        elif found_rung.name == LANDLOCK:
            gaps = found_rung.gaps(policy)
            status = "warn" if policy.hosts and found_rung.abi < 4 else "ok"
            found.append(Diagnosis(sandbox, status, f"{policy.describe()}; "
                                   f"{found_rung.label()} ({found_rung.reason}; unlike "
                                   f"bubblewrap: {'; '.join(gaps)}) ({shell})"))
        elif policy.required:
            found.append(Diagnosis(sandbox, "fail", f"{policy.describe()}, but "
                                   f"{found_rung.reason}: every command will be refused"))
        else:
            found.append(Diagnosis(sandbox, "warn", f"{policy.describe()}, but "
                                   f"{found_rung.reason}: commands run unsandboxed"))
        return found
