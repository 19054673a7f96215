"""What a child process sees of the runtime's environment: secrets left out by default.

A command the model runs can print its environment (``env``), so whatever the runtime
holds in it (the provider's API key, a database DSN, a token a store row needs) would be
one tool call from the model and from any prompt injection. So every child the runtime
starts for the model (shell commands and jobs, sub-agents, helper binaries) gets the
runtime's environment minus its secrets:

* every name containing one of :data:`SECRET_WORDS` (case-insensitive): ``KEY``, ``SECRET``,
  ``TOKEN``, ``PASSWORD`` and its spellings, ``DSN``, ``CREDENTIAL``, ``AUTH``, ``PRIVATE``,
  ``COOKIE``;
* every name a loaded plugin declares as secret (:func:`declared_secrets`: its manifest's
  ``EnvVar(secret=True)`` names, and the variables its config names in keys such as
  ``api_key_env``), whatever it is called.

The shell row configures its own (``config.env``, :class:`EnvPolicy`, modelled on Codex's
``shell_environment_policy``): ``inherit`` (``all``, ``core`` or ``none``), then the
default excludes unless ``ignore_default_excludes``, then ``exclude`` patterns, then
``set`` (values, ``!env NAME`` to pass one on deliberately), then ``include_only``.
Patterns are shell globs matched case-insensitively. MCP stdio servers get only
:data:`CORE` names plus their own configured ``env``; a sub-agent gets this scrub plus
its row's ``pass_env`` (:mod:`dsh.runtime.subagents.environment`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError
from dsh.core.launch import EnvSnapshot

SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "DSN",
                "CREDENTIAL", "AUTH", "PRIVATE", "COOKIE")
"""A name containing one of these is a secret (the one list: shell, jobs, sub-agents)."""
DEFAULT_EXCLUDES = tuple(f"*{word}*" for word in SECRET_WORDS)
""":data:`SECRET_WORDS` as the patterns a policy's default excludes are."""
CORE = ("HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP",
        "LANG", "LC_ALL", "LC_CTYPE", "TERM")
"""What ``inherit: core`` keeps: what programs need to run at all."""
INHERIT = ("all", "core", "none")

SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "default": {},
    "description": "The environment commands get (Codex's shell_environment_policy).",
    "properties": {
        "inherit": {"type": "string", "enum": list(INHERIT), "default": "all",
                    "description": "Start from all, the core names, or nothing."},
        "ignore_default_excludes": {"type": "boolean", "default": False,
                                    "description": "Keep names that look like secrets."},
        "exclude": {"type": "array", "items": {"type": "string"}, "default": [],
                    "description": "More name patterns to leave out."},
        "set": {"type": "object", "default": {},
                "description": "Names to set (a value, or !env NAME to pass one on "
                               "when it is set)."},
        "include_only": {"type": "array", "items": {"type": "string"}, "default": [],
                         "description": "If given, keep only names matching these."},
    },
    "additionalProperties": False,
}
"""The ``env`` key of the shell row's config schema."""


def is_secret(name: str, declared: Iterable[str] = ()) -> bool:
    """Whether ``name`` is withheld from children by default."""
    upper = name.upper()
    return name in declared or any(word in upper for word in SECRET_WORDS)


def declared_secrets(manifest: Any, config: Mapping[str, Any]) -> set[str]:
    """The variable names one plugin row says hold secrets.

    Its manifest's ``env`` entries marked ``secret``, and the value of every config key
    ending in ``_env`` whose own name looks secret (``api_key_env: MY_KEY`` makes
    ``MY_KEY`` one), at any depth of mappings.
    """
    found = {name for name, var in getattr(manifest, "env", {}).items()
             if getattr(var, "secret", False)}

    def walk(node: Any) -> None:
        if not isinstance(node, Mapping):
            return
        for key, value in node.items():
            if (isinstance(key, str) and key.lower().endswith("_env")
                    and isinstance(value, str) and is_secret(key[:-4])):
                found.add(value)
            walk(value)

    walk(config)
    return found


class EnvPolicy(NamedTuple):
    """One row's environment policy (see the module docstring)."""

    inherit: str = "all"
    ignore_default_excludes: bool = False
    exclude: tuple[str, ...] = ()
    set: Mapping[str, str] = MappingProxyType({})
    include_only: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, *,
                    row_id: str = "shell") -> EnvPolicy:
        """The policy of a validated ``env`` config; a bad value is a ConfigError naming
        the field (never the value: a ``set`` value may be a secret)."""
        config = config or {}
        where = f"row '{row_id}' config.env"
        inherit = config.get("inherit", "all")
        if inherit not in INHERIT:
            raise ConfigError(f"{where}.inherit: expected one of {', '.join(INHERIT)}")
        values = {}
        for name, value in (config.get("set") or {}).items():
            if value is None:  # an unset ``!env`` variable: pass it on only when set
                continue
            if not isinstance(value, str):
                raise ConfigError(f"{where}.set.{name}: expected a string")
            values[name] = value
        return cls(inherit, bool(config.get("ignore_default_excludes", False)),
                   tuple(config.get("exclude", ())), values,
                   tuple(config.get("include_only", ())))

    def build(self, env: Mapping[str, str], declared: Iterable[str] = ()) -> EnvSnapshot:
        """The child's environment from the runtime's ``env``; ``declared`` are the names
        the tree's plugins declare secret. Keeps each name's origin when ``env`` is an
        :class:`~dsh.core.launch.EnvSnapshot` (the sandbox reads it)."""
        declared = frozenset(declared)
        origin = getattr(env, "origin", None)
        if self.inherit == "all":
            names = list(env)
        elif self.inherit == "core":
            names = [name for name in CORE if name in env]
        else:
            names = []
        if not self.ignore_default_excludes:
            names = [n for n in names if not is_secret(n, declared)]
        if self.exclude:
            names = [n for n in names if not _matches(n, self.exclude)]
        values = {name: env[name] for name in names}
        origins = {name: (origin(name) if origin else None) or "environment"
                   for name in names}
        for name, value in self.set.items():
            values[name] = value
            origins[name] = "config"
        if self.include_only:
            values = {k: v for k, v in values.items() if _matches(k, self.include_only)}
        return EnvSnapshot(values, {k: origins[k] for k in values})


def scrubbed(env: Mapping[str, str], declared: Iterable[str] = ()) -> EnvSnapshot:
    """``env`` minus its secrets: the default policy, for helper processes (ripgrep,
    bubblewrap's trial) that need no configuration."""
    return EnvPolicy().build(env, declared)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern.upper()) for pattern in patterns)
