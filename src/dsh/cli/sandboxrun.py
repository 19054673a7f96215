"""``dsh sandbox [--profile P] -- COMMAND ...``: one command, run as the model's would be.

For users checking their setup and writing allow-lists (and for clients that run a
terminal's commands through it): the profile is composed as the runtime composes it, its
shell row (``tools-shell``; ``--row`` picks one of several) gives the sandbox policy,
resource limits and environment policy, and the command goes through the same
:func:`dsh.runtime.tools.shell.sandboxed` and :mod:`dsh.core.process` start as a
``bash`` tool call: same rung, same rules, same proxy and allow-list, same limits, same
environment (the launch environment with the profile's ``.env`` files, filtered by the
row's ``env`` policy and the rows' declared secrets). The workspace root is the current
directory; the dsh home and the ``agent`` row's ``protected_paths`` are protected.

What it prints and returns, exactly:

- **stderr, before the command**: ``dsh sandbox: rung RUNG (DETAIL)`` and ``dsh sandbox:
  policy POLICY``, then each note the tool result would start with (what runs with less
  than the row asks); ``--quiet`` drops the first two lines, never a note.
- **the command**: its argv as given (the model's commands are ``bash -c COMMAND``, so
  ``dsh sandbox -- bash -c '...'`` is exactly one), stdin closed as the tool closes it,
  stdout and stderr its own (the tool merges them into one result), no timeout and no
  output cap; in a process group of its own, tied to this process; SIGINT, SIGTERM and
  SIGHUP sent to ``dsh sandbox`` stop the command's whole group (SIGTERM, then SIGKILL
  after half a second), as cancelling a tool call does.
- **stderr, after**: the allow-list proxy's refusals, one line, as the tool result has.
- **exit status**: the command's; ``128+N`` when a signal ``N`` ended it; 126 when the
  command was refused (the row requires a sandbox none of the rungs can give here) or
  could not be confined; 127 when the program was not found; 2 for a bad profile or
  config.

Whatever the command leaves running when it exits is killed, as after a tool call: it runs
in a container of its own (:func:`dsh.core.process.contain`, a cgroup or the subreaper's
marker), so a process that left its group goes too; and, as a runtime's start does, what
killed runtimes of the home left running is ended first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsh.core.errors import ConfigError, DshError

SHELL_PLUGIN = "tools-shell"
AGENT_PLUGIN = "agent-core"
EXIT_REFUSED = 126
EXIT_NOT_FOUND = 127


class CommandRefusedError(DshError):
    """The sandbox refused the command (or could not start it confined): exit 126."""

    exit_code = EXIT_REFUSED


class CommandNotFoundError(DshError):
    """The command's program does not exist: exit 127."""

    exit_code = EXIT_NOT_FOUND


def run(home: Path, profile: str, patches: Sequence[str], cwd: Path, argv: Sequence[str],
        *, row: str | None = None, quiet: bool = False) -> int:
    """Run ``argv`` under ``profile``'s shell policy; its exit status (see the docstring)."""
    if not argv:
        raise ConfigError("dsh sandbox needs a command after --")
    found = _shell_row(home, profile, list(patches), cwd, row)
    from dsh.core import process

    process.contain(home)  # in a container of its own, as a runtime's command is
    try:
        return asyncio.run(_run(found, argv, cwd, quiet=quiet))
    finally:
        process.kill_children()  # whatever is left, and the record with it


class _Row:
    """What the shell row gives a command: config, environment, protected paths."""

    def __init__(self, row_id: str, config: Mapping[str, Any], env: Mapping[str, str],
                 home: Path, protected: tuple[str, ...]) -> None:
        self.row_id = row_id
        self.config = config
        self.env = env
        self.home = home
        self.protected = protected


def _shell_row(home: Path, profile: str, patches: list[str], cwd: Path,
               wanted: str | None) -> _Row:
    from dsh.config.envsnapshot import snapshot
    from dsh.config.resolve import resolve
    from dsh.runtime.kernel.envpolicy import declared_secrets
    from dsh.runtime.kernel.loader import add_plugin_dir
    from dsh.runtime.kernel.loader import resolve as resolve_plugin
    from dsh.runtime.kernel.schema import validate
    from dsh.runtime.tools import confine
    from dsh.runtime.tools.sandbox import Policy
    from dsh.runtime.tools.shell import command_environment

    resolved = resolve(home, profile, patches, cwd, seed=False)
    add_plugin_dir(resolved.profile.plugin_dir)  # the runtime loads plugins from there too
    env = snapshot(home, cwd, routing=resolved.tree.routing_names())
    rows = [r for r in resolved.tree.flat_rows(env, home) if not r["disabled"]]
    shells = [r for r in rows if r["name"] == SHELL_PLUGIN]
    if wanted is not None:
        shells = [r for r in shells if r["id"] == wanted]
    if not shells:
        where = f"row '{wanted}'" if wanted else f"an enabled {SHELL_PLUGIN} row"
        raise ConfigError(f"profile '{profile}' has no {where}: its commands would not run "
                          "at all")
    shell = shells[0]
    plugin = resolve_plugin(shell["id"], shell["name"])
    config = validate(plugin.manifest.config_schema or {}, shell["config"],
                      row_id=shell["id"])
    Policy.from_config(config.get("sandbox"), row_id=shell["id"])  # a bad list: exit 2
    declared: set[str] = set()
    protected: list[str] = []
    for item in rows:
        if item["name"] is None:
            continue
        item_plugin = resolve_plugin(item["id"], item["name"])
        declared |= declared_secrets(item_plugin.manifest, item["config"])
        if item["name"] == AGENT_PLUGIN:
            protected += confine.config_paths(item["config"], "protected_paths",
                                              f"row '{item['id']}' config")
    command_env = command_environment(config, env, declared, row_id=shell["id"])
    return _Row(shell["id"], config, command_env, home,
                confine.protected_dirs(str(home), protected))


