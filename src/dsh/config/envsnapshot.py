"""The environment snapshot: one immutable view of the environment per launch.

Precedence, first hit wins: a non-empty value in the launch environment, then
``<cwd>/.env``, then ``$DSH_HOME/.env``, then the defaults plugins declare. Every plugin
and every child process sees the same snapshot, so a value cannot change under a running
agent.

Two kinds of names are not taken from every ``.env``:

* **Bootstrap-only** names (the interpreter's and loader's own, ``DSH_*``): by the time a
  ``.env`` is read they have already taken effect, so accepting them would only pretend.
* **Routing** names (:data:`ROUTING`: provider base URLs, proxies, CA bundles,
  ``DSH_POSTGRES_DSN`` (the store's address, with its password)): they decide where the
  user's credentials are sent, so a project's ``.env`` (a cloned repository's, written by
  anyone) may set them only in a folder the user trusts, and only as they were when the
  user trusted it (:mod:`dsh.config.trust`). The home ``.env`` is the user's own and may.

A project's ``.env`` may not set the shell's startup names either (``BASH_ENV``, ``ENV``,
``SHELLOPTS``, ``BASHOPTS``): they would run a file of the project before every command.

In the home ``.env`` a bootstrap-only name is an error (exit 2: the user's own setting
would be lost). In a project ``.env`` a refused name is ignored with one warning naming it
and the file (:attr:`EnvSnapshot.warnings`): that file was written for the project's own
tools, and running dsh in any repository must keep working.

No method of this module ever formats a value into a message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dsh.config.envfile import read_env_file
from dsh.core.carriers import running_frozen
from dsh.core.launch import EnvSnapshot

# What this process alone consumes: the SDK program a runtime watches (see
# ``dsh.runtime.kernel.parentwatch``) is this runtime's tie, not something to hand down.
_PROCESS_ONLY = frozenset({"DSH_PARENT_PID"})


def _launch_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The non-empty launch environment, minus what the frozen carrier's loader added and
    what this process alone consumes (``DSH_PARENT_PID``).

    The frozen runtime's bootloader points the library path at its own folder and keeps
    the user's value in ``*_ORIG``; children (git, curl, a user's shell) must get the
    user's value back, or they would load the runtime's private libraries.
    """
    values = {k: v for k, v in environ.items() if v != "" and k not in _PROCESS_ONLY}
    if running_frozen():
        for name in ("LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"):
            original = values.pop(f"{name}_ORIG", None)
            values.pop(name, None)
            if original:
                values[name] = original
    return values


def snapshot(home: Path, cwd: Path, environ: Mapping[str, str] | None = None, *,
             routing: frozenset[str] = frozenset()) -> EnvSnapshot:
    """Build the launch snapshot: environment > ``cwd/.env`` > ``home/.env``.

    ``routing`` names more variables that route credentials (the tree's, see
    :meth:`dsh.config.compose.Tree.routing_names`) beside :data:`ROUTING`.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    layers: list[tuple[str, Mapping[str, str]]] = []
    home_env = home / ".env"
    cwd_env = cwd / ".env"
    warnings: list[str] = []
    if home_env.is_file():
        layers.append((str(home_env), read_env_file(home_env, is_home=True).values))
    if cwd_env.is_file() and cwd_env.resolve() != home_env.resolve():
        from dsh.config import trust  # hashing, only for a project with a .env

        project = read_env_file(cwd_env, is_home=False,
                                trusted=lambda found: trust.verdict(home, cwd, found),
                                routing_names=routing)
        layers.append((str(cwd_env), project.values))
        warnings += project.ignored
    layers.append(("environment", _launch_environment(environ)))
    for origin, layer in layers:
        for name, value in layer.items():
            values[name] = value
            origins[name] = origin
    return EnvSnapshot(values, origins, tuple(warnings))
