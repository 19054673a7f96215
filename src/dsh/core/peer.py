"""One JSON-RPC peer for every dsh speaker of it: requests out under one timeout policy,
requests in answered by handlers, notifications both ways, one failure for every waiter.

The SDK client (:mod:`dsh.sdk`), the SDK and ACP servers and the MCP client are each a
:class:`Peer` over a :class:`MessageTransport`; what tells them apart is configuration
(strict or lenient input, the error table, a cancel notification), never a second copy of
request matching, timeouts or answering. The transport moves whole messages, as asyncio's
transports move bytes: it tells its receiver (the peer) :meth:`~Peer.connection_made`,
each :meth:`~Peer.message_received` and, at the end, :meth:`~Peer.connection_lost`. The stdio
transports (the SDK client's pipes to its runtime, a server's own stdio, an MCP server's
pipes) frame bytes below this interface with :class:`~dsh.core.jsonrpc.FrameDecoder`;
MCP's streamable HTTP has no byte stream at all::

    transport ─► connection_made(transport)
              ─► message_received(message | FrameFault)
                   ├─ fault, bad shape ─► strict (a client): the connection ends with it
                   │                      lenient (a server): an error answer, reading goes on
                   ├─ Response ─► PendingRequests.resolve ─► request() returns or raises
                   ├─ Request ─► a task: handler(params) ─► result | error answer ─► send
                   │             (max_in_flight running: pause_receiving until half done)
                   └─ Notification ─► its handler, else the catch-all one
              ─► connection_lost(reason) ─► on_close(reason) ─► every waiter, and every
                                             later request, raises that one error

    request(method, params, timeout)
        id ─► register ─► send ─► drain ─► wait ─┬─ result
                                                 ├─ error answer ─► JsonRpcError, typed by
                                                 │    code (BusyError, NotInitializedError,
                                                 │    RequestCancelledError)
                                                 ├─ timeout ─► forget the id, cancel_method
                                                 │    (if set), RequestTimeoutError
                                                 └─ the end ─► the connection's error
    notify(method, params) ─► send

Back-pressure is the transport's to apply and the peer's to ask for: it pauses receiving
while ``max_in_flight`` incoming requests run, and whenever its owner asks
(:meth:`~Peer.pause_receiving`: the SDK client's lagging subscriber), so memory stays
bounded by the transport's buffers and nothing is dropped.

Every error the peer raises is a :class:`~dsh.core.errors.DshError`: a timeout is
:class:`~dsh.core.errors.RequestTimeoutError` (also a ``TimeoutError``), never a bare one.
A handler's error leaves through ``error_answer``, which the servers set to their one
table (:mod:`dsh.runtime.servers.errors`); the core knows no runtime.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from dsh.core import jsonrpc
from dsh.core.errors import (
    ConnectionClosedError,
    DshError,
    FrameTooLargeError,
    InvalidMessageError,
    JsonRpcError,
    ProtocolError,
    RequestTimeoutError,
)
from dsh.core.jsonrpc import FrameFault, Notification, Params, Request, RequestId, Response

__all__ = [
    "CANCEL_GRACE",
    "Handler",
    "MessageTransport",
    "NotificationHandler",
    "Peer",
    "default_error_answer",
]

Handler = Callable[[Params | None], Awaitable[Any]]
"""Answers one request: ``await handler(params)`` is the result; raising answers an error."""
NotificationHandler = Callable[[Params | None], None]
Inbound = dict[str, Any] | FrameFault

CANCEL_GRACE = 0.25
"""Seconds a cancelled handler has to write its -32800 answer while :meth:`Peer.serve`
winds down (the runtime's 5 s disposal bound keeps room after a stuck handler)."""


class MessageTransport(Protocol):
    """What a :class:`Peer` talks through: whole JSON-RPC messages, in order.

    It reports to its receiver (a :class:`Peer`) as asyncio's transports report to their
    protocols, always on the event loop's thread: ``connection_made(transport)`` before
    anything else, ``message_received(message)`` for each decoded message (a dict, or a
    :class:`~dsh.core.jsonrpc.FrameFault` for input that is not one), and
    ``connection_lost(reason)`` when the connection ends (input ended, the process died,
    the output is gone for good), with a :class:`DshError` saying why; the peer takes the
    first. A send that fails raises to its caller; the end is still the transport's to
    report, since it knows the reason (an exit code, a stderr tail).
    """

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message without blocking. Raises :class:`ConnectionClosedError` when
        the peer can no longer be written to, :class:`FrameTooLargeError` for a message
        over the frame cap and :class:`DshError` for one that is not JSON."""

    async def drain(self) -> None:
        """Wait while unsent output is above the high-water mark; raises
        :class:`ConnectionClosedError` when it can never be sent."""

    def pause_receiving(self) -> None:
        """Deliver no more messages until :meth:`resume_receiving` (stop reading)."""

    def resume_receiving(self) -> None:
        """Deliver messages again."""

    async def close(self) -> None:
        """Flush what is queued (bounded) and let go of the connection."""


def default_error_answer(exc: DshError) -> dict[str, Any]:
    """A handler's error as the ``error`` member of its answer, where no table is given:
    an error answer or protocol error keeps its code (and data), anything else is -32603
    with its message."""
    if isinstance(exc, JsonRpcError):
        return exc.to_wire()
    code = exc.rpc_code if isinstance(exc, ProtocolError) else jsonrpc.INTERNAL_ERROR
    return {"code": code, "message": exc.message}


def _sendable(value: Any) -> bool:
    """Whether ``value`` (a request's id or method, which its answer echoes) can be sent
    back: JSON's ``"\\ud800"`` escape decodes to a string that UTF-8 cannot encode."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


class Peer:
    """One side of one JSON-RPC connection; see the module docstring for the flow.

    ``strict``: input that is not a JSON-RPC message ends the connection (what a client
    wants: nothing can tell which request a lost line answered); otherwise it is answered
    with an error and reading goes on (a server: one bad line never costs the connection).
    ``error_answer`` turns a handler's :class:`DshError` into its answer's ``error``
    member; ``check_params`` names what is wrong with a request's (or notification's)
    params before any handler sees them (``None``: nothing). ``cancel_method`` is the
    notification that tells the peer a request was given up (timed out or cancelled),
    sent with ``{requestId, reason}`` as MCP defines it; ``None`` for protocols without.
    ``max_in_flight`` bounds the incoming requests running at once; ``drain_timeout`` is
    how long :meth:`serve` lets them answer after input ended. ``on_close(reason)`` is
    called once when the connection ends by itself (the transport's ``connection_lost``,
    or bad input to a strict peer) and may return the error to fail everyone with instead
    of ``reason`` (a client names its runtime there); ``None`` keeps ``reason``.
    """

    def __init__(
        self,
        *,
        strict: bool,
        error_answer: Callable[[DshError], dict[str, Any]] = default_error_answer,
        check_params: Callable[[Any], str | None] | None = None,
        cancel_method: str | None = None,
        max_in_flight: int = 1024,
        drain_timeout: float = 1.0,
        on_close: Callable[[DshError], DshError | None] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        if max_in_flight < 2:
            raise ValueError(f"max_in_flight must be at least 2, not {max_in_flight}")
        self._strict = strict
        self._error_answer = error_answer
        self._check_params = check_params
        self._cancel_method = cancel_method
        self._max_in_flight = max_in_flight
        self._drain_timeout = drain_timeout
        self._on_close = on_close
        self._log = log or logging.getLogger("dsh.jsonrpc")
        self._methods: dict[str, Handler] = {}
        self._notification_handlers: dict[str, NotificationHandler] = {}
        self._catch_all: Callable[[Notification], None] | None = None
        self._pending = jsonrpc.PendingRequests()
        self._tasks: set[asyncio.Task[None]] = set()
        self._transport: MessageTransport | None = None
        self._failure: DshError | None = None
        self._ended = asyncio.Event()
        self._output_lost = False
        self._serving = False
        self._held_by_load = False
        self._held_by_owner = False
        self._paused = False

    # -- registration --------------------------------------------------------------------

    def method(self, name: str, handler: Handler) -> None:
        """Answer requests for ``name`` with ``await handler(params)``."""
        self._methods[name] = handler

    def methods(self, table: Mapping[str, Handler]) -> None:
        """Register several request handlers at once."""
        self._methods.update(table)

    def on_notification(self, name: str, handler: NotificationHandler) -> None:
        """Call ``handler(params)`` for incoming notifications named ``name``."""
        self._notification_handlers[name] = handler

    def on_any_notification(self, handler: Callable[[Notification], None]) -> None:
        """Call ``handler(notification)`` for every notification without a handler of
        its own (the rest are dropped: notifications are never answered)."""
        self._catch_all = handler

    # -- state ---------------------------------------------------------------------------

    @property
    def failure(self) -> DshError | None:
        """Why the connection ended (what every request now raises); ``None`` while open."""
        return self._failure

    @property
    def closed(self) -> bool:
        """True once the connection has ended (or :meth:`stop` was called)."""
        return self._failure is not None

    @property
    def transport(self) -> MessageTransport | None:
        """The transport, from :meth:`connection_made` on."""
        return self._transport

    # -- outgoing ------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Params | None = None,
        *,
        timeout: float | None = None,
        timeout_error: type[RequestTimeoutError] = RequestTimeoutError,
    ) -> Any:
        """Send a request and return its result.

        Waits at most ``timeout`` seconds (``None``: while the connection lives), the wait
        for the transport to drain included; then the request is forgotten, the peer is
        told where the protocol can be (``cancel_method``), and ``timeout_error`` is
        raised. An error answer raises :class:`JsonRpcError` (typed by code, see
        :data:`dsh.core.jsonrpc.ANSWER_ERRORS`); the connection's end raises its error.
        """
        transport = self._usable()
        rid = self._pending.next_id()
        waiter: asyncio.Future[Any] = self._pending.register(
            rid, asyncio.get_running_loop().create_future())
        if not waiter.done():  # done: the connection ended meanwhile, and it says so
            try:
                transport.send(jsonrpc.request(rid, method, params))
            except BaseException as exc:
                self._pending.discard(rid)
                if isinstance(exc, ConnectionClosedError):
                    self._output_lost = True
                raise
        try:
            if timeout is None:
                return await self._exchange(waiter)
            return await asyncio.wait_for(self._exchange(waiter), timeout)
        except asyncio.TimeoutError as exc:
            if isinstance(exc, DshError):  # a failure that is also a TimeoutError
                raise
            self._abandon(rid, f"no answer within {timeout:g} s")
            raise timeout_error(f"no answer to {method} within {timeout:g} s") from None
        except asyncio.CancelledError:
            self._abandon(rid, "the request was cancelled")
            raise

    def notify(self, method: str, params: Params | None = None, *, quiet: bool = False) -> bool:
        """Send a notification; ``True`` once it is queued.

        Raises the connection's error once it ended, :class:`FrameTooLargeError` or
        :class:`DshError` for one that cannot be sent. ``quiet`` drops it instead (with a
        log line when it could not be encoded) and returns ``False``: what a server wants
        for the notifications its agent emits, which must never fail the agent.
        """
        try:
            transport = self._usable()
            try:
                transport.send(jsonrpc.notification(method, params))
            except ConnectionClosedError:
                self._output_lost = True
                raise
        except DshError as exc:
            if not quiet:
                raise
            if self._failure is None:
                self._log.error("dropped %s: %s", method, exc)
            return False
        return True

    async def drain(self) -> None:
        """Wait while the transport's unsent output is above its high-water mark."""
        await self._usable().drain()

    def pause_receiving(self) -> None:
        """Take no more messages until :meth:`resume_receiving` (the owner is behind)."""
        self._held_by_owner = True
        self._update_receiving()

    def resume_receiving(self) -> None:
        """Take messages again (unless the in-flight bound still holds them back)."""
        self._held_by_owner = False
        self._update_receiving()

    # -- ending --------------------------------------------------------------------------

    def fail(self, exc: DshError) -> None:
        """End the connection with ``exc``: every waiting and later request raises it (the
        first end wins), and running handlers are cancelled unless :meth:`serve` winds
        them down. The transport is left to its owner."""
        self._end(exc)

    def stop(self) -> None:
        """Stop serving: :meth:`serve` returns once running requests have answered."""
        self._end(ConnectionClosedError("the connection is closed"))

    async def serve(self) -> None:
        """Serve until input ends, the output is lost or :meth:`stop`; then wind down.

        Requests still running get ``drain_timeout`` to answer, the rest are cancelled
        (answering -32800); requests waiting for the other side fail at once, since
        nobody is left to answer them; last the transport is closed (a bounded flush).
        """
        self._serving = True
        try:
            await self._ended.wait()
        finally:
            self._end(ConnectionClosedError("the connection is closed"))
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=self._drain_timeout)
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:  # cancelled handlers only write their -32800 answer
                await asyncio.wait(set(self._tasks), timeout=CANCEL_GRACE)
            if self._transport is not None:
                await self._transport.close()

    # -- what the transport calls --------------------------------------------------------

    def connection_made(self, transport: MessageTransport) -> None:
        """The transport is ready: messages may be sent, and will be received."""
        self._transport = transport
        if self._paused:
            transport.pause_receiving()

    def message_received(self, item: Inbound) -> None:
        """Route one message (or an undecodable line) from the other side."""
        if self._failure is not None:
            return  # ended: answers nobody waits for, requests nobody will serve
        if isinstance(item, FrameFault):
            self._bad_input(item.error, item.response())
            return
        try:
            message = jsonrpc.parse_message(item)
        except InvalidMessageError as exc:
            self._bad_input(exc, jsonrpc.error(exc.id, exc.rpc_code, exc.message))
            return
        if isinstance(message, Response):
            if not self._pending.resolve(message):
                self._log.debug("answer to an unknown or abandoned request %r", message.id)
        elif not _sendable(message.method):
            if isinstance(message, Request):
                self._unanswerable()
        elif isinstance(message, Request):
            if _sendable(message.id):
                self._start(message)
            else:
                self._unanswerable()
        else:
            self._notified(message)

    def connection_lost(self, reason: DshError) -> None:
        """Input ended (EOF, the process died, the connection dropped), for ``reason``."""
        self._end(reason, by_transport=True)

    # -- internals -----------------------------------------------------------------------

    def _usable(self) -> MessageTransport:
        if self._failure is not None:
            raise self._failure
        if self._transport is None:
            raise ConnectionClosedError("the connection is not open yet")
        return self._transport

    async def _exchange(self, waiter: asyncio.Future[Any]) -> Any:
        # Wait while the other side is not reading: the output stays bounded, and that
        # wait counts against the request's timeout. An output that is gone is the
        # transport's to report (connection_lost, which fails the waiter with its reason).
        if self._transport is not None and not self._output_lost:
            # Per request: a try costs nothing here, a suppress() context is two calls.
            try:  # noqa: SIM105
                await self._transport.drain()
            except ConnectionClosedError:
                pass
        return await waiter

    def _abandon(self, rid: RequestId, reason: str) -> None:
        """Forget request ``rid``; tell the other side where the protocol can."""
        if not self._pending.discard(rid) or self._cancel_method is None:
            return
        if self._failure is None and not self._output_lost:
            self.notify(self._cancel_method, {"requestId": rid, "reason": reason}, quiet=True)

    def _end(self, reason: DshError, *, by_transport: bool = False) -> None:
        if self._failure is not None:
            return
        if by_transport and self._on_close is not None:
            reason = self._on_close(reason) or reason
        self._failure = reason
        self._pending.fail_all(reason)
        self._ended.set()
        if not self._serving:
            # Nobody will wind the handlers down: nobody is left to answer.
            for task in list(self._tasks):
                task.cancel()

    def _bad_input(self, error: ProtocolError, answer: dict[str, Any]) -> None:
        if self._strict:
            self._end(error, by_transport=True)
        else:
            self._send_answer(answer, "the answer to a bad message")

    def _unanswerable(self) -> None:
        self._send_answer(jsonrpc.error(None, jsonrpc.INVALID_REQUEST,
                                        "invalid JSON-RPC message: the id or method holds "
                                        "a lone surrogate"), "invalid")

    def _start(self, request: Request) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(request))
        self._tasks.add(task)
        task.add_done_callback(self._request_done)
        if len(self._tasks) >= self._max_in_flight and not self._held_by_load:
            self._held_by_load = True
            self._update_receiving()

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._held_by_load and len(self._tasks) <= self._max_in_flight // 2:
            self._held_by_load = False
            self._update_receiving()

    def _update_receiving(self) -> None:
        hold = self._held_by_load or self._held_by_owner
        if hold == self._paused:
            return
        self._paused = hold
        if self._transport is not None:
            if hold:
                self._transport.pause_receiving()
            else:
                self._transport.resume_receiving()

    async def _answer(self, request: Request) -> None:
        handler = self._methods.get(request.method)
        try:
            problem = None
            if handler is not None and self._check_params is not None:
                problem = self._check_params(request.params)
            if handler is None:
                reply = jsonrpc.error(request.id, jsonrpc.METHOD_NOT_FOUND,
                                      f"method not found: {request.method}")
            elif problem is not None:
                reply = jsonrpc.error(request.id, jsonrpc.INVALID_PARAMS, problem)
            else:
                reply = jsonrpc.result(request.id, await handler(request.params))
        except asyncio.CancelledError:
            self._send_answer(jsonrpc.error(request.id, jsonrpc.REQUEST_CANCELLED,
                                            "request cancelled: the connection is closing"),
                              request.method)
            raise
        except DshError as exc:
            reply = {"jsonrpc": "2.0", "id": request.id, "error": self._error_answer(exc)}
        except Exception as exc:
            self._log.exception("%s failed", request.method)
            reply = jsonrpc.error(request.id, jsonrpc.INTERNAL_ERROR,
                                  f"internal error ({type(exc).__name__})")
        if self._send_answer(reply, request.method) and self._transport is not None:
            try:  # noqa: SIM105 - per request, as in _exchange
                await self._transport.drain()
            except ConnectionClosedError:
                pass  # the transport reports the end

    def _send_answer(self, reply: dict[str, Any], what: str, *, fallback: bool = True) -> bool:
        """Send an answer, even after input ended; one too large or not JSON becomes a
        -32603 answer for the same id (once), since the other side waits for that id."""
        if self._transport is None or self._output_lost:
            return False
        try:
            self._transport.send(reply)
        except ConnectionClosedError:
            self._output_lost = True  # and the transport reports the end
            return False
        except DshError as exc:
            self._log.error("dropped %s: %s", what, exc)
            if not fallback:
                return False
            reason = str(exc) if isinstance(exc, FrameTooLargeError) else "result is not JSON"
            return self._send_answer(jsonrpc.error(reply.get("id"), jsonrpc.INTERNAL_ERROR,
                                                   reason), what, fallback=False)
        return True

    def _notified(self, notification: Notification) -> None:
        handler = self._notification_handlers.get(notification.method)
        if handler is None and self._catch_all is None:
            return
        if self._check_params is not None:
            problem = self._check_params(notification.params)
            if problem is not None:
                self._log.warning("notification %s ignored: %s", notification.method, problem)
                return
        try:
            if handler is not None:
                handler(notification.params)
            else:
                assert self._catch_all is not None
                self._catch_all(notification)
        except Exception:
            self._log.exception("notification %s failed", notification.method)
