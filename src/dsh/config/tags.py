"""Lazy value tags in patch files: ``!env``, ``!home`` and ``!path``.

Tags replace code evaluation: a patch can point at an environment variable, a place in
the home or a file beside the patch, and the reference stays a reference until the
runtime boots. Composition and ``--dump-config`` therefore never read a secret; only
:func:`resolve` does, against the launch's environment snapshot and home.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.core.redact import EnvValue

KNOWN_TAGS = ("!env", "!home", "!path")

# The references stay dataclasses, unlike the launcher's other records: they sit among
# config values, where a tuple would read as a list (and HomeRef("a") == PathRef("a")).


@dataclass(frozen=True)
class EnvRef:
    """``!env NAME`` or ``!env [NAME, default]``: unset and no default resolves to None."""

    name: str
    default: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The dump form: the reference, never the value."""
        return {"!env": self.name if self.default is None else [self.name, self.default]}


@dataclass(frozen=True)
class HomeRef:
    """``!home sub/path``: a path inside the launch's home."""

    sub: str

    def to_json(self) -> dict[str, Any]:
        """The dump form."""
        return {"!home": self.sub}


@dataclass(frozen=True)
class PathRef:
    """``!path rel/path``: already anchored to the folder of the patch file holding it.

    ``written`` keeps the text as written (not part of equality), so a cached layer can
    check that it still resolves to ``path`` (see :mod:`dsh.config.layercache`).
    """

    path: str
    written: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The dump form (absolute)."""
        return {"!path": self.path}


Tag = EnvRef | HomeRef | PathRef


def resolve(value: Any, env: Mapping[str, str], home: Path) -> Any:
    """A copy of ``value`` with every tag replaced by its value for this launch; a value
    read from the environment is an :class:`~dsh.core.redact.EnvValue` (potentially a
    secret: diagnostics name its variable, never quote it), a ``!env`` default is not."""
    if isinstance(value, dict):
        return {k: resolve(v, env, home) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, env, home) for v in value]
    if isinstance(value, EnvRef):
        found = env.get(value.name)
        return value.default if found is None else EnvValue(found, value.name)
    if isinstance(value, HomeRef):
        return str(home / value.sub)
    if isinstance(value, PathRef):
        return value.path
    return value


def resolve_rows(rows: tuple[dict[str, Any], ...], env: Mapping[str, str],
                 home: Path) -> tuple[dict[str, Any], ...]:
    """Leaf rows as the kernel boots them: each row's ``config`` with its tags resolved
    (copies: the rows given are left as they are)."""
    return tuple({**row, "config": resolve(row["config"], env, home),
                  "inject": list(row["inject"])} for row in rows)


def to_json(value: Any) -> Any:
    """A JSON-ready copy of ``value`` with tags shown as references."""
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, (EnvRef, HomeRef, PathRef)):
        return value.to_json()
    return value


_ROUTING_KEY = re.compile(r"url|uri|endpoint|host|proxy|server|address|dsn|cert|ca_?bundle",
                          re.IGNORECASE)


def routing_names(value: Any, key: str = "") -> set[str]:
    """The variables a config reads to decide where to connect: every ``!env`` under a key
    such as ``url``, ``base_url``, ``endpoint``, ``host``, ``proxy`` or ``dsn``, and the
    variable a ``*_env`` key of that kind names (``base_url_env: MY_URL``). A project's
    ``.env`` may set these only in a trusted folder, like the fixed routing names
    (:data:`dsh.config.envfile.ROUTING`)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for sub, item in value.items():
            name = str(sub)
            if name.lower().endswith("_env") and isinstance(item, str) \
                    and _ROUTING_KEY.search(name[:-4]):
                found.add(item)
            found |= routing_names(item, name)
    elif isinstance(value, list):
        for item in value:
            found |= routing_names(item, key)
    elif isinstance(value, EnvRef) and _ROUTING_KEY.search(key):
        found.add(value.name)
    return found
