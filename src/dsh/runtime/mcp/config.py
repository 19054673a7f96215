"""MCP server specs: what the ``mcp-servers`` row and a ``session/new`` ask to connect.

Two sources, one :class:`ServerSpec`:

* the row's ``config.servers`` (:func:`from_row`): ``{name, command, args, env: [NAMES],
  cwd?}`` or ``{name, url, headers: {Header: ENV_NAME}}``; values come from the launch's
  environment snapshot when the server connects, so a profile never holds a secret;
* the ACP shape a client sends (:func:`from_client`): stdio ``{name, command, args,
  env: [{name, value}]}``, http ``{type: "http", name, url, headers: [{name, value}]}``
  with literal values (the client owns them).

Each server also carries its limits (:data:`DEFAULTS`: timeouts, the result cap, its tool
budget) and what happens when it dies (:data:`RESTARTS`): set on the row for all of its
servers, overridden per server; a client's servers get the row's, never their own. The
session-wide budget (:data:`TOTALS`) is the row's alone.

Server names are ``[a-z0-9_-]`` (a client's name is folded to that), because they become
part of tool names ``mcp__<server>__<tool>``. Nothing here does I/O or imports ``mcp``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Container, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
TOOL_NAME_MAX = 64
"""The longest tool name the model routes accept (OpenAI-style ``^[a-zA-Z0-9_-]{1,64}$``)."""

_EMPTY: Mapping[str, str] = MappingProxyType({})

DEFAULTS = {"startup_timeout_s": 8.0, "call_timeout_s": 60.0, "max_result_chars": 50_000,
            "max_tools": 128, "max_schema_bytes": 256 * 1024}
"""Row-level defaults; each server may override them. ``startup_timeout_s`` stays under
agent-core's ``hook_budget_s`` (10 s), which bounds how long a turn waits for a server.
``max_tools`` and ``max_schema_bytes`` bound what one server puts in every model request
(its tools, and their names, descriptions and schemas as JSON): a server listing
thousands would otherwise fill the context window before the conversation starts."""
_INTEGERS = frozenset({"max_result_chars", "max_tools", "max_schema_bytes"})

RESTARTS: Mapping[str, Any] = MappingProxyType(
    {"restart": "never", "max_restarts": 3, "restart_backoff_s": 1.0})
"""What happens when a server dies or fails to start (row-level defaults, per-server
overrides): ``restart: next-turn`` starts it again when the next turn starts; a second
failure in a row waits ``restart_backoff_s`` before its restart, each further one twice as
long (doubling up to :data:`MAX_BACKOFF_S`, or the base if larger); after
``max_restarts`` failed restarts in a row the server is removed for the session."""
RESTART_MODES = ("never", "next-turn")
MAX_BACKOFF_S = 300.0

TOTALS: Mapping[str, int] = MappingProxyType(
    {"max_total_tools": 256, "max_total_schema_bytes": 512 * 1024})
"""The budget of all of a session's servers together (row only)."""

_SERVER_KEYS = frozenset({"name", "command", "args", "env", "cwd", "url", "headers",
                          *DEFAULTS, *RESTARTS})


class ServerSpec(NamedTuple):
    """One server to connect: stdio (``command``) or streamable HTTP (``url``).

    ``env_names`` / ``header_envs`` are read from the environment snapshot at connect time;
    ``env_values`` / ``header_values`` are literal (from a client).
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()
    env_values: Mapping[str, str] = _EMPTY
    cwd: str | None = None
    url: str | None = None
    header_envs: Mapping[str, str] = _EMPTY
    header_values: Mapping[str, str] = _EMPTY
    startup_timeout_s: float = DEFAULTS["startup_timeout_s"]
    call_timeout_s: float = DEFAULTS["call_timeout_s"]
    max_result_chars: int = int(DEFAULTS["max_result_chars"])
    max_tools: int = int(DEFAULTS["max_tools"])
    max_schema_bytes: int = int(DEFAULTS["max_schema_bytes"])
    restart: str = RESTARTS["restart"]
    max_restarts: int = RESTARTS["max_restarts"]
    restart_backoff_s: float = RESTARTS["restart_backoff_s"]

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def resolved_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The child's extra environment; a named variable that is unset is a ValueError."""
        values = {name: _lookup(env, name, f"env {name}") for name in self.env_names}
        return {**values, **self.env_values}

    def resolved_headers(self, env: Mapping[str, str]) -> dict[str, str]:
        """The HTTP headers; a header whose variable is unset is a ValueError."""
        values = {h: _lookup(env, n, f"header {h} (from {n})") for h, n in self.header_envs.items()}
        return {**values, **self.header_values}


