"""One ``.env`` file, read strictly, and which of its names it may set.

Two kinds of names are not taken from every ``.env`` (:mod:`dsh.config.envsnapshot` says
why): bootstrap-only names, and names that route credentials (:data:`ROUTING`), which a
project's ``.env`` may set only in a folder the user trusts (:mod:`dsh.config.trust`).
This module reads one file and applies those rules; it knows nothing of homes or of the
trust store, which answers through the ``trusted`` callback.

No function of this module ever formats a value into a message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from dsh.core.errors import EnvFileError

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
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME_START = re.compile(r"[A-Za-z0-9_]*")


class EnvFile(NamedTuple):
    """One parsed ``.env``: the names taken, and a warning line per name ignored."""

    values: dict[str, str]
    ignored: tuple[str, ...] = ()


TRUSTED, UNTRUSTED, CHANGED = "trusted", "untrusted", "changed"
"""What a trust lookup answers for a project's routing settings (:mod:`dsh.config.trust`)."""


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
            start = match.group() if (match := _NAME_START.match(name)) else ""
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
