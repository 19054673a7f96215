"""A shell command made ready for this machine's sandbox rung: :func:`prepare`, :class:`Command`.

The one way a shell command (a ``bash`` call, a background job, ``dsh sandbox``) meets the
sandbox: :func:`prepare` takes the row's :class:`~dsh.runtime.tools.sandbox.Policy` and
the command's place (working directory, workspace root, granted roots, protected
directories, dsh home, environment), asks the ladder for the rung
(:func:`~dsh.runtime.tools.sandbox.rung`) and returns a :class:`Command`: the argv, the
environment and, for the Landlock rung, the confinement :mod:`dsh.core.process` applies
in the child, with the lines the result must carry and what to clean up after.

Per rung: **bubblewrap** wraps the argv (:mod:`dsh.runtime.tools.bubblewrap`) and, with
an allow-list, puts the relay in front of the command with its socket bound in
(:mod:`dsh.core.netrelay`); **Landlock** keeps the argv, removes the dsh home's ``.env``
names from the environment, gives a fresh ``TMPDIR`` and, with an allow-list, the proxy's
port (:mod:`dsh.runtime.tools.landlockrung`); **Seatbelt** wraps the argv
(:mod:`dsh.runtime.tools.seatbelt`; an allow-list there means no network, said so);
**none** leaves it, with the "Not sandboxed" line, or refuses when the row requires a
sandbox.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dsh.runtime.tools import netproxy
from dsh.runtime.tools.sandbox import (
    LANDLOCK,
    NONE,
    OFF,
    SEATBELT,
    WORKSPACE_WRITE,
    Policy,
    Rung,
    SandboxUnavailableError,
    from_secrets,
    note,
    plan_for,
    rung,
    wrap,
)

if TYPE_CHECKING:
    from dsh.core.confinement import Confinement


class Command:
    """One shell command made ready for its rung by :func:`prepare`.

    Start it with :mod:`dsh.core.process` as ``argv`` with ``env`` and ``confine`` (the
    Landlock rung's pre-exec confinement, else None); its result starts with
    :attr:`notes` (each a line saying what ran with less than the row asked) and ends
    with :meth:`refusals`; :meth:`close` it once the command and what it left are gone
    (the allow-list proxy and the private temporary directory go with it).
    """

    def __init__(self, argv: list[str], env: Mapping[str, str] | None, found: Rung, *,
                 confine: Confinement | None = None, notes: Sequence[str] = (),
                 proxy: netproxy.Proxy | None = None, scratch: str | None = None,
                 setting: str = "") -> None:
        self.argv = argv
        self.env = env
        self.rung = found
        self.confine = confine
        self.notes = list(notes)
        self.proxy = proxy
        self.scratch = scratch
        self.setting = setting
        self._reported = 0

    def lead(self) -> str:
        """The notes as the first lines of a result ('' when there are none)."""
        return "".join(f"{line}\n" for line in self.notes)

    def refusals(self, *, since_last: bool = False) -> str:
        """The allow-list proxy's refusals as one line ('' when none); ``since_last``:
        only those not reported by an earlier call (a job read again and again)."""
        if self.proxy is None:
            return ""
        refused = self.proxy.refused[self._reported:] if since_last else self.proxy.refused
        self._reported = len(self.proxy.refused)
        return netproxy.refusal_line(refused, self.setting)

    async def close(self) -> None:
        """Stop the proxy and remove the private temporary directory."""
        proxy, self.proxy = self.proxy, None
        if proxy is not None:
            await proxy.close()
        scratch, self.scratch = self.scratch, None
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


async def prepare(policy: Policy, argv: Sequence[str], cwd: str, *,
                  workspace: str | None = None, writable: Sequence[str] = (),
                  protected: Sequence[str] = (), home: str | None = None,
                  env: Mapping[str, str] | None = None) -> Command:
    """``argv`` made ready to run in ``cwd`` on this machine's rung (see :func:`wrap` for
    the arguments). Raises :class:`SandboxUnavailableError` when the row requires a
    sandbox and none runs here, or when the Landlock rung cannot express the policy
    (never runs a command with less than its notes say)."""
    if policy.mode == OFF:
        return Command(list(argv), env, Rung(NONE, "the sandbox is off"))
    found = rung(policy)
    if found.name == NONE:
        if policy.required:
            raise SandboxUnavailableError(
                f"Refused: this profile requires the {policy.mode} sandbox for shell "
                f"commands, but {found.reason}. The command was not run.")
        return Command(list(argv), env, found, notes=[note(policy)])
    kwargs: dict[str, Any] = {"workspace": workspace, "writable": writable,
                              "protected": protected, "home": home, "env": env}
    if found.name == LANDLOCK:
        return await _landlock_command(policy, found, argv, cwd, **kwargs)
    if not policy.hosts:
        return Command(wrap(policy, argv, cwd, **kwargs), env, found)
    if found.name == SEATBELT:
        command = Command(wrap(policy._replace(network=False), argv, cwd, **kwargs), env,
                          found)
        command.notes.append("[Sandbox: Seatbelt keeps no network allow-list; this command "
                             "had no network]")
        return command
    return await _relayed_command(policy, found, argv, cwd, **kwargs)


async def _relayed_command(policy: Policy, found: Rung, argv: Sequence[str], cwd: str,
                           **kwargs: Any) -> Command:
    """Bubblewrap with an allow-list: the proxy on a unix socket in a private folder bound
    into the sandbox, the relay in front of the command (:mod:`dsh.core.netrelay`)."""
    from dsh.core import netrelay

    folder = tempfile.mkdtemp(prefix="dsh-proxy-")
    proxy = netproxy.Proxy(netproxy.AllowList(policy.hosts, policy.setting))
    command = Command([], None, found, proxy=proxy, scratch=folder, setting=policy.setting)
    try:
        path = os.path.join(folder, "relay.sock")
        proxy.listen_relay(path)
        relayed = netrelay.argv(path, netproxy.RELAY_PORT, list(argv))
        interpreter = netrelay.interpreter()
        home_policy = policy._replace(readable=(*policy.readable, *_interpreter_dirs(
            interpreter)))
        command.argv = wrap(home_policy, relayed, cwd, binds=[folder], **kwargs)
        env = dict(kwargs["env"] if kwargs["env"] is not None else os.environ)
        command.env = netproxy.environment(
            env, f"http://127.0.0.1:{netproxy.RELAY_PORT}")
    except BaseException:
        await command.close()
        raise
    return command


def _interpreter_dirs(interpreter: str) -> list[str]:
    """What the relay's interpreter needs to see: its folder and its standard library."""
    found = [os.path.dirname(interpreter)]
    if not getattr(sys, "frozen", False):
        found.append(os.path.realpath(sys.base_prefix))
    return found


