"""One MCP server's client session, from spawn (or first request) to close.

Each :class:`Connection` runs in one long-lived asyncio task that opens the transport
(:mod:`.stdio` or :mod:`.streamable_http`), runs ``initialize`` and ``tools/list`` through
a :class:`~dsh.runtime.mcp.session.ClientSession`, holds it open and closes it. Tool calls
from turns only send requests over the open session.

States: ``starting`` → ``ready`` (tools published) → ``closed`` when asked to stop, or
``failed`` from either (spawn error, garbage on stdout, no answer within
``startup_timeout_s``, the server exiting or the connection dropping). A failure is
handed once to ``report``; its tools vanish with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import tempfile
from collections.abc import Callable, Mapping
from typing import IO, Any
from urllib.parse import urlsplit

from dsh._version import __version__
from dsh.core.errors import (
    ClientClosedError,
    ConnectionClosedError,
    JsonRpcError,
    ProtocolError,
    RequestTimeoutError,
)
from dsh.runtime.mcp.config import ServerSpec, tool_name
from dsh.runtime.mcp.session import ClientSession, Transport
from dsh.runtime.mcp.tools import McpTool, SchemaError, parameters

_STDERR_TAIL = 300
_MAX_PAGES = 50


class State(str, enum.Enum):
    """Where a connection is in its life."""

    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


class Connection:
    """Server ``spec`` connected for one session working in ``cwd``.

    ``env`` is the launch's environment snapshot (values of the spec's variable names);
    ``report(connection, message)`` is called once if the server fails or dies, and once
    for each tool skipped for an invalid schema.
    ``stderr_tail`` adds the end of a stdio server's stderr to failure messages (not for
    ``dsh doctor``, whose output must be stable).
    """

    def __init__(self, spec: ServerSpec, env: Mapping[str, str], cwd: str,
                 report: Callable[[Connection, str], None] | None = None,
                 *, stderr_tail: bool = True) -> None:
        self.spec = spec
        self.state = State.STARTING
        self.tools: dict[str, McpTool] = {}
        self.skipped: list[str] = []
        self.failure: str | None = None
        self._env = env
        self._cwd = cwd
        self._report = report
        self._stderr_tail = stderr_tail
        self._settled = asyncio.Event()
        self._wake = asyncio.Event()
        self._stopping = False
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """The server's name (the ``<server>`` of its tool names)."""
        return self.spec.name

    def start(self) -> None:
        """Begin connecting in the background; :meth:`wait_settled` waits for the outcome."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"dsh-mcp-{self.name}")

    async def wait_settled(self) -> None:
        """Until the server is ready or has failed (each bounded by ``startup_timeout_s``)."""
        await self._settled.wait()

    def stop(self) -> None:
        """Ask the connection to close (the server process is stopped); returns at once.

        A connection still starting is cancelled: its startup may be waiting out a hung
        server, and the session's close (shielded) still stops the process.
        """
        self._stopping = True
        self._wake.set()
        if self.state is State.STARTING and self._task is not None:
            self._task.cancel()

    async def wait_closed(self) -> None:
        """Until the connection's task has ended and its server process is gone."""
        if self._task is not None:
            await asyncio.wait({self._task})

    async def call(self, remote: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``tools/call`` on the open session, bounded by ``call_timeout_s``."""
        session = self._session
        if self.state is not State.READY or session is None:
            raise ClientClosedError(self.failure or f"MCP server '{self.name}' is not connected")
        return await session.call_tool(remote, arguments, self.spec.call_timeout_s)

    def facts(self) -> dict[str, Any]:
        """What a call's result reports of this server: its transport (``pipe`` for
        stdio, ``tcp`` for HTTP, as OpenTelemetry's MCP conventions name them), the
        protocol version it agreed to, and an HTTP server's address."""
        stdio = self.spec.transport == "stdio"
        facts: dict[str, Any] = {"network.transport": "pipe" if stdio else "tcp"}
        version = getattr(self._session.transport, "protocol_version", None) \
            if self._session is not None else None
        if isinstance(version, str):
            facts["mcp.protocol.version"] = version
        if not stdio and self.spec.url:
            where = urlsplit(self.spec.url)
            if where.hostname:
                facts["server.address"] = where.hostname
                facts["server.port"] = where.port or (443 if where.scheme == "https" else 80)
        return facts

    def describe_call_failure(self, exc: BaseException) -> str:
        """What the model reads when a call raised instead of answering."""
        if isinstance(exc, RequestTimeoutError):
            return (f"MCP server '{self.name}' did not answer within "
                    f"{float(self.spec.call_timeout_s)} s (call_timeout_s)")
        if isinstance(exc, ConnectionClosedError):
            return f"MCP server '{self.name}' closed the connection during the call"
        if isinstance(exc, ClientClosedError):
            return str(exc)
        if isinstance(exc, JsonRpcError):
            return f"MCP server '{self.name}' call failed: {exc.message} (code {exc.code})"
        return f"MCP server '{self.name}' call failed: {type(exc).__name__}: {exc}"

    # -- the connection's task ------------------------------------------------------------

    async def _run(self) -> None:
        with contextlib.ExitStack() as files:
            # A stdio server's stderr goes to a file: its last line explains a failure.
            errlog = (files.enter_context(tempfile.TemporaryFile())
                      if self.spec.transport == "stdio" else None)
            try:
                lost = await self._serve(errlog)
            except Exception as exc:
                self._fail("failed to start" if self.state is State.STARTING else "stopped",
                           self._explain(exc, errlog))
            else:
                if lost is not None:
                    self._fail("stopped", lost + self._tail(errlog))
            finally:
                self._session = None
                self.tools = {}
                if self.state is not State.FAILED:
                    self.state = State.CLOSED
                self._settled.set()

    async def _serve(self, errlog: IO[bytes] | None) -> str | None:
        """Connect, list, publish, hold open; the reason if the server went away by itself."""
        session = ClientSession(self._transport(errlog),
                                {"name": "dsh", "version": __version__}, self._wake.set)
        try:
            await asyncio.wait_for(self._handshake(session), self.spec.startup_timeout_s)
            await self._wake.wait()
        finally:
            # Shielded: a second stop() while starting must not leave the process running.
            await asyncio.shield(session.close())
        if self._stopping:
            return None
        if isinstance(session.failure, ProtocolError):
            return "it wrote output that is not MCP JSON-RPC"
        return "the connection closed (the server exited or dropped it)"

    async def _handshake(self, session: ClientSession) -> None:
        await session.open()
        await session.initialize()
        listed = await session.list_tools(_MAX_PAGES)
        self._publish(session, listed)

    def _transport(self, errlog: IO[bytes] | None) -> Transport:
        spec = self.spec
        if spec.transport == "stdio":
            from dsh.runtime.mcp.stdio import StdioTransport

            return StdioTransport(spec.command or "", list(spec.args),
                                  spec.resolved_env(self._env), spec.cwd or self._cwd, errlog)
        from dsh.runtime.mcp.streamable_http import StreamableHttpTransport

        return StreamableHttpTransport(spec.url or "", spec.resolved_headers(self._env))

    def _publish(self, session: ClientSession, listed: list[Any]) -> None:
        """Adapt the listed tools (skipping invalid schemas), then become ready."""
        taken: set[str] = set()
        for remote in listed:
            remote_name = remote.get("name") if isinstance(remote, dict) else None
            if not isinstance(remote_name, str) or not remote_name:
                self.skipped.append("a listed tool without a name was skipped")
                continue
            try:
                params = parameters(remote.get("inputSchema"))
            except SchemaError as exc:
                self.skipped.append(f"tool '{remote_name}' skipped: {exc}")
                continue
            name = tool_name(self.name, remote_name, taken)
            taken.add(name)
            self.tools[name] = McpTool(name, remote, params, self.name, self.call,
                                       self.spec.max_result_chars, self.describe_call_failure,
                                       self.facts)
        self._session = session
        self.state = State.READY
        self._settled.set()
        if self._report is not None:
            for problem in self.skipped:
                self._report(self, f"MCP server '{self.name}': {problem}")

    def _fail(self, what: str, reason: str) -> None:
        if self._stopping and what == "stopped":
            return
        self.state = State.FAILED
        self.failure = f"MCP server '{self.name}' {what}: {reason}"
        if self._report is not None:
            self._report(self, self.failure)

    def _explain(self, exc: BaseException, errlog: IO[bytes] | None) -> str:
        if isinstance(exc, JsonRpcError):  # an error answer (a ProtocolError too: first)
            reason = f"{exc.message} (code {exc.code})"
        elif isinstance(exc, ProtocolError):
            reason = "it wrote output that is not MCP JSON-RPC"
            if "speaks MCP" in str(exc):
                reason = str(exc)
        elif isinstance(exc, ConnectionClosedError):
            reason = "it exited or closed the connection before answering"
        elif isinstance(exc, asyncio.TimeoutError):
            reason = (f"no answer to initialize and tools/list within "
                      f"{float(self.spec.startup_timeout_s)} s (startup_timeout_s)")
        elif isinstance(exc, FileNotFoundError) and self.spec.transport == "stdio":
            reason = f"command not found: {self.spec.command}"
        elif isinstance(exc, OSError) and self.spec.transport == "stdio":
            reason = f"could not run {self.spec.command}: {exc.strerror or exc}"
        elif isinstance(exc, ValueError) and "environment variable" in str(exc):
            reason = str(exc)
        else:
            reason = _short(exc)
        return reason + self._tail(errlog)

    def _tail(self, errlog: IO[bytes] | None) -> str:
        """``; stderr: <last line>`` of a stdio server, bounded; empty when there is none."""
        if errlog is None or not self._stderr_tail:
            return ""
        try:
            errlog.seek(0, 2)
            size = errlog.tell()
            errlog.seek(max(size - 4096, 0))
            lines = errlog.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return f"; stderr: {lines[-1][-_STDERR_TAIL:]}" if lines else ""


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


async def probe(spec: ServerSpec, env: Mapping[str, str], cwd: str) -> tuple[bool, str]:
    """Connect, initialize, list tools, close: ``(ok, message)`` for ``dsh doctor --live``."""
    connection = Connection(spec, env, cwd, stderr_tail=False)
    connection.start()
    try:
        await connection.wait_settled()
        if connection.state is not State.READY:
            return False, connection.failure or "failed"
        skipped = f", {len(connection.skipped)} skipped" if connection.skipped else ""
        return True, f"reachable over {spec.transport}: {len(connection.tools)} tools{skipped}"
    finally:
        connection.stop()
        await connection.wait_closed()
