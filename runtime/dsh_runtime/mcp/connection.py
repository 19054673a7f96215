"""One MCP server's client session, from spawn (or first request) to close.

Each :class:`Connection` runs in one long-lived asyncio task: the ``mcp`` package's
transport and :class:`mcp.ClientSession` are anyio context managers whose cancel scopes
must be left by the task that entered them, so everything is entered, used for
``initialize`` and ``tools/list``, held open and left inside :meth:`Connection._run`.
Tool calls from turns only send requests over the open session.

States: ``starting`` → ``ready`` (tools published) → ``closed`` when asked to stop, or
``failed`` from either (spawn error, garbage on stdout, no answer within
``startup_timeout_s``, the server exiting or the connection dropping). A failure is
handed once to ``report``; its tools vanish with it.

Between the transport and the session sits a relay: it is how the connection notices a
server that exits while idle (the transport's stream ends) and a server that writes
something that is not JSON-RPC (the transport yields an exception), which the session
alone would only log.

``mcp`` is imported inside the task, so loading the plugin costs nothing until a server
actually connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import importlib
import logging
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import IO, Any

from dsh._version import __version__

from dsh_runtime.mcp.config import ServerSpec, tool_name
from dsh_runtime.mcp.tools import McpTool, SchemaError, parameters

_STDERR_TAIL = 300
_CONNECTION_CLOSED = -32000  # mcp_types.CONNECTION_CLOSED, without importing mcp
STDIN_GRACE_S = 0.5
"""Seconds a stdio server has to exit after its stdin closes, before SIGTERM."""
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
        self._protocol_error: BaseException | None = None
        self._session: Any = None
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
        server, and the transport's shutdown (shielded) still stops the process.
        """
        self._stopping = True
        self._wake.set()
        if self.state is State.STARTING and self._task is not None:
            self._task.cancel()

    async def wait_closed(self) -> None:
        """Until the connection's task has ended and its server process is gone."""
        if self._task is not None:
            await asyncio.wait({self._task})

    async def call(self, remote: str, arguments: dict[str, Any]) -> Any:
        """``tools/call`` on the open session, bounded by ``call_timeout_s``."""
        session = self._session
        if self.state is not State.READY or session is None:
            raise ConnectionError(self.failure or f"MCP server '{self.name}' is not connected")
        return await session.call_tool(remote, arguments,
                                       read_timeout_seconds=self.spec.call_timeout_s)

    def describe_call_failure(self, exc: BaseException) -> str:
        """What the model reads when a call raised instead of answering."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        code = getattr(getattr(exc, "error", None), "code", None)
        if isinstance(exc, MCPError) and code == REQUEST_TIMEOUT:
            return (f"MCP server '{self.name}' did not answer within "
                    f"{float(self.spec.call_timeout_s)} s (call_timeout_s)")
        if isinstance(exc, MCPError) and code == CONNECTION_CLOSED:
            return f"MCP server '{self.name}' closed the connection during the call"
        if isinstance(exc, ConnectionError):
            return str(exc)
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
        await load_sdk()
        import anyio
        from mcp import ClientSession
        from mcp_types import Implementation

        # Every failure becomes one report of ours; the SDK's own tracebacks (a garbage
        # line, a dropped stream) would only repeat it on the runtime's stderr.
        logging.getLogger("mcp").setLevel(logging.CRITICAL)

        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(await self._transport(stack, errlog))
            send, relayed = anyio.create_memory_object_stream[Any](0)
            group = await stack.enter_async_context(anyio.create_task_group())
            group.start_soon(self._relay, read, send)
            session = await stack.enter_async_context(ClientSession(
                relayed, write, client_info=Implementation(name="dsh", version=__version__)))
            with anyio.fail_after(self.spec.startup_timeout_s):
                await session.initialize()
                listed = await _list_tools(session)
            self._publish(session, listed)
            await self._wake.wait()
            group.cancel_scope.cancel()
        if self._stopping:
            return None
        if self._protocol_error is not None:
            return "it wrote output that is not MCP JSON-RPC"
        return "the connection closed (the server exited or dropped it)"

    async def _transport(self, stack: contextlib.AsyncExitStack,
                         errlog: IO[bytes] | None) -> Any:
        spec = self.spec
        if spec.transport == "stdio":
            import mcp.client.stdio as stdio
            from mcp.client.stdio import StdioServerParameters, stdio_client

            # The SDK waits 2 s after closing a server's stdin before SIGTERM; a server
            # still importing never reads that EOF, and the runtime must exit within the
            # bound its clients allow (ACP's client kills after 2 s). Well-behaved servers
            # exit on EOF in milliseconds, and SIGTERM still lets the rest clean up.
            stdio.PROCESS_TERMINATION_TIMEOUT = STDIN_GRACE_S

            params = StdioServerParameters(command=spec.command or "", args=list(spec.args),
                                           env=spec.resolved_env(self._env),
                                           cwd=spec.cwd or self._cwd)
            return stdio_client(params, errlog=errlog)  # type: ignore[arg-type]
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = await stack.enter_async_context(httpx2.AsyncClient(
            headers=spec.resolved_headers(self._env),
            timeout=httpx2.Timeout(30.0, read=300.0)))
        return streamable_http_client(spec.url or "", http_client=client)

    async def _relay(self, read: Any, send: Any) -> None:
        """Forward the transport's messages to the session; notice garbage and the end."""
        import anyio

        try:
            async with send:
                async for item in read:
                    if isinstance(item, Exception):
                        self._protocol_error = item
                        break
                    await send.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self._wake.set()

    def _publish(self, session: Any, listed: list[Any]) -> None:
        """Adapt the listed tools (skipping invalid schemas), then become ready."""
        taken: set[str] = set()
        for remote in listed:
            try:
                params = parameters(remote.input_schema)
            except SchemaError as exc:
                self.skipped.append(f"tool '{remote.name}' skipped: {exc}")
                continue
            name = tool_name(self.name, remote.name, taken)
            taken.add(name)
            self.tools[name] = McpTool(name, remote, params, self.name, self.call,
                                       self.spec.max_result_chars, self.describe_call_failure)
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
        leaf = _leaf(exc)
        if self._protocol_error is not None:
            reason = "it wrote output that is not MCP JSON-RPC"
        elif getattr(getattr(leaf, "error", None), "code", None) == _CONNECTION_CLOSED:
            reason = "it exited or closed the connection before answering"
        elif isinstance(leaf, TimeoutError):
            reason = (f"no answer to initialize and tools/list within "
                      f"{float(self.spec.startup_timeout_s)} s (startup_timeout_s)")
        elif isinstance(leaf, FileNotFoundError) and self.spec.transport == "stdio":
            reason = f"command not found: {self.spec.command}"
        elif isinstance(leaf, OSError) and self.spec.transport == "stdio":
            reason = f"could not run {self.spec.command}: {leaf.strerror or leaf}"
        elif isinstance(leaf, ValueError) and "environment variable" in str(leaf):
            reason = str(leaf)
        else:
            reason = _short(leaf)
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


