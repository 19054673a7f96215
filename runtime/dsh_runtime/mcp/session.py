"""The client side of an MCP session: JSON-RPC requests over a transport, matched by id.

dsh speaks the part of MCP a tool host needs (the ``initialize`` handshake, ``tools/list``
with its cursor, ``tools/call``, cancellation, ``ping``) directly, instead of through the
``mcp`` package: that package imports pydantic models of every protocol revision (seconds
on a cold start) and pulls pydantic-core, cryptography, jsonschema and a second HTTP stack
into the runtime, most of the frozen runtime wheel's size, for four methods. Messages stay
plain dicts; :mod:`dsh_runtime.mcp.tools` reads the fields it uses, defensively.

A transport (:mod:`.stdio`, :mod:`.streamable_http`) moves whole messages; one reader
task routes answers to their waiting requests, answers the server's own requests
(``ping``; anything else is "method not found", since dsh offers no sampling, roots or
elicitation) and drops notifications. When the transport ends, or yields something that
is not JSON-RPC, every waiting request fails with the reason and :attr:`ended` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

PROTOCOL_VERSION = "2025-11-25"
"""The revision dsh asks for in ``initialize`` (the newest with that handshake)."""
SUPPORTED_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", PROTOCOL_VERSION})
"""Revisions a server may answer with; their tool listing and calling are the same."""

METHOD_NOT_FOUND = -32601


class McpError(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConnectionClosed(ConnectionError):
    """The server exited or dropped the connection before answering."""


class ProtocolError(Exception):
    """The server sent something that is not an MCP JSON-RPC message."""


class RequestTimeout(TimeoutError):
    """No answer within the request's time bound (the request was cancelled)."""


class Transport(Protocol):
    """Moves whole JSON-RPC messages to and from one server."""

    protocol_version: str | None

    async def open(self) -> None:
        """Connect (spawn the process); raises what stops it."""

    async def send(self, message: dict[str, Any]) -> None:
        """Deliver one message; raises :class:`ConnectionClosed` if the server is gone."""

    def messages(self) -> AsyncIterator[dict[str, Any]]:
        """The server's messages until it goes away; :class:`ProtocolError` on garbage."""

    async def close(self) -> None:
        """Disconnect and release everything (the process is stopped); idempotent."""


class ClientSession:
    """Requests and answers over ``transport``; ``on_end`` is called once when it ends."""

    def __init__(self, transport: Transport, client_info: dict[str, str],
                 on_end: Callable[[], None] | None = None) -> None:
        self.transport = transport
        self.failure: BaseException | None = None
        self.ended = asyncio.Event()
        self._client_info = client_info
        self._on_end = on_end
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin reading the server's messages (the transport is open)."""
        self._reader = asyncio.create_task(self._read(), name="dsh-mcp-reader")

    async def close(self) -> None:
        """Stop reading and close the transport; waiting requests fail."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._end(ConnectionClosed("the session was closed"))
        await self.transport.close()

    async def initialize(self) -> dict[str, Any]:
        """The handshake: ``initialize``, a version both sides speak, ``initialized``."""
        result = await self.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": self._client_info,
        })
        if not isinstance(result, dict):
            raise ProtocolError("initialize answered with a non-object result")
        version = result.get("protocolVersion")
        if version not in SUPPORTED_VERSIONS:
            raise ProtocolError(f"the server speaks MCP {version!r}, dsh speaks "
                                f"{', '.join(sorted(SUPPORTED_VERSIONS))}")
        self.transport.protocol_version = version
        await self.notify("notifications/initialized")
        return result

    async def list_tools(self, max_pages: int) -> list[Any]:
        """Every page of ``tools/list``, at most ``max_pages`` (a server cannot page forever)."""
        tools: list[Any] = []
        cursor = None
        for _ in range(max_pages):
            result = await self.request("tools/list", {} if cursor is None else {"cursor": cursor})
            page = result.get("tools") if isinstance(result, dict) else None
            if not isinstance(page, list):
                raise ProtocolError("tools/list answered without a list of tools")
            tools.extend(page)
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        timeout: float | None) -> dict[str, Any]:
        """``tools/call``; the result object (``content``, ``isError``...)."""
        result = await self.request("tools/call", {"name": name, "arguments": arguments},
                                    timeout=timeout)
        if not isinstance(result, dict):
            raise ProtocolError("tools/call answered with a non-object result")
        return result

    async def request(self, method: str, params: dict[str, Any],
                      timeout: float | None = None) -> Any:
        """Send a request and wait for its answer; on timeout the server is told to stop."""
        if self.failure is not None:
            raise self.failure
        request_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answer
        try:
            await self.transport.send({"jsonrpc": "2.0", "id": request_id, "method": method,
                                       "params": params})
            try:
                return await asyncio.wait_for(asyncio.shield(answer), timeout)
            except asyncio.TimeoutError:
                with contextlib.suppress(Exception):
                    await self.notify("notifications/cancelled", {
                        "requestId": request_id, "reason": f"no answer within {timeout} s"})
                raise RequestTimeout(timeout) from None
        finally:
            self._pending.pop(request_id, None)
            if not answer.done():
                answer.cancel()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification (no answer)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.transport.send(message)

    # -- the reader task -------------------------------------------------------------------

    async def _read(self) -> None:
        reason: BaseException = ConnectionClosed(
            "the connection closed (the server exited or dropped it)")
        try:
            async for message in self.transport.messages():
                await self._route(message)
        except (ProtocolError, ConnectionClosed) as exc:
            reason = exc
        self._end(reason)

    async def _route(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise ProtocolError("a message that is not JSON-RPC 2.0")
        method = message.get("method")
        if method is None:
            answer = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if answer is None or answer.done():
                return  # late (timed out or cancelled) or unknown: nobody waits
            error = message.get("error")
            if isinstance(error, dict):
                answer.set_exception(McpError(error.get("code"), str(error.get("message", ""))))
            elif "result" in message:
                answer.set_result(message["result"])
            else:
                raise ProtocolError("an answer with neither result nor error")
        elif "id" in message:
            await self._answer_server(message)

    async def _answer_server(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if message["method"] == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": METHOD_NOT_FOUND,
                              "message": f"dsh does not offer {message['method']}"}
        with contextlib.suppress(ConnectionClosed):
            await self.transport.send(reply)

    def _end(self, reason: BaseException) -> None:
        if self.ended.is_set():
            return
        self.failure = reason
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(reason)
        self.ended.set()
        if self._on_end is not None:
            self._on_end()
