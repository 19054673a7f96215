"""The ``mcp-servers`` row: MCP servers' tools as per-session dsh tools.

Each session gets its own connection to every server (the row's, plus any a client gave
``session/new``), named ``mcp__<server>__<tool>``:

* ``session_start`` (hook) starts the session's connections in the background and returns
  at once; hooks are bounded by a 2 s budget, far less than a server may need to start.
* ``tools_for`` (the tool source) answers a mapping made when a server's tools last
  changed (:mod:`.offer`: the session's budget, names made unique): cheap and never
  blocking. A server that goes away takes its tools at once, so even the next model
  request of the same turn no longer offers them.
* A problem (a server that failed to start or died, a tool skipped for an invalid schema,
  tools left out of a budget) is one ``error`` event on the session, a name collision one
  ``warning``, each with ``source: {kind: mcp, server}`` (and ``setting`` when a setting
  decided it). It is said inside a turn, so a client's run collects it: at once while a
  turn runs, otherwise when the next turn starts.
* The ``mcp`` context section, asked at the start of every turn (bounded by agent-core's
  ``hook_budget_s``), restarts the servers whose restart is due (``restart: next-turn``,
  backed off, at most ``max_restarts`` failures in a row, then removed for the session,
  which is said), waits for the session's servers still starting, so the turn already has
  their tools, and says what was held. It never adds text to the conversation.
* ``session_end`` stops the session's servers; ``dispose`` stops every server and waits
  for them (bounded), so no server process outlives the runtime.

The published service ``mcp`` adds a client's servers to a session
(:func:`attach_servers`, used by the SDK and ACP servers for ``mcpServers``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dsh._version import __version__
from dsh.core.errors import InvalidArgumentError, PluginError
from dsh.runtime.kernel.plugin import (
    Capability,
    Checkup,
    ContextRequest,
    Diagnosis,
    Manifest,
    Plugin,
    Registrar,
)
from dsh.runtime.mcp.config import (
    CONFIG_SCHEMA,
    MAX_BACKOFF_S,
    TOTALS,
    ServerSpec,
    from_client,
    from_row,
)

if TYPE_CHECKING:
    # Imported where a connection is made: a tree without servers never needs it.
    from dsh.runtime.mcp.connection import Connection

DISPOSE_BOUND = 4.5
"""Seconds ``dispose`` waits for servers to stop (under the kernel's 5 s per row)."""

_NO_TOOLS: Mapping[str, Any] = MappingProxyType({})


class McpServerError(PluginError):
    """What the ``mcp`` context section raises when it cannot say problems as events."""


class _Server:
    """One server of one session: its connection now, and its failures in a row."""

    __slots__ = ("connection", "due", "failures", "removed", "spec")

    def __init__(self, spec: ServerSpec, connection: Connection) -> None:
        self.spec = spec
        self.connection = connection
        self.failures = 0
        self.due = 0.0
        self.removed = False

    def failed(self, now: float) -> str:
        """Count a failure of the connection; what happens next, for the report."""
        spec = self.spec
        if self.connection.healthy:
            self.failures = 0
        self.failures += 1
        if spec.restart == "never":
            return "its tools are removed"
        if self.failures > spec.max_restarts:
            self.removed = True
            times = "once" if self.failures == 1 else f"{self.failures} times in a row"
            return (f"its tools are removed for the rest of the session: it failed {times} "
                    f"and is not restarted again (max_restarts = {spec.max_restarts})")
        base = spec.restart_backoff_s
        delay = 0.0 if self.failures == 1 else min(base * 2 ** (self.failures - 2),
                                                   max(base, MAX_BACKOFF_S))
        self.due = now + delay
        attempt = f"restart {self.failures} of {spec.max_restarts}"
        if not delay:
            return f"its tools are removed; it restarts when the next turn starts ({attempt})"
        return (f"its tools are removed; backing off, it restarts when a turn starts "
                f"{delay:g} s from now or later ({attempt}, restart_backoff_s = "
                f"{spec.restart_backoff_s:g})")

    def restart_due(self, now: float) -> bool:
        """Whether the next turn's start should start it again."""
        from dsh.runtime.mcp.connection import State

        return (self.spec.restart == "next-turn" and not self.removed
                and self.connection.state is State.FAILED and now >= self.due)


class _Session:
    """One session's servers, what they offer, and what waits to be said in a turn."""

    __slots__ = ("cwd", "held", "offered", "said", "servers", "session_id")

    def __init__(self, session_id: str, cwd: str) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.servers: dict[str, _Server] = {}
        self.offered: Mapping[str, Any] = _NO_TOOLS
        self.said: set[str] = set()  # the session-wide notices already said
        self.held: list[tuple[str, dict[str, Any]]] = []  # (event type, data)


class McpServers(Plugin):
    """Connects MCP servers per session and offers their tools (see the module doc)."""

    manifest = Manifest(
        id="mcp-servers",
        version=__version__,
        capabilities=frozenset({Capability.TOOL, Capability.PROMPT, Capability.LIFECYCLE,
                                Capability.SERVICE}),
        description="MCP servers' tools as mcp__<server>__<tool>, connected per session.",
        config_schema=CONFIG_SCHEMA,
        provides=("mcp",),
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._specs: tuple[ServerSpec, ...] = ()
        self._sessions: dict[str, _Session] = {}
        self._closing: set[Connection] = set()
        self._env: Mapping[str, str] = {}
        self._cwd = ""
        self._service: Callable[[str], Any] | None = None

    def apply(self, reg: Registrar) -> None:
        """Check the servers' config (ConfigError names the field); register the points."""
        self._specs = from_row(self.row_id, self.config)
        reg.tool_source("mcp", self.tools_for)
        reg.context("mcp", self._turn_check)
        reg.hook("session_start", "mcp-connect", self._session_start)
        reg.hook("session_end", "mcp-disconnect", self._session_end)

    async def start(self, rt: Any) -> None:
        """Remember the environment snapshot (server env and header values) and publish."""
        self._env = rt.env
        self._cwd = rt.cwd
        self._service = rt.service
        rt.publish("mcp", self)

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``--live``: connect to every server the row configures, bounded.

        Each server is started, initialized and asked for its tools, then closed, exactly
        as a session would (the same connection code), so "reachable" here means a session
        will get its tools: ``mcp.<row>.<server>``, or ``mcp.<row>`` for the row itself.
        """
        if not checkup.live:
            return []
        from dsh.core.errors import DshError
        from dsh.runtime.kernel.schema import validate
        from dsh.runtime.mcp.connection import probe

        try:
            specs = from_row(row_id, validate(CONFIG_SCHEMA, config, row_id=row_id))
        except DshError as exc:
            return [Diagnosis(f"mcp.{row_id}", "fail", str(exc))]
        if not specs:
            return [Diagnosis(f"mcp.{row_id}", "ok", "no servers configured")]
        found = []
        for spec in specs:
            ok, message = asyncio.run(probe(spec, checkup.env, checkup.cwd))
            found.append(Diagnosis(f"mcp.{row_id}.{spec.name}", "ok" if ok else "fail",
                                   message))
        return found

    async def dispose(self) -> None:
        """Stop every server of every session and wait for them, bounded."""
        for record in self._sessions.values():
            self._stop(record)
        self._sessions.clear()
        waits = [asyncio.ensure_future(c.wait_closed()) for c in self._closing]
        if waits:
            _, late = await asyncio.wait(waits, timeout=DISPOSE_BOUND)
            for task in late:
                task.cancel()
        self._closing.clear()

    # -- the service -------------------------------------------------------------------

    def client_servers(self, raw: Any) -> tuple[ServerSpec, ...]:
        """A client's ``mcpServers`` checked (InvalidArgumentError saying what is wrong)."""
        try:
            specs = from_client(raw, self.config)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        configured = {s.name for s in self._specs}
        for spec in specs:
            if spec.name in configured:
                raise InvalidArgumentError(f"mcpServers: server name '{spec.name}' is "
                                           "already configured by the profile")
        return specs

    def add_session_servers(self, session_id: str, specs: tuple[ServerSpec, ...],
                            cwd: str | None = None) -> None:
        """Connect ``specs`` for ``session_id`` too; a name already connected is kept."""
        record = self._sessions.setdefault(session_id,
                                           _Session(session_id, cwd or self._cwd))
        self._connect(record, [s for s in specs if s.name not in record.servers])

    def servers(self, session_id: str) -> dict[str, str]:
        """Each server of the session and its state (``starting``, ``ready``, ...)."""
        record = self._sessions.get(session_id)
        return {} if record is None else {n: s.connection.state.value
                                          for n, s in record.servers.items()}

    # -- extension points --------------------------------------------------------------

    def tools_for(self, session_id: str) -> Mapping[str, Any]:
        """The session's offered tools (made when they last changed; never waits)."""
        record = self._sessions.get(session_id)
        return _NO_TOOLS if record is None else record.offered

    def _turn_check(self, request: ContextRequest) -> Any:
        """None when nothing is to do; otherwise the restart-wait-and-say coroutine."""
        record = self._sessions.get(request.session_id)
        if record is None:
            return None
        from dsh.runtime.mcp.connection import State

        now = time.monotonic()
        for server in record.servers.values():
            if server.restart_due(now):
                server.connection = self._start(record, server.spec)
        starting = [s.connection for s in record.servers.values()
                    if s.connection.state is State.STARTING]
        if not starting and not record.held:
            return None
        return self._settle(record, starting)

    async def _settle(self, record: _Session, starting: list[Connection]) -> None:
        await asyncio.gather(*(c.wait_settled() for c in starting))
        held, record.held = record.held, []
        unsaid = [data["message"] for kind, data in held
                  if not self._emit(record.session_id, kind, data)]
        if unsaid:
            raise McpServerError("; ".join(unsaid))

    async def _session_start(self, event: Any) -> None:
        if not self._specs or event.session_id is None:
            return
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        record = self._sessions.setdefault(event.session_id,
                                           _Session(event.session_id,
                                                    str(payload.get("cwd") or self._cwd)))
        self._connect(record, [s for s in self._specs if s.name not in record.servers])

    async def _session_end(self, event: Any) -> None:
        record = self._sessions.pop(event.session_id or "", None)
        if record is not None:
            self._stop(record)

    # -- internals ---------------------------------------------------------------------

    def _connect(self, record: _Session, specs: list[ServerSpec]) -> None:
        for spec in specs:
            record.servers[spec.name] = _Server(spec, self._start(record, spec))

    def _start(self, record: _Session, spec: ServerSpec) -> Connection:
        """A started connection of ``spec`` reporting to ``record``."""
        from dsh.runtime.mcp.connection import Connection, State

        def report(connection: Connection, message: str, kind: str = "error",
                   setting: str | None = None) -> None:
            server = record.servers.get(connection.name)
            if (connection.state is State.FAILED and server is not None
                    and server.connection is connection):
                message = f"{message}; {server.failed(time.monotonic())}"
            self._say(record, kind, connection.name, message, setting)

        connection = Connection(spec, self._env, record.cwd, report,
                                changed=lambda _: self._refresh(record))
        connection.start()
        return connection

    def _refresh(self, record: _Session) -> None:
        """Make the session's offer again from its ready servers; say what is new."""
        from dsh.runtime.mcp.connection import State
        from dsh.runtime.mcp.offer import offer

        made = offer(((name, s.connection.tools) for name, s in record.servers.items()
                      if s.connection.state is State.READY),
                     max_tools=int(self.config.get("max_total_tools",
                                                   TOTALS["max_total_tools"])),
                     max_bytes=int(self.config.get("max_total_schema_bytes",
                                                   TOTALS["max_total_schema_bytes"])))
        record.offered = MappingProxyType(dict(made.tools))
        for notice in made.notices:
            if notice.message not in record.said:
                record.said.add(notice.message)
                self._say(record, notice.kind, notice.server, notice.message, notice.setting)

    def _say(self, record: _Session, kind: str, server: str, message: str,
             setting: str | None) -> None:
        """One event on the session now if a turn runs, else when the next one starts."""
        data: dict[str, Any] = {"message": message, "source": {"kind": "mcp", "server": server}}
        if setting is not None:
            data["setting"] = setting
        if not self._emit(record.session_id, kind, data):
            record.held.append((kind, data))

    def _emit(self, session_id: str, kind: str, data: Mapping[str, Any]) -> bool:
        """Say it on the session's running turn, through the agent; False when none runs."""
        try:
            agent = self._service("agent") if self._service is not None else None
        except PluginError:
            return False
        return bool(agent is not None and agent.emit(session_id, kind, data, in_turn=True))

    def _stop(self, record: _Session) -> None:
        for server in record.servers.values():
            server.connection.stop()
            self._closing.add(server.connection)


def attach_servers(service: Callable[[str], Any], raw: Any) -> Callable[[str, str], None] | None:
    """Check a ``session/new``'s ``mcpServers`` before the session exists.

    Returns ``attach(session_id, cwd)`` to call once it does, or None when there are no
    servers. InvalidArgumentError when they are malformed or no ``mcp-servers`` row runs.
    """
    if raw is None or raw == []:
        return None
    try:
        mcp = service("mcp")
    except PluginError:
        raise InvalidArgumentError('"mcpServers" needs an mcp-servers row in the profile, '
                                   "and none is running") from None
    specs = mcp.client_servers(raw)
    return lambda session_id, cwd: mcp.add_session_servers(session_id, specs, cwd)
