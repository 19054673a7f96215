"""The ``mcp-servers`` row: MCP servers' tools as per-session dsh tools.

Each session gets its own connection to every server (the row's, plus any a client gave
``session/new``), named ``mcp__<server>__<tool>``:

* ``session_start`` (hook) starts the session's connections in the background and returns
  at once; hooks are bounded by a 2 s budget, far less than a server may need to start.
* A problem (a server that failed to start or died, a tool skipped for an invalid
  schema) is one ``error`` event on the session, ``source: {kind: mcp, server}``, sent
  the moment it happens through the agent; the session goes on without those tools.
* The ``mcp`` context section, asked at the start of every turn (bounded by agent-core's
  ``hook_budget_s``), waits for the session's servers still starting, so the first turn
  already has their tools. It never adds text to the conversation; a problem found
  before the agent knew the session is reported from here instead (by raising, which the
  agent turns into an ``error`` event).
* ``tools_for`` (the tool source) answers from what the ready connections hold: cheap and
  never blocking. A failed server's tools are gone from the next model request on.
* ``session_end`` stops the session's servers; ``dispose`` stops every server and waits
  for them (bounded), so no server process outlives the runtime.

The published service ``mcp`` adds a client's servers to a session
(:func:`attach_servers`, used by the SDK and ACP servers for ``mcpServers``).
"""

from __future__ import annotations

import asyncio
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
from dsh.runtime.mcp.config import CONFIG_SCHEMA, ServerSpec, from_client, from_row

if TYPE_CHECKING:
    # Imported where a connection is made: a tree without servers never needs it.
    from dsh.runtime.mcp.connection import Connection

DISPOSE_BOUND = 4.5
"""Seconds ``dispose`` waits for servers to stop (under the kernel's 5 s per row)."""

_NO_TOOLS: Mapping[str, Any] = MappingProxyType({})


class McpServerError(PluginError):
    """What the ``mcp`` context section raises to report server failures as one event."""


class _Session:
    """One session's connections and the problems not yet reported to it."""

    __slots__ = ("cwd", "reports", "servers", "session_id")

    def __init__(self, session_id: str, cwd: str) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.servers: dict[str, Connection] = {}
        self.reports: list[str] = []


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
        return {} if record is None else {n: c.state.value for n, c in record.servers.items()}

    # -- extension points --------------------------------------------------------------

    def tools_for(self, session_id: str) -> Mapping[str, Any]:
        """The ready servers' tools for the session (answers from memory, never waits)."""
        record = self._sessions.get(session_id)
        if record is None:
            return _NO_TOOLS
        from dsh.runtime.mcp.connection import State

        tools: dict[str, Any] = {}
        for connection in record.servers.values():
            if connection.state is State.READY:
                tools.update(connection.tools)
        return tools

    def _turn_check(self, request: ContextRequest) -> Any:
        """None when nothing is pending; otherwise the wait-and-report coroutine."""
        record = self._sessions.get(request.session_id)
        if record is None:
            return None
        from dsh.runtime.mcp.connection import State

        starting = [c for c in record.servers.values() if c.state is State.STARTING]
        if not starting and not record.reports:
            return None
        return self._settle(record, starting)

    async def _settle(self, record: _Session, starting: list[Connection]) -> None:
        await asyncio.gather(*(c.wait_settled() for c in starting))
        if record.reports:
            reports, record.reports = record.reports, []
            raise McpServerError("; ".join(reports))

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
        from dsh.runtime.mcp.connection import Connection, State

        def report(connection: Connection, message: str) -> None:
            if connection.state is State.FAILED:
                message += "; its tools are removed"
            data = {"message": message, "source": {"kind": "mcp", "server": connection.name}}
            if not self._emit(record.session_id, data):
                record.reports.append(message)

        for spec in specs:
            connection = Connection(spec, self._env, record.cwd, report)
            record.servers[spec.name] = connection
            connection.start()

    def _emit(self, session_id: str, data: Mapping[str, Any]) -> bool:
        """Report on the session now, through the agent; False when it cannot (yet)."""
        try:
            agent = self._service("agent") if self._service is not None else None
        except PluginError:
            return False
        return bool(agent is not None and agent.emit(session_id, "error", data))

    def _stop(self, record: _Session) -> None:
        for connection in record.servers.values():
            connection.stop()
            self._closing.add(connection)


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
