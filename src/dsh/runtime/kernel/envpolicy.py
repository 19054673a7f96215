"""What a child process sees of the runtime's environment: secrets left out by default.

A command the model runs can print its environment (``env``), so whatever the runtime
holds in it (the provider's API key, a database DSN, a token a store row needs) would be
one tool call from the model and from any prompt injection. So every child the runtime
starts for the model (shell commands and jobs, sub-agents, helper binaries) gets the
runtime's environment minus what looks secret, by name or by value:

* **by name** (:func:`is_secret`, case-insensitive): every name containing one of
  :data:`SECRET_WORDS` (``KEY``, ``SECRET``, ``TOKEN``, ``PASS`` (``PASSWORD``,
  ``PASSWD``, ``PASSPHRASE`` ...), ``DSN``, ``CREDENTIAL``, ``AUTH``, ``PRIVATE``,
  ``COOKIE``, ``JWT``, ``WEBHOOK``, ``SESSION``), ending in one of
  :data:`SECRET_SUFFIXES` (``MYSQL_PWD``, ``GH_PAT``; ``PWD`` and ``OLDPWD`` are the
  shell's own), or matching :data:`SECRET_NAMES` (OpenTelemetry's exporter headers, which
  carry tokens). Two judged exceptions: a desktop session's own variables
  (:data:`DESKTOP_SESSION`: ``DBUS_SESSION_BUS_ADDRESS``, ``XDG_SESSION_*`` ...) are not
  sessions of a service, and a ``*PASSWD*`` or ``*ASKPASS*`` name whose value is a file
  path names a passwd file or a password-asking program, not a password;
* every name a loaded plugin declares as secret (:func:`declared_secrets`: its manifest's
  ``EnvVar(secret=True)`` names, and the variables its config names in keys such as
  ``api_key_env``), whatever it is called;
* every ``DSH_*`` name (the runtime's own bootstrap: its home, its runtime, its parent;
  no tool needs one, and a command that knew the home could aim at it);
* **by value** (:func:`secret_value`), whatever the name: a URL with credentials
  (``scheme://user:pass@``), a known token shape (GitHub ``ghp_``/``gho_``/
  ``github_pat_``..., ``sk-``/``sk-ant-`` keys, Slack ``xox[abpr]-``, AWS ``AKIA``/
  ``ASIA`` key ids, GitLab, Google, npm, Hugging Face and Stripe keys), a JWT (three
  base64url parts, the first decoding to JSON with ``alg``) or a PEM private key.

The shell row configures its own (``config.env``, :class:`EnvPolicy`, modelled on Codex's
``shell_environment_policy``): ``inherit`` (``all``, ``core`` or ``none``), then the
default excludes unless ``ignore_default_excludes`` (the three filters above), then
``exclude`` patterns, then ``set`` (values, ``!env NAME`` to pass one on deliberately,
never filtered), then ``include_only``. Patterns are shell globs matched
case-insensitively. MCP stdio servers get only the :data:`CORE` names plus their own
configured ``env`` (whose values are filtered too, unless the server lists the name in
``secret_env``); a sub-agent gets the filters plus its row's ``pass_env``
(:mod:`dsh.runtime.subagents.environment`).
"""

from __future__ import annotations

import base64
import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError
from dsh.core.launch import EnvSnapshot

SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASS", "DSN", "CREDENTIAL", "AUTH", "PRIVATE",
                "COOKIE", "JWT", "WEBHOOK", "SESSION")
"""A name containing one of these is a secret (the one list: shell, jobs, sub-agents)."""
SECRET_SUFFIXES = ("_PWD", "_PAT")
"""A name ending in one of these is a secret (``MYSQL_PWD``, ``GH_PAT``)."""
SECRET_NAMES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_*_HEADERS")
"""Names that are secrets whatever words they hold (patterns)."""
DESKTOP_SESSION = ("DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_*", "DESKTOP_SESSION",
                   "GDMSESSION", "SESSION_MANAGER", "KDE_SESSION_*",
                   "GNOME_DESKTOP_SESSION_ID", "TERM_SESSION_ID", "ITERM_SESSION_ID",
                   "WT_SESSION", "SESSIONNAME")