async def _run(row: _Row, argv: Sequence[str], cwd: Path, *, quiet: bool) -> int:
    from dsh.core import process
    from dsh.core.limits import Limits
    from dsh.runtime.tools.confined import prepare
    from dsh.runtime.tools.sandbox import Policy, SandboxUnavailableError, rung

    policy = Policy.from_config(row.config.get("sandbox"), row_id=row.row_id)
    limits = Limits.from_config(row.config.get("limits"), row_id=row.row_id)
    where = str(cwd.resolve())
    if shutil.which(argv[0], path=row.env.get("PATH", os.defpath)) is None and not (
            os.sep in argv[0] and os.access(argv[0], os.X_OK)):
        # Behind bwrap a missing program is bwrap's exit 1: say it as a shell would.
        raise CommandNotFoundError(f"dsh sandbox: {argv[0]}: command not found")
    try:
        prepared = await prepare(policy, list(argv), where, workspace=where,
                                 protected=row.protected, home=str(row.home), env=row.env)
    except SandboxUnavailableError as exc:
        raise CommandRefusedError(str(exc)) from exc
    try:
        if not quiet:
            found = rung(policy) if policy.mode != "off" else prepared.rung
            detail = found.label() if found.name != "none" else "no sandbox"
            because = f"; {found.reason}" if found.reason else ""
            _say(f"rung {found.name} ({detail}{because})")
            _say(f"policy {policy.describe()} (row '{row.row_id}'), workspace {where}")
        for line in prepared.notes:
            sys.stderr.write(f"{line}\n")
        with _Stopping() as stopping:  # before the start: a signal then is not lost
            try:
                child = await process.spawn_async(
                    prepared.argv, cwd=where, env=prepared.env, stdin=process.DEVNULL,
                    stdout=None, stderr=None, limits=limits, confine=prepared.confine)
            except FileNotFoundError as exc:
                raise CommandNotFoundError(f"dsh sandbox: {argv[0]}: command not found") \
                    from exc
            except OSError as exc:
                raise CommandRefusedError(f"dsh sandbox: cannot start {argv[0]}: "
                                          f"{exc.strerror or exc}") from exc
            stopped = await stopping.wait(child)
        await child.stop(0)  # what the group left behind goes, as after a tool call
        if refused := prepared.refusals():
            sys.stderr.write(f"{refused}\n")
    finally:
        await prepared.close()
    if stopped:
        return 128 + stopped
    code = child.returncode if child.returncode is not None else 1
    return 128 - code if code < 0 else code


class _Stopping:
    """SIGINT, SIGTERM and SIGHUP, while in force, stop the command instead of this
    process: :meth:`wait` returns the first one that came (0 when none did)."""

    _NAMES = ("SIGINT", "SIGTERM", "SIGHUP")

    def __enter__(self) -> _Stopping:
        self.came: list[int] = []
        self.event = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.handled = [getattr(signal, n) for n in self._NAMES if hasattr(signal, n)]
        for signum in self.handled:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(signum, self._came, signum)
        return self

    def _came(self, signum: int) -> None:
        if not self.came:
            self.came.append(signum)
            self.event.set()

    async def wait(self, child: Any) -> int:
        """Wait for ``child``; on a stopping signal stop its group (grace, then kill)."""
        exited = asyncio.ensure_future(child.exited())
        signalled = asyncio.ensure_future(self.event.wait())
        await asyncio.wait({exited, signalled}, return_when=asyncio.FIRST_COMPLETED)
        for task in (exited, signalled):
            task.cancel()
        if self.came:
            await child.stop()
            return self.came[0]
        return 0

    def __exit__(self, *exc: object) -> None:
        for signum in self.handled:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.remove_signal_handler(signum)


def _say(line: str) -> None:
    sys.stderr.write(f"dsh sandbox: {line}\n")