def _lookup(env: Mapping[str, str], name: str, what: str) -> str:
    value = env.get(name)
    if not value:
        raise ValueError(f"{what}: environment variable {name} is not set")
    return value


CONFIG_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "servers": {"type": "array", "default": [], "items": {"type": "object"}},
        "startup_timeout_s": {"type": "number", "minimum": 0.1,
                              "default": DEFAULTS["startup_timeout_s"]},
        "call_timeout_s": {"type": "number", "minimum": 0.1,
                           "default": DEFAULTS["call_timeout_s"]},
        "max_result_chars": {"type": "integer", "minimum": 100,
                             "default": DEFAULTS["max_result_chars"]},
        "max_tools": {"type": "integer", "minimum": 1, "default": DEFAULTS["max_tools"]},
        "max_schema_bytes": {"type": "integer", "minimum": 1,
                             "default": DEFAULTS["max_schema_bytes"]},
        "restart": {"type": "string", "enum": list(RESTART_MODES),
                    "default": RESTARTS["restart"]},
        "max_restarts": {"type": "integer", "minimum": 0,
                         "default": RESTARTS["max_restarts"]},
        "restart_backoff_s": {"type": "number", "minimum": 0,
                              "default": RESTARTS["restart_backoff_s"]},
        "max_total_tools": {"type": "integer", "minimum": 1,
                            "default": TOTALS["max_total_tools"]},
        "max_total_schema_bytes": {"type": "integer", "minimum": 1,
                                   "default": TOTALS["max_total_schema_bytes"]},
    },
}
"""The row's ``config``; each server's own shape is checked by :func:`from_row`."""


def from_row(row_id: str, config: Mapping[str, Any]) -> tuple[ServerSpec, ...]:
    """The row's servers; ConfigError naming row and field for anything malformed."""
    specs: list[ServerSpec] = []
    for index, raw in enumerate(config.get("servers", ())):
        where = f"row '{row_id}' config.servers[{index}]"
        spec = _from_row_entry(raw, config, where)
        if any(s.name == spec.name for s in specs):
            raise ConfigError(f"{where}.name: server name '{spec.name}' is used twice")
        specs.append(spec)
    return tuple(specs)


def _from_row_entry(raw: Mapping[str, Any], config: Mapping[str, Any], where: str) -> ServerSpec:
    def fail(at: str, problem: str) -> ConfigError:
        return ConfigError(f"{where}{at}: {problem}")

    for key in raw:
        if key not in _SERVER_KEYS:
            raise fail(f".{key}", "unknown field")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise fail(".name", "expected a name of 1-32 characters a-z, 0-9, '_' or '-'")
    if ("command" in raw) == ("url" in raw):
        raise fail("", "give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
    try:
        limits = _limits(raw, config)
    except ValueError as exc:
        key, problem = exc.args
        raise fail(f".{key}", problem) from None
    if "command" in raw:
        command, args = raw["command"], raw.get("args", [])
        if not isinstance(command, str) or not command:
            raise fail(".command", "expected a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise fail(".args", "expected a list of strings")
        names = raw.get("env", [])
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise fail(".env", "expected a list of environment variable names")
        cwd = raw.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise fail(".cwd", "expected a string")
        if "headers" in raw:
            raise fail(".headers", "only for a 'url' server")
        return ServerSpec(name, command=command, args=tuple(args), env_names=tuple(names),
                          cwd=cwd, **limits)
    url, headers = raw["url"], raw.get("headers", {})
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise fail(".url", "expected an http:// or https:// URL")
    if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in headers.items()):
        raise fail(".headers", "expected a mapping of header name to environment variable name")
    for key in ("args", "env", "cwd"):
        if key in raw:
            raise fail(f".{key}", "only for a 'command' server")
    return ServerSpec(name, url=url, header_envs=dict(headers), **limits)


def from_client(raw: Any, defaults: Mapping[str, Any]) -> tuple[ServerSpec, ...]:
    """Servers a client sent in ``mcpServers`` (ACP shape); ValueError saying what is wrong.

    ``defaults`` are the row's timeouts and cap, which a client cannot change.
    """
    if not isinstance(raw, list):
        raise ValueError('"mcpServers" must be an array')
    limits = _limits({}, defaults)
    specs: list[ServerSpec] = []
    for index, entry in enumerate(raw):
        where = f"mcpServers[{index}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where} must be an object")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}.name must be a non-empty string")
        slug = client_name(name)
        if any(s.name == slug for s in specs):
            raise ValueError(f"{where}.name: server name '{slug}' is used twice")
        kind = entry.get("type", "stdio")
        if kind == "stdio":
            command, args = entry.get("command"), entry.get("args", [])
            if not isinstance(command, str) or not command:
                raise ValueError(f"{where}.command must be a non-empty string")
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValueError(f"{where}.args must be an array of strings")
            env = _pairs(entry.get("env", []), f"{where}.env")
            specs.append(ServerSpec(slug, command=command, args=tuple(args), env_values=env,
                                    **limits))
        elif kind == "http":
            url = entry.get("url")
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"{where}.url must be an http:// or https:// URL")
            headers = _pairs(entry.get("headers", []), f"{where}.headers")
            specs.append(ServerSpec(slug, url=url, header_values=headers, **limits))
        else:
            raise ValueError(f"{where}.type {kind!r} is not supported (stdio or http)")
    return tuple(specs)


