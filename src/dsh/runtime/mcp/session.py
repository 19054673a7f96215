"""The client side of an MCP session: dsh's one JSON-RPC peer over an MCP transport.

dsh speaks the part of MCP a tool host needs (the ``initialize`` handshake, ``tools/list``
with its cursor, ``tools/call``, cancellation, ``ping``) directly, instead of through the
``mcp`` package: that package imports pydantic models of every protocol revision (seconds
on a cold start) and pulls pydantic-core, cryptography, jsonschema and a second HTTP stack
into the runtime, most of the frozen runtime wheel's size, for four methods. Messages stay
plain dicts; :mod:`dsh.runtime.mcp.tools` reads the fields it uses, defensively.

The JSON-RPC is :class:`dsh.core.peer.Peer`, as for the SDK client and the servers:
strict (a line that is not JSON-RPC ends the session), with MCP's cancellation
(``notifications/cancelled {requestId, reason}`` to the server when a request times out
or is cancelled). A transport (:mod:`.stdio`, :mod:`.streamable_http`) moves whole
messages. The server's own requests are answered (``ping``; anything else is "method not
found", since dsh offers no sampling, roots or elicitation) and its notifications
dropped. When the transport ends, or yields something that is not JSON-RPC, every
waiting request fails with the reason and :attr:`ClientSession.ended` is set.

Failures are :mod:`dsh.core.errors`: an error answer is :class:`~dsh.core.errors.JsonRpcError`,
a server that breaks the protocol :class:`~dsh.core.errors.ProtocolError`, one that goes
away :class:`~dsh.core.errors.ConnectionClosedError`, no answer in time
:class:`~dsh.core.errors.RequestTimeoutError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from dsh.core.errors import ConnectionClosedError, DshError, ProtocolError
from dsh.core.jsonrpc import Params
from dsh.core.peer import Peer

PROTOCOL_VERSION = "2025-11-25"
"""The revision dsh asks for in ``initialize`` (the newest with that handshake)."""
SUPPORTED_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", PROTOCOL_VERSION})
"""Revisions a server may answer with; their tool listing and calling are the same."""
CANCELLED = "notifications/cancelled"
"""MCP's notification that a request was given up (``{requestId, reason}``)."""

log = logging.getLogger("dsh.mcp")


class Transport(Protocol):
    """Moves whole JSON-RPC messages to and from one server: a
    :class:`~dsh.core.peer.MessageTransport` that :meth:`open` connects to its peer."""

    protocol_version: str | None

    async def open(self, receiver: Peer) -> None:
        """Connect (spawn the process) and report to ``receiver``; raises what stops it."""

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message; :class:`ConnectionClosedError` if the server is gone."""

    async def drain(self) -> None:
        """Wait until what was sent is on its way; raises :class:`ConnectionClosedError`
        when it could not be delivered."""

    def pause_receiving(self) -> None:
        """Deliver nothing until :meth:`resume_receiving`."""

    def resume_receiving(self) -> None:
        """Deliver again."""

    async def close(self) -> None:
        """Disconnect and release everything (the process is stopped); idempotent."""


class ClientSession:
    """Requests and answers over ``transport``; ``on_end`` is called once when it ends."""

    def __init__(self, transport: Transport, client_info: dict[str, str],
                 on_end: Callable[[], None] | None = None) -> None:
        self.transport = transport
        self.ended = asyncio.Event()
        self._client_info = client_info
        self._on_end = on_end
        self._peer = Peer(strict=True, cancel_method=CANCELLED, on_close=self._closed,
                          log=log)
        self._peer.method("ping", _pong)

    @property
    def failure(self) -> DshError | None:
        """Why the session ended; ``None`` while it is open."""
        return self._peer.failure

    async def open(self) -> None:
        """Open the transport (spawn the server) and begin reading its messages."""
        await self.transport.open(self._peer)

    async def close(self) -> None:
        """Close the transport; waiting requests fail."""
        self._peer.fail(ConnectionClosedError("the session was closed"))
        self._mark_ended()
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
        return await self._peer.request(method, params, timeout=timeout)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification (no answer) and wait until it is delivered."""
        self._peer.notify(method, params)
        await self._peer.drain()

    def _closed(self, reason: DshError) -> None:
        self._mark_ended()

    def _mark_ended(self) -> None:
        if self.ended.is_set():
            return
        self.ended.set()
        if self._on_end is not None:
            self._on_end()


async def _pong(params: Params | None) -> dict[str, Any]:
    """``ping``: an empty result, at once."""
    return {}
