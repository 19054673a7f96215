"""A JSON-RPC 2.0 peer over a stdio transport, reusable by every stdio protocol.

It knows the wire, not the application: a method table, notifications out, requests out
(server to client) matched by :class:`dsh.core.jsonrpc.PendingRequests`, and the standard error
answers. Applications (the SDK server, later ACP) register handlers and never see a frame.

Each incoming request runs as its own task, so a slow handler never delays a fast one and
answers may leave out of order, as JSON-RPC allows. The number of requests in flight is
bounded: at the bound the peer stops reading its input until some finish, which pushes
back on a flooding client through the pipe instead of growing memory.

How failures leave, so that one bad line never costs the connection:

    undecodable line      -32700, id null
    not a request shape   -32600, id recovered when readable
    oversize line         -32600, id null (the line is skipped, the stream goes on)
    lone surrogate        in the id or method: -32600, id null; in params: -32602
                          (such a string cannot be encoded back, nor stored)
    unknown method        -32601
    handler raised        a DshError -> its answer in :mod:`dsh.runtime.servers.errors`
                          (the one table); anything else -> -32603 "internal error"
                          (traceback on stderr)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dsh.core import jsonrpc
from dsh.core.errors import (
    DshError,
    FrameTooLargeError,
    InvalidMessageError,
    ProtocolError,
)
from dsh.runtime.servers.errors import to_wire
from dsh.runtime.servers.validation import lone_surrogate
from dsh.runtime.transports.stdio import StdioTransport

log = logging.getLogger("dsh.core.jsonrpc")

# Serving ends within drain_timeout + these (seconds), so the runtime's 5 s disposal bound
# still has room after a stuck client or handler.
_CANCEL_GRACE = 0.25
_FLUSH_TIMEOUT = 1.0

Params = jsonrpc.Params
Handler = Callable[[Params | None], Awaitable[Any]]
NotificationHandler = Callable[[Params | None], None]


class JsonRpcPeer:
    """Serve ``methods`` on ``transport`` until input ends or :meth:`stop` is called.

    ``max_in_flight`` bounds concurrent incoming requests; ``drain_timeout`` is how long
    requests still running when serving ends may take to answer before they are cancelled.
    """

    def __init__(
        self,
        transport: StdioTransport,
        *,
        max_frame_bytes: int = jsonrpc.DEFAULT_MAX_FRAME_BYTES,
        max_in_flight: int = 1024,
        drain_timeout: float = 1.0,
    ) -> None:
        self._transport = transport
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight = max_in_flight
        self._drain_timeout = drain_timeout
        self._methods: dict[str, Handler] = {}
        self._notification_handlers: dict[str, NotificationHandler] = {}
        self._pending = jsonrpc.PendingRequests()
        self._tasks: set[asyncio.Task[None]] = set()
        self._paused = False
        self._done: asyncio.Future[None] | None = None

    # -- registration --------------------------------------------------------------------

    def method(self, name: str, handler: Handler) -> None:
        """Answer requests for ``name`` with ``await handler(params)``."""
        self._methods[name] = handler

    def methods(self, table: Mapping[str, Handler]) -> None:
        """Register several handlers at once."""
        self._methods.update(table)

    def on_notification(self, name: str, handler: NotificationHandler) -> None:
        """Call ``handler(params)`` for incoming notifications named ``name``."""
        self._notification_handlers[name] = handler

    # -- serving -------------------------------------------------------------------------

    async def start(self) -> None:
        """Begin reading; :meth:`serve` calls it when the caller has not."""
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
            await self._transport.start(self._on_frames, self.stop)

    async def serve(self) -> None:
        """Read and answer until EOF, output loss or :meth:`stop`; then flush and close.

        Requests still running get ``drain_timeout`` to answer; server-to-client requests
        still waiting fail at once, since nobody is left to answer them.
        """
        await self.start()
        assert self._done is not None
        try:
            await self._done
        finally:
            self._pending.fail_all(ProtocolError("the connection is closed"))
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=self._drain_timeout)
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:  # cancelled handlers only write their -32800 answer
                await asyncio.wait(set(self._tasks), timeout=_CANCEL_GRACE)
            await self._transport.aclose(_FLUSH_TIMEOUT)

    def stop(self) -> None:
        """Stop serving; :meth:`serve` returns once in-flight answers are out."""
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    @property
    def closed(self) -> bool:
        """True once serving has ended (or never began)."""
        return self._done is None or self._done.done()

    # -- outgoing ------------------------------------------------------------------------

    def notify(self, method: str, params: Params | None = None) -> None:
        """Send a notification now; dropped (with a stderr note) once the peer is gone."""
        self._send(jsonrpc.notification(method, params), what=method)

    async def request(
        self, method: str, params: Params | None = None, *, timeout: float | None = None
    ) -> Any:
        """Ask the client; raises ``JsonRpcError`` for an error answer, ``TimeoutError``
        when ``timeout`` passes, ``ProtocolError`` when the connection closes first."""
        if self.closed:
            raise ProtocolError("the connection is closed")
        rid = self._pending.next_id()
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.register(rid, waiter)
        try:
            self._transport.write(self._encode(jsonrpc.request(rid, method, params)))
            await self._transport.drain()
            return await asyncio.wait_for(waiter, timeout)
        except ConnectionError as exc:
            self.stop()
            raise ProtocolError("the connection is closed") from exc
        finally:
            self._pending.discard(rid)

    # -- incoming ------------------------------------------------------------------------

    def _on_frames(self, items: list[jsonrpc.Decoded]) -> None:
        for item in items:
            if isinstance(item, jsonrpc.FrameFault):
                self._send(item.response(), what=f"{item.kind} fault")
                continue
            try:
                message = jsonrpc.parse_message(item.message)
            except InvalidMessageError as exc:
                self._send(jsonrpc.error(exc.id, exc.rpc_code, exc.message), what="invalid")
                continue
            if isinstance(message, jsonrpc.Response):
                self._pending.resolve(message)
                continue
            # A request's id and method are sent back: one that cannot be encoded has no
            # answer but an anonymous one.
            unanswerable = lone_surrogate([message.method, getattr(message, "id", None)])
            if unanswerable is not None:
                if isinstance(message, jsonrpc.Request):
                    self._send(jsonrpc.error(None, jsonrpc.INVALID_REQUEST,
                                             "invalid JSON-RPC message: the id or method "
                                             "holds a lone surrogate"), what="invalid")
                continue
            if isinstance(message, jsonrpc.Request):
                self._start_request(message)
            else:
                self._dispatch_notification(message)

    def _start_request(self, request: jsonrpc.Request) -> None:
        if self.closed:
            return
        task = asyncio.get_running_loop().create_task(self._answer(request))
        self._tasks.add(task)
        task.add_done_callback(self._request_done)
        if len(self._tasks) >= self._max_in_flight and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._paused and len(self._tasks) <= self._max_in_flight // 2:
            self._paused = False
            self._transport.resume_reading()

    async def _answer(self, request: jsonrpc.Request) -> None:
        handler = self._methods.get(request.method)
        problem = None if handler is None else lone_surrogate(request.params)
        if handler is None:
            reply = jsonrpc.error(
                request.id, jsonrpc.METHOD_NOT_FOUND, f"method not found: {request.method}"
            )
        elif problem is not None:
            reply = jsonrpc.error(request.id, jsonrpc.INVALID_PARAMS, problem)
        else:
            try:
                reply = jsonrpc.result(request.id, await handler(request.params))
            except DshError as exc:
                reply = {"jsonrpc": "2.0", "id": request.id, "error": to_wire(exc)}
            except asyncio.CancelledError:
                reply = jsonrpc.error(
                    request.id, jsonrpc.REQUEST_CANCELLED, "request cancelled: server closing"
                )
                self._send(reply, what=request.method)
                raise
            except Exception as exc:
                log.exception("%s failed", request.method)
                reply = jsonrpc.error(
                    request.id, jsonrpc.INTERNAL_ERROR, f"internal error ({type(exc).__name__})"
                )
        if self._send(reply, what=request.method):
            try:
                await self._transport.drain()
            except ConnectionError:
                self.stop()

    def _dispatch_notification(self, message: jsonrpc.Notification) -> None:
        handler = self._notification_handlers.get(message.method)
        if handler is None:
            return  # JSON-RPC: notifications are never answered, unknown ones are ignored
        problem = lone_surrogate(message.params)
        if problem is not None:
            log.warning("notification %s ignored: %s", message.method, problem)
            return
        try:
            handler(message.params)
        except Exception:
            log.exception("notification %s failed", message.method)

    # -- framing out ---------------------------------------------------------------------

    def _encode(self, message: dict[str, Any]) -> bytes:
        return jsonrpc.encode(message, max_frame_bytes=self._max_frame_bytes)

    def _send(self, message: dict[str, Any], *, what: str) -> bool:
        """Write one frame; an oversize answer becomes an error answer for the same id."""
        try:
            frame = self._encode(message)
        except FrameTooLargeError as exc:
            if "id" not in message or "method" in message:
                log.error("dropped %s: %s", what, exc)
                return False
            frame = self._encode(jsonrpc.error(message["id"], jsonrpc.INTERNAL_ERROR, str(exc)))
        except DshError as exc:
            log.error("dropped %s: %s", what, exc)
            if "id" not in message or "method" in message:
                return False
            frame = self._encode(
                jsonrpc.error(message["id"], jsonrpc.INTERNAL_ERROR, "result is not JSON")
            )
        try:
            self._transport.write(frame)
        except ConnectionError:
            self.stop()
            return False
        return True
