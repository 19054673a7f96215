"""The client side of an MCP session: JSON-RPC requests over a transport, matched by id.

dsh speaks the part of MCP a tool host needs (the ``initialize`` handshake, ``tools/list``
with its cursor, ``tools/call``, cancellation, ``ping``) directly, instead of through the
``mcp`` package: that package imports pydantic models of every protocol revision (seconds
on a cold start) and pulls pydantic-core, cryptography, jsonschema and a second HTTP stack
into the runtime, most of the frozen runtime wheel's size, for four methods. Messages stay
plain dicts; :mod:`dsh.runtime.mcp.tools` reads the fields it uses, defensively.

The JSON-RPC is dsh's one peer (:mod:`dsh.core.jsonrpc`): its message builders, its shape
checks (:func:`~dsh.core.jsonrpc.parse_message`) and its request table
(:class:`~dsh.core.jsonrpc.PendingRequests`), as the SDK client and the servers use them.
A transport (:mod:`.stdio`, :mod:`.streamable_http`) moves whole messages; one reader
task routes answers to their waiting requests, answers the server's own requests
(``ping``; anything else is "method not found", since dsh offers no sampling, roots or
elicitation) and drops notifications. When the transport ends, or yields something that
is not JSON-RPC, every waiting request fails with the reason and :attr:`ended` is set.

Failures are :mod:`dsh.core.errors`: an error answer is :class:`~dsh.core.errors.JsonRpcError`,
a server that breaks the protocol :class:`~dsh.core.errors.ProtocolError`, one that goes
away :class:`~dsh.core.errors.ConnectionClosedError`, no answer in time
:class:`~dsh.core.errors.RequestTimeoutError`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from dsh.core import jsonrpc
from dsh.core.errors import (
    ConnectionClosedError,
    InvalidMessageError,
    ProtocolError,
    RequestTimeoutError,
)

PROTOCOL_VERSION = "2025-11-25"
"""The revision dsh asks for in ``initialize`` (the newest with that handshake)."""
SUPPORTED_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", PROTOCOL_VERSION})
"""Revisions a server may answer with; their tool listing and calling are the same."""


class Transport(Protocol):
    """Moves whole JSON-RPC messages to and from one server."""

    protocol_version: str | None

    async def open(self) -> None:
        """Connect (spawn the process); raises what stops it."""

    async def send(self, message: dict[str, Any]) -> None:
        """Deliver one message; raises :class:`ConnectionClosedError` if the server is
        gone."""

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
        self._pending = jsonrpc.PendingRequests()
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
        self._end(ConnectionClosedError("the session was closed"))
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
        request_id = self._pending.next_id()
        answer = self._pending.register(request_id,
                                        asyncio.get_running_loop().create_future())
        try:
            await self.transport.send(jsonrpc.request(request_id, method, params))
            try:
                return await asyncio.wait_for(asyncio.shield(answer), timeout)
            except asyncio.TimeoutError:
                with contextlib.suppress(Exception):
                    await self.notify("notifications/cancelled", {
                        "requestId": request_id, "reason": f"no answer within {timeout} s"})
                raise RequestTimeoutError(f"no answer to {method} within {timeout} s"
                                          ) from None
        finally:
            self._pending.discard(request_id)
            if not answer.done():
                answer.cancel()

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification (no answer)."""
        await self.transport.send(jsonrpc.notification(method, params))

    # -- the reader task -------------------------------------------------------------------

    async def _read(self) -> None:
        reason: BaseException = ConnectionClosedError(
            "the connection closed (the server exited or dropped it)")
        try:
            async for message in self.transport.messages():
                await self._route(message)
        except (ProtocolError, ConnectionClosedError) as exc:
            reason = exc
        self._end(reason)

    async def _route(self, raw: Any) -> None:
        try:
            message = jsonrpc.parse_message(raw)
        except InvalidMessageError as exc:
            raise ProtocolError(f"a message that is not JSON-RPC 2.0 ({exc.message})") from None
        if isinstance(message, jsonrpc.Response):
            self._pending.resolve(message)  # a late or unknown answer: nobody waits
        elif isinstance(message, jsonrpc.Request):
            await self._answer_server(message)

    async def _answer_server(self, request: jsonrpc.Request) -> None:
        if request.method == "ping":
            reply = jsonrpc.result(request.id, {})
        else:
            reply = jsonrpc.error(request.id, jsonrpc.METHOD_NOT_FOUND,
                                  f"dsh does not offer {request.method}")
        with contextlib.suppress(ConnectionClosedError):
            await self.transport.send(reply)

    def _end(self, reason: BaseException) -> None:
        if self.ended.is_set():
            return
        self.failure = reason
        self._pending.fail_all(reason)
        self.ended.set()
        if self._on_end is not None:
            self._on_end()
