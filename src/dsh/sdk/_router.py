"""Routing for one connection: answers to their waiters, notifications to subscribers,
server requests to handlers, and one failure to everyone when the runtime goes away.

Request matching is :class:`dsh.core.jsonrpc.PendingRequests`, the same table the servers'
tests use, with asyncio futures as waiters; this module adds what only a client needs:

* :class:`AsyncSubscription` — a bounded queue of matching notifications for one consumer.
  A consumer that falls :data:`HIGH_WATER` behind pauses reading from the runtime (which
  then blocks on its own stdout) until it is back under :data:`LOW_WATER`: memory stays
  bounded and nothing is dropped. Notifications no subscription wants are dropped.
* Server-to-client requests (``approval/request``) run their handler in a task and are
  always answered: a missing handler with -32601, a failing one with -32603.
* :meth:`Router.fail` settles every waiter and subscription with one typed error at
  once, so nobody waits out a timeout for a process that already died.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from dsh.core import jsonrpc
from dsh.core.errors import (
    BusyError,
    ClientClosedError,
    DshError,
    JsonRpcError,
    ProtocolError,
    RequestTimeoutError,
    RuntimeExitedError,
)
from dsh.core.jsonrpc import Message, Notification, Params, PendingRequests, Request, Response
from dsh.sdk._lifecycle import ErrorContext
from dsh.sdk._transport import RuntimeProcess

HIGH_WATER = 10_000
LOW_WATER = 1_000

Handler = Callable[[Params | None], Awaitable[Any]]
Predicate = Callable[[Notification], bool]

log = logging.getLogger("dsh.sdk")


class AsyncSubscription:
    """Notifications matching a predicate, in arrival order, for one consumer.

    Iterate it (``async for``) or call :meth:`get`; close it (or use ``with``) when done,
    since an unread subscription eventually pauses the whole connection. When the
    connection fails, what was queued is still delivered, then the failure is raised.
    """

    def __init__(self, router: Router, predicate: Predicate | None) -> None:
        self._router = router
        self._predicate = predicate
        self._queue: deque[Notification] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self.closed = False

    async def get(self) -> Notification:
        """The next notification; raises the connection's failure once the queue is empty,
        :class:`ClientClosedError` if this subscription was closed."""
        while not self._queue:
            if self._failure is not None:
                raise self._failure
            if self.closed:
                raise ClientClosedError("the subscription is closed")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._queue.popleft()
        if len(self._queue) <= LOW_WATER:
            self._router.caught_up(self)
        return item

    def close(self) -> None:
        """Stop receiving; a pending :meth:`get` raises :class:`ClientClosedError`."""
        if not self.closed:
            self.closed = True
            self._router.unsubscribe(self)
            self._wake()

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Notification:
        if self.closed and not self._queue:
            raise StopAsyncIteration
        return await self.get()

    def __enter__(self) -> AsyncSubscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- called by the router -----------------------------------------------------------

    def offer(self, notification: Notification) -> bool:
        """Queue ``notification`` if it matches; ``True`` when the queue is now too long."""
        if self._predicate is not None and not self._predicate(notification):
            return False
        self._queue.append(notification)
        self._wake()
        return len(self._queue) >= HIGH_WATER

    def fail(self, exc: BaseException) -> None:
        """The connection is gone: raise ``exc`` once the queue is drained."""
        if self._failure is None:
            self._failure = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Router:
    """The state of one connection to one runtime process; the process's listener."""

    def __init__(self, context: ErrorContext) -> None:
        self._context = context
        self._pending = PendingRequests()
        self._subscriptions: list[AsyncSubscription] = []
        self._lagging: set[AsyncSubscription] = set()
        self._handlers: dict[str, Handler] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._process: RuntimeProcess | None = None
        self.failure: DshError | None = None
        self.closing = False

    def attach(self, process: RuntimeProcess) -> None:
        """Start routing for ``process`` (set once, right after spawn)."""
        self._process = process

    def handle(self, method: str, handler: Handler) -> None:
        """Answer server-to-client requests for ``method`` with ``handler(params)``."""
        self._handlers[method] = handler

    # -- client to server ---------------------------------------------------------------

    async def call(self, method: str, params: Params | None, timeout: float | None, *,
                   timeout_error: type[RequestTimeoutError] = RequestTimeoutError) -> Any:
        """Send a request and wait for its answer.

        Raises :class:`JsonRpcError` (:class:`BusyError` for -32001) for an error answer,
        ``timeout_error`` after ``timeout`` seconds, and the connection's failure if the
        runtime goes away meanwhile.
        """
        loop = asyncio.get_running_loop()
        rid = self._pending.next_id()
        waiter: asyncio.Future[Any] = self._pending.register(rid, loop.create_future())
        if not waiter.done():
            try:
                self._send(jsonrpc.request(rid, method, params))
            except BaseException:
                self._pending.discard(rid)
                raise
        try:
            if timeout is None:
                return await self._exchange(waiter)
            return await asyncio.wait_for(self._exchange(waiter), timeout)
        except asyncio.TimeoutError:
            self._pending.discard(rid)
            raise self._context.annotate(
                timeout_error(f"no answer to {method} within {timeout:g} s"),
                self.stderr_tail(),
            ) from None
        except asyncio.CancelledError:
            self._pending.discard(rid)
            raise
        except JsonRpcError as exc:
            if exc.code == jsonrpc.SERVER_BUSY and not isinstance(exc, BusyError):
                raise BusyError(exc.message, exc.data) from None
            raise

    async def _exchange(self, waiter: asyncio.Future[Any]) -> Any:
        # Wait while the runtime is not reading its stdin: the write buffer stays
        # bounded, and that wait counts against the request's timeout.
        if self._process is not None:
            await self._process.drain()
        return await waiter

    def notify(self, method: str, params: Params | None) -> None:
        """Send a notification (no answer); raises the failure if the runtime is gone."""
        if self.failure is not None:
            raise self.failure
        self._send(jsonrpc.notification(method, params))

    def subscribe(self, predicate: Predicate | None) -> AsyncSubscription:
        """A new subscription; one made after a failure raises it on first read."""
        subscription = AsyncSubscription(self, predicate)
        if self.failure is not None:
            subscription.fail(self.failure)
        else:
            self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: AsyncSubscription) -> None:
        """Forget ``subscription`` (its own :meth:`AsyncSubscription.close` calls this)."""
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
        self.caught_up(subscription)

    def caught_up(self, subscription: AsyncSubscription) -> None:
        """``subscription`` is back under the low-water mark: maybe resume reading."""
        if subscription in self._lagging:
            self._lagging.discard(subscription)
            if not self._lagging and self._process is not None:
                self._process.resume_reading()

    def stderr_tail(self) -> tuple[str, ...]:
        """The runtime's stderr tail, for errors raised outside the process's callbacks."""
        return () if self._process is None else self._process.stderr_tail

    def _send(self, message: dict[str, Any]) -> None:
        if self._process is None:
            raise ClientClosedError("the runtime is not running")
        self._process.send(message)

    # -- failure -------------------------------------------------------------------------

    def fail(self, exc: DshError) -> None:
        """Fail every waiter, subscription and later call with ``exc`` (the first wins)."""
        if self.failure is None:
            self.failure = exc
        self._pending.fail_all(self.failure)
        for subscription in self._subscriptions:
            subscription.fail(self.failure)
        self._subscriptions.clear()
        if self._lagging:
            self._lagging.clear()
            if self._process is not None:
                self._process.resume_reading()
        for task in self._tasks:
            task.cancel()

    # -- the process's listener ----------------------------------------------------------

    def message_received(self, message: Message) -> None:
        """Route one message from the runtime."""
        if isinstance(message, Response):
            if not self._pending.resolve(message):
                log.debug("dsh.sdk: answer to unknown or abandoned request %r", message.id)
        elif isinstance(message, Notification):
            self._publish(message)
        else:
            self._serve(message)

    def transport_broken(self, error: ProtocolError, stderr_tail: Sequence[str]) -> None:
        """Garbage or an oversize frame: the stream cannot be trusted any more."""
        self.fail(self._context.annotate(error, stderr_tail))

    def runtime_exited(self, exit_code: int, stderr_tail: Sequence[str]) -> None:
        """The process ended: a clean end of :meth:`close` or a death."""
        if self.closing:
            exc: DshError = ClientClosedError("client is closed")
        else:
            exc = RuntimeExitedError(exit_code, stderr_tail)
        self.fail(self._context.annotate(exc, stderr_tail))

    def _publish(self, notification: Notification) -> None:
        for subscription in list(self._subscriptions):
            try:
                lagging = subscription.offer(notification)
            except Exception as exc:
                # A failing predicate ends its own subscription only.
                self.unsubscribe(subscription)
                subscription.fail(exc)
                continue
            if lagging and subscription not in self._lagging:
                if not self._lagging and self._process is not None:
                    self._process.pause_reading()
                self._lagging.add(subscription)

    def _serve(self, request: Request) -> None:
        handler = self._handlers.get(request.method)
        if handler is None:
            self._reply(jsonrpc.error(request.id, jsonrpc.METHOD_NOT_FOUND,
                                      f"the client does not handle {request.method}"))
            return
        task = asyncio.get_running_loop().create_task(self._answer(request, handler))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, request: Request, handler: Handler) -> None:
        try:
            value = await handler(request.params)
        except JsonRpcError as exc:
            self._reply(jsonrpc.error(request.id, exc.code, exc.message, exc.data))
        except Exception as exc:
            log.exception("dsh.sdk: handler for %s failed", request.method)
            self._reply(jsonrpc.error(request.id, jsonrpc.INTERNAL_ERROR,
                                      f"client handler failed: {exc}"))
        else:
            self._reply(jsonrpc.result(request.id, value))

    def _reply(self, message: dict[str, Any]) -> None:
        if self.failure is not None:
            return
        try:
            self._send(message)
        except DshError as exc:
            # An unencodable or oversize answer from a handler: tell the runtime (which
            # then denies), unless the pipe itself is what failed.
            with contextlib.suppress(DshError):
                self._send(jsonrpc.error(message.get("id"), jsonrpc.INTERNAL_ERROR, str(exc)))
