"""One MCP server's client session, from spawn (or first request) to close.

Each :class:`Connection` runs in one long-lived asyncio task that opens the transport
(:mod:`.stdio` or :mod:`.streamable_http`), runs ``initialize`` and ``tools/list`` through
a :class:`~dsh.runtime.mcp.session.ClientSession`, holds it open and closes it. Tool calls
from turns only send requests over the open session.

States: ``starting`` → ``ready`` (tools published) → ``closed`` when asked to stop, or
``failed`` from either (spawn error, garbage on stdout, no answer within
``startup_timeout_s``, the server exiting or the connection dropping). A failure is
handed once to ``report``; its tools vanish with it.

A server that goes away by itself loses its tools in the same step of the event loop
that notices it (``changed`` is told at once), before any call waiting on it resumes: the
model's next request never offers them. Its failure is said once the process is gone
(with its last stderr line); a call that was waiting on it waits for that too, bounded,
so what the model reads and the ``error`` event both say why, and the event comes first.

Publishing keeps the server within its budget (``max_tools``, ``max_schema_bytes``): the
first tools of its listing that fit, the rest left out and said, naming the setting.
Two of its tools whose model-safe names collide (``a.b`` and ``a_b``) are both offered,
the second under a checksummed name, and that is said as a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from dsh._version import __version__
from dsh.core.errors import (
    ClientClosedError,
    ConnectionClosedError,
    DshError,
    JsonRpcError,
    ProtocolError,
    RequestTimeoutError,
)
from dsh.runtime.mcp.config import ServerSpec, tool_name
from dsh.runtime.mcp.session import ClientSession, Transport
from dsh.runtime.mcp.tools import McpTool, SchemaError, parameters

_STDERR_TAIL = 300
_MAX_PAGES = 50
_LOST_WAIT_S = 3.0
"""How long a call that saw its server go away waits for the failure to be known (the
process stopped, its stderr read): the stop ladder's 0.5 + 1 s and then some."""
HEALTHY_AFTER_S = 60.0
"""A server ready this long (or that answered a call) was healthy: its failure starts a
new count of failures in a row."""

Report = Callable[..., None]
"""``report(connection, message, kind="error", setting=None)``: a problem to say on the
session: ``kind`` the event type (``error`` or ``warning``), ``setting`` the config key
it is about, if any."""


class State(str, enum.Enum):
    """Where a connection is in its life."""

    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