def _limits(raw: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """A server's limits and restart policy: its own value, else the row's, else the
    default; ValueError ``(key, problem)`` for a malformed one."""
    def pick(key: str, default: Any) -> Any:
        return raw.get(key, config.get(key, default))

    limits: dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        value = pick(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ValueError(key, "expected a positive number")
        limits[key] = int(value) if key in _INTEGERS else value
    restart = pick("restart", RESTARTS["restart"])
    if restart not in RESTART_MODES:
        raise ValueError("restart", f"expected one of {', '.join(RESTART_MODES)}")
    count = pick("max_restarts", RESTARTS["max_restarts"])
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError("max_restarts", "expected a whole number, 0 or more")
    backoff = pick("restart_backoff_s", RESTARTS["restart_backoff_s"])
    if not isinstance(backoff, (int, float)) or isinstance(backoff, bool) or backoff < 0:
        raise ValueError("restart_backoff_s", "expected a number of seconds, 0 or more")
    return {**limits, "restart": restart, "max_restarts": count,
            "restart_backoff_s": float(backoff)}


def _pairs(raw: Any, where: str) -> dict[str, str]:
    """``[{name, value}]`` → mapping (ACP's env and headers)."""
    if not isinstance(raw, list):
        raise ValueError(f"{where} must be an array of {{name, value}} objects")
    pairs: dict[str, str] = {}
    for item in raw:
        if not (isinstance(item, Mapping) and isinstance(item.get("name"), str)
                and item["name"] and isinstance(item.get("value"), str)):
            raise ValueError(f"{where} must be an array of {{name, value}} strings")
        pairs[item["name"]] = item["value"]
    return pairs


def client_name(name: str) -> str:
    """A client's free-form server name folded to ``[a-z0-9_-]{1,32}`` ("My Files" → my-files)."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.strip().lower()).strip("-_") or "server"
    return slug[:32]


def tool_name(server: str, tool: str, taken: Container[str]) -> str:
    """``mcp__<server>__<tool>`` in the model's charset, at most 64 characters, not in ``taken``.

    Characters outside ``[a-zA-Z0-9_-]`` become ``_``; a name that had to be cut, or that
    collides with one already taken, ends in a checksum of the original tool name.
    """
    base = f"mcp__{server}__{re.sub(r'[^a-zA-Z0-9_-]', '_', tool)}"
    if len(base) <= TOOL_NAME_MAX and base not in taken:
        return base
    suffix = f"_{zlib.crc32(tool.encode('utf-8')):08x}"
    name = base[:TOOL_NAME_MAX - len(suffix)] + suffix
    counter = 1
    while name in taken:
        tail = f"{suffix}{counter}"
        name = base[:TOOL_NAME_MAX - len(tail)] + tail
        counter += 1
    return name