"""``*SESSION*`` names a desktop, a terminal or Windows sets for programs: not secrets."""
RUNTIME_PREFIX = "DSH_"
"""The runtime's own names, withheld from commands with the secrets."""
DEFAULT_EXCLUDES = (*(f"*{word}*" for word in SECRET_WORDS),
                    *(f"*{suffix}" for suffix in SECRET_SUFFIXES), *SECRET_NAMES,
                    f"{RUNTIME_PREFIX}*")
""":data:`SECRET_WORDS`, the suffixes and names as patterns (the values filter aside)."""
CORE = ("HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP",
        "LANG", "LC_*", "TERM", "TZ")
"""What ``inherit: core`` keeps (patterns): what programs need to run at all, in the
user's language, locale and time zone."""
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


def is_secret(name: str, declared: Iterable[str] = (), value: str | None = None) -> bool:
    """Whether ``name`` looks secret (or is one of ``declared``); ``value``, when given,
    settles a ``*PASSWD*``/``*ASKPASS*`` name holding a file path (see the module)."""
    upper = name.upper()
    if name in declared or upper.endswith(SECRET_SUFFIXES) or _matches(upper, SECRET_NAMES):
        return True
    words = [word for word in SECRET_WORDS if word in upper]
    if "SESSION" in words and _matches(upper, DESKTOP_SESSION):
        words.remove("SESSION")
    if words == ["PASS"] and value is not None and _PASS_PATH.search(upper) \
            and _PATH.fullmatch(value):
        return False
    return bool(words)


def withheld(name: str, value: str, declared: Iterable[str] = ()) -> bool:
    """Whether the default filters keep ``name=value`` from a child: a secret name or
    value, or one of the runtime's own ``DSH_*`` names."""
    return (name.upper().startswith(RUNTIME_PREFIX) or is_secret(name, declared, value)
            or secret_value(value) is not None)


_PASS_PATH = re.compile("PASSWD|ASKPASS")
_PATH = re.compile(r"(?:/|~/|\.{1,2}/|[A-Za-z]:[\\/])[^\n\0:]*")
_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(pattern)) for what, pattern in (
        ("a URL with credentials", r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:[^\s/@]+@"),
        ("a PEM private key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"),
        ("a GitHub token", r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}"
                           r"|github_pat_[A-Za-z0-9_]{20,})"),
        ("a Slack token", r"(?<![A-Za-z0-9])xox[abpr]-[A-Za-z0-9-]{10,}"),
        ("an AWS access key id", r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
        ("a GitLab token", r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}"),
        ("a Google API key", r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"),
        ("an npm token", r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}"),
        ("a Hugging Face token", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
        ("a Stripe key", r"(?<![A-Za-z0-9])[rs]k_live_[A-Za-z0-9]{16,}"),
    ))
_SK = re.compile(r"(?<![A-Za-z0-9_-])sk-(?:ant-|proj-)?([A-Za-z0-9_-]{20,})")
_JWT = re.compile(r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_-]{8,})\.[A-Za-z0-9_-]{4,}"
                  r"\.[A-Za-z0-9_-]*")


def secret_value(value: str) -> str | None:
    """What ``value`` looks like if it looks secret (``a GitHub token``), else None.

    Token shapes are searched anywhere in the value (a header line, a connection string
    carry them inside), each anchored on a boundary so a path or a word that happens to
    contain ``sk-`` is not one: an ``sk-`` key must also mix letters and digits.
    """
    for what, pattern in _TOKENS:
        if pattern.search(value):
            return what
    for match in _SK.finditer(value):
        tail = match.group(1)
        if any(c.isdigit() for c in tail) and any(c.isalpha() for c in tail):
            return "an API key (sk-)"
    for match in _JWT.finditer(value):
        if _jwt_header(match.group(1)):
            return "a JWT"
    return None


def _jwt_header(part: str) -> bool:
    """Whether ``part`` is base64url of a JSON object naming an ``alg`` (a JWT's header)."""
    try:
        decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        header = json.loads(decoded)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and "alg" in header


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
            names = [name for name in env if _matches(name, CORE)]
        else:
            names = []
        if not self.ignore_default_excludes:
            names = [n for n in names if not withheld(n, env[n], declared)]
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
    """``env`` minus its secrets (by name and by value) and ``DSH_*`` names: the default
    policy, for helper processes (ripgrep, bubblewrap's trial) that need no
    configuration."""
    return EnvPolicy().build(env, declared)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern.upper()) for pattern in patterns)