class Connection:
    """Server ``spec`` connected for one session working in ``cwd``.

    ``env`` is the launch's environment snapshot (values of the spec's variable names);
    ``report`` (:data:`Report`) is called once if the server fails or dies, and once for
    each problem with its listing (a tool skipped for an invalid schema, tools left out
    of the budget, a name collision); ``changed(connection)`` whenever its tools change
    (published, or gone with it).
    ``stderr_tail`` adds the end of a stdio server's stderr to failure messages (not for
    ``dsh doctor``, whose output must be stable).
    """

    def __init__(self, spec: ServerSpec, env: Mapping[str, str], cwd: str,
                 report: Report | None = None,
                 *, stderr_tail: bool = True,
                 changed: Callable[[Connection], None] | None = None) -> None:
        self.spec = spec
        self.state = State.STARTING
        self.tools: dict[str, McpTool] = {}
        self.skipped: list[str] = []
        self.listed = 0
        self.failure: str | None = None
        self._reason: str | None = None
        self.ready_at: float | None = None
        self.answered = False
        self._env = env
        self._cwd = cwd
        self._report = report
        self._changed = changed
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

    @property
    def healthy(self) -> bool:
        """Whether this run did its job: it answered a call, or stayed ready a while."""
        return self.answered or (self.ready_at is not None
                                 and time.monotonic() - self.ready_at >= HEALTHY_AFTER_S)

    async def call(self, remote: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``tools/call`` on the open session, bounded by ``call_timeout_s``.

        When the server goes away during the call, waits (bounded) until its failure is
        known and raises :class:`ClientClosedError` saying it, so the model reads why.
        """
        session = self._session
        if self.state is not State.READY or session is None:
            raise ClientClosedError(self.failure or f"MCP server '{self.name}' is not connected")
        try:
            answer = await session.call_tool(remote, arguments, self.spec.call_timeout_s)
        except DshError as exc:
            # Whatever the request failed with, a session that ended under it lost its
            # server: say that, once the failure is known, rather than the symptom.
            if not session.ended.is_set() or self._stopping or self._task is None:
                raise
            await asyncio.wait({self._task}, timeout=_LOST_WAIT_S)
            if self._reason is None:
                raise
            raise ClientClosedError(f"MCP server '{self.name}' stopped during the call: "
                                    f"{self._reason}") from exc
        self.answered = True
        return answer

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
                had_tools, self.tools = bool(self.tools), {}
                if self.state is not State.FAILED:
                    self.state = State.CLOSED
                self._settled.set()
                if had_tools and self._changed is not None:
                    self._changed(self)

    def _lost(self) -> None:
        """The session ended: our stop, or the server going away by itself. In the
        latter case the tools go now, before any call waiting on the server resumes;
        why it went is said once :meth:`_run` has closed it."""
        self._wake.set()
        if self._stopping or self.state is not State.READY:
            return
        self.state = State.FAILED
        self.tools = {}
        if self._changed is not None:
            self._changed(self)

    async def _serve(self, errlog: IO[bytes] | None) -> str | None:
        """Connect, list, publish, hold open; the reason if the server went away by itself."""
        session = ClientSession(self._transport(errlog),
                                {"name": "dsh", "version": __version__}, self._lost)
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
        """Adapt the listed tools (skipping invalid schemas) within the server's budget,
        then become ready and say what was left out or renamed."""
        spec = self.spec
        taken: dict[str, str] = {}  # model-safe name -> the remote name it is for
        renamed: list[str] = []
        room, over = spec.max_schema_bytes, {"max_tools": 0, "max_schema_bytes": 0}
        self.listed = len(listed)
        for index, remote in enumerate(listed):
            if len(self.tools) >= spec.max_tools:
                over["max_tools"] += len(listed) - index
                break
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
            tool = McpTool(name, remote, params, self.name, self.call, spec.max_result_chars,
                           self.describe_call_failure)
            if tool.schema_bytes > room:
                over["max_schema_bytes"] += 1
                continue
            room -= tool.schema_bytes
            plain = tool_name(self.name, remote_name, ())
            if plain != name and plain in taken:
                renamed.append(f"tools '{taken[plain]}' and '{remote_name}' are both "
                               f"'{plain}' as model-safe names; '{remote_name}' is offered "
                               f"as '{name}'")
            taken[name] = remote_name
            self.tools[name] = tool
        self._session = session
        self.state = State.READY
        self.ready_at = time.monotonic()
        self._settled.set()
        if self._changed is not None:
            self._changed(self)
        if self._report is None:
            return
        for problem in self.skipped:
            self._report(self, f"MCP server '{self.name}': {problem}")
        for setting, left in over.items():
            if left:
                self._report(self, self._left_out(setting, left), setting=setting)
        for note in renamed:
            self._report(self, f"MCP server '{self.name}': {note}", kind="warning")

    def _left_out(self, setting: str, left: int) -> str:
        """What a budget setting cost: how many tools, offered how many."""
        limit = getattr(self.spec, setting)
        why = (f"at most {limit} tools are offered per server" if setting == "max_tools"
               else f"the tools offered from one server may take at most {limit} bytes "
                    "of names, descriptions and schemas")
        return (f"MCP server '{self.name}': {left} of its {self.listed} tools left out: "
                f"{why} ({setting} = {limit}); {len(self.tools)} offered")

    def _fail(self, what: str, reason: str) -> None:
        if self._stopping and what == "stopped":
            return
        self.state = State.FAILED
        self._reason = reason
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
