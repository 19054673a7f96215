"""The environment snapshot: one immutable view of the environment per launch.

Precedence, first hit wins: a non-empty value in the launch environment, then
``<cwd>/.env``, then ``$DSH_HOME/.env``, then the defaults plugins declare. Every plugin
and every child process sees the same snapshot, so a value cannot change under a running
agent. Bootstrap-only names (the interpreter's and loader's own, ``DSH_*``) are refused
from any ``.env``: by the time a ``.env`` is read they have already taken effect, so
accepting them would only pretend. Proxy and CA settings are accepted from the home
``.env`` alone, where the person who owns the home put them.

No method of this module ever formats a value into a message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from dsh.carriers import running_frozen
from dsh.errors import EnvFileError

_BOOTSTRAP = re.compile(r"^(PATH|PYTHON.*|DSH_.*|LD_.*|DYLD_.*)$")
_NETWORK = re.compile(
    r"^((HTTP|HTTPS|ALL|NO)_PROXY|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE)$",
    re.IGNORECASE,
)
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

    __slots__ = ("_origins", "_values")

    def __init__(self, values: Mapping[str, str], origins: Mapping[str, str]) -> None:
        self._values = dict(values)
        self._origins = dict(origins)

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
        return EnvSnapshot(values, origins)

    def child_environ(self, *, scrub: frozenset[str] = frozenset()) -> dict[str, str]:
        """The environment for a child process: the snapshot minus ``scrub`` names."""
        return {k: v for k, v in self._values.items() if k not in scrub}


def read_env_file(path: Path, *, is_home: bool) -> dict[str, str]:
    """Parse one ``.env`` file strictly; a malformed line or refused name exits 2.

    python-dotenv skips lines it cannot parse with only a logged warning; a harness that
    silently loses a key is worse than one that refuses to start, so its parser is driven
    line by line here and any unparsed line is an error naming the file and line.
    """
    from dotenv.parser import parse_stream

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EnvFileError(f"{path}: not UTF-8 text") from exc
    except OSError as exc:
        raise EnvFileError(f"{path}: cannot read ({exc.strerror})") from exc
    values: dict[str, str] = {}
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
        if _BOOTSTRAP.match(name) or (_NETWORK.match(name) and not is_home):
            where = "any .env" if _BOOTSTRAP.match(name) else "a project .env (home .env only)"
            raise EnvFileError(
                f"{path}:{line}: {name} is bootstrap-only and refused from {where}; "
                "set it in the launching environment"
            )
        values[name] = binding.value or ""
    return values


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


def snapshot(home: Path, cwd: Path, environ: Mapping[str, str] | None = None) -> EnvSnapshot:
    """Build the launch snapshot: environment > ``cwd/.env`` > ``home/.env``."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    layers: list[tuple[str, Mapping[str, str]]] = []
    home_env = home / ".env"
    cwd_env = cwd / ".env"
    if home_env.is_file():
        layers.append((str(home_env), read_env_file(home_env, is_home=True)))
    if cwd_env.is_file() and cwd_env.resolve() != home_env.resolve():
        layers.append((str(cwd_env), read_env_file(cwd_env, is_home=False)))
    layers.append(("environment", _launch_environment(environ)))
    for origin, layer in layers:
        for name, value in layer.items():
            values[name] = value
            origins[name] = origin
    return EnvSnapshot(values, origins)