async def _landlock_command(policy: Policy, found: Rung, argv: Sequence[str], cwd: str,
                            **kwargs: Any) -> Command:
    """The Landlock rung: rules for this command, a fresh ``TMPDIR``, and the proxy on a
    port of 127.0.0.1 when there is an allow-list."""
    from dsh.core import seccomp
    from dsh.core.confinement import Confinement
    from dsh.runtime.tools import landlockrung

    env_in = kwargs["env"]
    plan = plan_for(policy, cwd, **kwargs)
    scratch = tempfile.mkdtemp(prefix="dsh-sandbox-")
    command = Command(list(argv), None, found, scratch=scratch, setting=policy.setting)
    try:
        layout = landlockrung.Layout(policy.mode == WORKSPACE_WRITE, tuple(plan.roots),
                                     tuple(plan.hidden), tuple(plan.private),
                                     tuple(plan.readable))
        rules = landlockrung.rules(layout, os.path.realpath(scratch))  # may refuse
        command.notes.extend(rules.notes)
        env = {name: value for name, value in
               (env_in if env_in is not None else os.environ).items()
               if name not in from_secrets(env_in, plan.secrets)}
        for name in ("TMPDIR", "TMP", "TEMP"):
            env[name] = scratch
        network = seccomp.NETWORK_NONE
        ports: tuple[int, ...] = ()
        if policy.network is True:
            network = seccomp.NETWORK_ALL
        elif policy.hosts and found.abi < 4:
            command.notes.append(
                f"[Sandbox: this kernel's Landlock (ABI {found.abi}) has no TCP rules, so "
                "the network allow-list cannot be kept: this command had no network]")
        elif policy.hosts:
            proxy = netproxy.Proxy(netproxy.AllowList(policy.hosts, policy.setting))
            command.proxy = proxy
            port = await proxy.listen_tcp()
            network, ports = seccomp.NETWORK_TCP, (port,)
            env = netproxy.environment(env, f"http://127.0.0.1:{port}")
        command.env = env
        command.confine = Confinement(rules.rules, network, ports, found.abi)
    except BaseException:
        await command.close()
        raise
    return command