_SDK_MODULES = ("mcp", "mcp.client.stdio", "mcp.client.streamable_http", "httpx2")
_sdk_loaded = threading.Event()
_sdk_lock = threading.Lock()


async def load_sdk() -> None:
    """Import the ``mcp`` package without blocking the event loop.

    It takes seconds (pydantic models of every protocol revision); imported inline it
    would stall every session and protocol frame meanwhile. A daemon thread, not the
    loop's executor, so a runtime exiting mid-import is not held until it finishes.
    """
    if _sdk_loaded.is_set():
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def work() -> None:
        error: BaseException | None = None
        try:
            with _sdk_lock:
                for name in _SDK_MODULES:
                    importlib.import_module(name)
            _sdk_loaded.set()
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed while we imported
            loop.call_soon_threadsafe(_settle, done, error)

    threading.Thread(target=work, name="dsh-mcp-import", daemon=True).start()
    await done


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


async def _list_tools(session: Any) -> list[Any]:
    """Every page of ``tools/list`` (bounded, so a server cannot page forever)."""
    from mcp_types import PaginatedRequestParams

    tools: list[Any] = []
    cursor = None
    for _ in range(_MAX_PAGES):
        params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
        result = await session.list_tools(params=params)
        tools.extend(result.tools)
        cursor = result.next_cursor
        if not cursor:
            break
    return tools


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while inner := getattr(exc, "exceptions", None):
        exc = inner[0]
    return exc


def _short(exc: BaseException) -> str:
    message = getattr(exc, "message", None)  # MCPError's str() is its args tuple
    text = " ".join((message if isinstance(message, str) else str(exc)).split())
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
