"""The launch contract: the exact argv, environment and cwd a runtime is spawned with.

``<runtime> --profile P --patch ABS ...`` with the home passed as ``DSH_HOME``. Every path
the caller gave relative (patches, home, cwd) is made absolute against the caller's own
working directory here, before spawn, because the runtime runs in another directory and
would otherwise resolve them against the wrong one. Everything that can be checked
without a process is checked here, so a missing patch file or an unusable home fails
at stage ``configured`` with its path, not as a runtime crash with a stderr to decode.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dsh.errors import ConfigError
from dsh.home import ensure_dir
from dsh.sdk._config import ClientConfig
from dsh.sdk._locate import RuntimeInfo


@dataclass(frozen=True)
class LaunchSpec:
    """One runtime process to spawn: ``argv``, full ``env``, absolute ``cwd`` and home."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    home: str


def child_environment(config: ClientConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The runtime's environment: the caller's (unless ``config.inherit_env`` is off),
    with ``config.env`` on top."""
    env = dict(environ) if config.inherit_env else {}
    if config.env is not None:
        env.update(config.env)
    return env


def launch_spec(config: ClientConfig, runtime: RuntimeInfo, env: dict[str, str]) -> LaunchSpec:
    """Resolve and check every path of ``config``; ``env`` gains the absolute ``DSH_HOME``.

    Raises :class:`ConfigError` naming the path for: no home given, a home that cannot be
    created, a working directory that is not one, a patch file that does not exist.
    """
    env["DSH_HOME"] = _home(config, env)
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
    return LaunchSpec(tuple(argv), env, cwd, env["DSH_HOME"])


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
