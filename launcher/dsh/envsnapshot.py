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
  user trusted it (:mod:`dsh.trust`). The home ``.env`` is the user's own and may.

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
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from dsh.carriers import running_frozen
from dsh.errors import EnvFileError

ROUTING = re.compile(
    r"^(.*_BASE_URL|.*_API_BASE|.*_API_URL|(HTTP|HTTPS|ALL|NO|FTP)_PROXY"
    r"|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|NODE_EXTRA_CA_CERTS"
    r"|DSH_POSTGRES_DSN)$",
    re.IGNORECASE,
)
"""Names that route credentials: taken from a project ``.env`` only in a trusted folder."""
_BOOTSTRAP = re.compile(r"^(PATH|PYTHON.*|DSH_.*|LD_.*|DYLD_.*)$")
_SHELL_STARTUP = re.compile(r"^(BASH_ENV|ENV|SHELLOPTS|BASHOPTS)$")
"""Names that make every ``bash -c``/``sh -c`` of the shell tool run code first: from a
project's ``.env`` they would run the project's file before each command, even one the
model never meant to run there (outside the sandbox when it is off)."""
# What this process alone consumes: the SDK program a runtime watches (see
# ``dsh_runtime.parentwatch``) is this runtime's tie, not something to hand down.
_PROCESS_ONLY = frozenset({"DSH_PARENT_PID"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME_START = re.compile(r"[A-Za-z0-9_]*")


class EnvSnapshot(Mapping[str, str]):
    """An immutable mapping of environment names to values, with each value's origin.

    ``origin(name)`` says where a value came from (``environment``, a ``.env`` path, or
    ``default``), which is what diagnostics print instead of the value.
    """

    __slots__ = ("_origins", "_values", "warnings")

    def __init__(self, values: Mapping[str, str], origins: Mapping[str, str],
                 warnings: tuple[str, ...] = ()) -> None:
        self._values = dict(values)
        self._origins = dict(origins)
        self.warnings = warnings
        """One line per ``.env`` name that was ignored, naming it and its file."""

    def __getitem__(self, name: str) -> str:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"EnvSnapshot({len(self._values)} names)"

    def origin(self, name: str) -> str | None:
        """Where ``name`` came from, or None when it is not set."""
        return self._origins.get(name)

    def with_defaults(self, defaults: Mapping[str, str]) -> EnvSnapshot:
        """A new snapshot where ``defaults`` fill names that are still unset."""
        values, origins = dict(self._values), dict(self._origins)
        for name, value in defaults.items():
            if name not in values:
                values[name] = value
                origins[name] = "default"
        return EnvSnapshot(values, origins, self.warnings)

    def child_environ(self, *, scrub: frozenset[str] = frozenset()) -> dict[str, str]:
        """The environment for a child process: the snapshot minus ``scrub`` names."""
        return {k: v for k, v in self._values.items() if k not in scrub}


class EnvFile(NamedTuple):
    """One parsed ``.env``: the names taken, and a warning line per name ignored."""

    values: dict[str, str]
    ignored: tuple[str, ...] = ()


TRUSTED, UNTRUSTED, CHANGED = "trusted", "untrusted", "changed"
"""What a trust lookup answers for a project's routing settings (:mod:`dsh.trust`)."""


def read_env_file(path: Path, *, is_home: bool,
                  trusted: Callable[[Mapping[str, str]], str] = lambda routing: UNTRUSTED,
                  routing_names: frozenset[str] = frozenset()) -> EnvFile:
    """Parse one ``.env`` file strictly; a malformed line exits 2.

    python-dotenv skips lines it cannot parse with only a logged warning; a harness that
    silently loses a key is worse than one that refuses to start, so its parser is driven
    line by line here and any unparsed line is an error naming the file and line.

    A bootstrap-only name is an error in the home file and ignored (with a warning) in a
    project file. A project file's routing names are taken all together or not at all:
    ``trusted(routing)`` (asked only when there are some) answers :data:`TRUSTED` when
    the user trusts the folder with exactly these settings, :data:`CHANGED` when it was
    trusted with others, :data:`UNTRUSTED` otherwise. ``routing_names`` are routing too:
    the variables the composed tree reads an address from (``url: !env TRACKER_URL``).
    """
    from dotenv.parser import parse_stream

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EnvFileError(f"{path}: not UTF-8 text") from exc
    except OSError as exc:
        raise EnvFileError(f"{path}: cannot read ({exc.strerror})") from exc
    values: dict[str, str] = {}
    ignored: list[tuple[int, str]] = []
    routing: dict[str, str] = {}
    lines: dict[str, int] = {}
    import io

    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise EnvFileError(f"{path}:{line}: malformed line (expected NAME=value)")
        if binding.key is None:
            continue
        name = binding.key
        if not _NAME.match(name):
            # Only the name-like start is shown: python-dotenv reads "API_KEY:sk-..." (a
            # mistyped "=") as one long key, whose rest is the value.
            start = _NAME_START.match(name).group()
            raise EnvFileError(f"{path}:{line}: invalid variable name (it starts {start!r}; "
                               "expected NAME=value, NAME of letters, digits and _)")
        is_routing = ROUTING.match(name) is not None or name in routing_names
        if _BOOTSTRAP.match(name) and not is_routing:
            if is_home:
                raise EnvFileError(
                    f"{path}:{line}: {name} is bootstrap-only and refused from any .env; "
                    "set it in the launching environment")
            ignored.append((line, f"{path}:{line}: {name} ignored: it is bootstrap-only (it "
                                  "takes effect before any .env is read); set it in the "
                                  "launching environment"))
            continue
        if _SHELL_STARTUP.match(name) and not is_home:
            ignored.append((line, f"{path}:{line}: {name} ignored: it would make every shell "
                                  "command run code first; set it in the launching "
                                  "environment"))
            continue
        if is_routing and not is_home:
            routing[name] = binding.value or ""
            lines[name] = line
            continue
        values[name] = binding.value or ""
    if routing:
        verdict = trusted(routing)
        if verdict == TRUSTED:
            values.update(routing)
        else:
            why = (f"this folder's credential routing changed since you trusted it (`dsh "
                   f"trust {path.parent}` accepts it as it is now)" if verdict == CHANGED else
                   "a project's .env may not route credentials (base URLs, proxies, CA "
                   f"bundles, DSH_POSTGRES_DSN) unless you trust the folder: dsh trust "
                   f"{path.parent}")
            ignored += [(lines[name], f"{path}:{lines[name]}: {name} ignored: {why}")
                        for name in routing]
    return EnvFile(values, tuple(text for _, text in sorted(ignored)))


def routing_settings(path: Path) -> dict[str, str]:
    """Every setting of a project ``.env`` that may route (``{}`` without a file): what
    ``dsh trust`` records digests of. That is every name but the bootstrap-only ones,
    since a config may read an address from any variable."""
    if not path.is_file():
        return {}
    found: dict[str, str] = {}

    def keep(routing: Mapping[str, str]) -> str:
        found.update(routing)
        return UNTRUSTED

    read = read_env_file(path, is_home=False, trusted=keep)
    return {**read.values, **found}


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
    :meth:`dsh.compose.Tree.routing_names`) beside :data:`ROUTING`.
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
        from dsh.trust import verdict

        project = read_env_file(cwd_env, is_home=False,
                                trusted=lambda found: verdict(home, cwd, found),
                                routing_names=routing)
        layers.append((str(cwd_env), project.values))
        warnings += project.ignored
    layers.append(("environment", _launch_environment(environ)))
    for origin, layer in layers:
        for name, value in layer.items():
            values[name] = value
            origins[name] = origin
    return EnvSnapshot(values, origins, tuple(warnings))
