"""The client's side of one connection: the core :class:`~dsh.core.peer.Peer` (request
matching, timeouts, answering the runtime's requests), plus what only the SDK client
needs on top of it:

* :class:`AsyncSubscription` — a bounded queue of matching notifications for one consumer.
  A consumer that falls :data:`HIGH_WATER` behind pauses the peer's receiving, so the
  client stops reading the runtime's stdout (and the runtime then blocks on it) until
  the consumer is back under :data:`LOW_WATER`: memory stays bounded and nothing is
  dropped. Notifications no subscription wants are dropped.
* Server-to-client requests (``approval/request``) are answered by the peer: a missing
  handler with -32601, a failing one with -32603.
* Every error names the client: a timeout, the runtime's exit or a protocol fault is
  annotated with the profile, carrier, startup stage and stderr tail
  (:class:`~._lifecycle.ErrorContext`), and the end fails every waiter and subscription
  with one typed error at once, so nobody waits out a timeout for a process that died.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from dsh.core.errors import (
    ClientClosedError,
    DshError,
    RequestTimeoutError,
    RuntimeExitedError,
)
from dsh.core.jsonrpc import Notification, Params
from dsh.core.peer import Handler, Peer
from dsh.sdk._lifecycle import ErrorContext
from dsh.sdk._transport import RuntimeProcess

HIGH_WATER = 10_000
LOW_WATER = 1_000

Predicate = Callable[[Notification], bool]

__all__ = ["HIGH_WATER", "LOW_WATER", "AsyncSubscription", "Handler", "Predicate", "Router"]

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
    """The state of one connection to one runtime process: its peer, its subscriptions."""

    def __init__(self, context: ErrorContext) -> None:
        self._context = context
        self.peer = Peer(strict=True, on_close=self._closed, log=log)
        self.peer.on_any_notification(self._publish)
        self._subscriptions: list[AsyncSubscription] = []
        self._lagging: set[AsyncSubscription] = set()
        self._process: RuntimeProcess | None = None
        self.closing = False

    @property
    def failure(self) -> DshError | None:
        """Why the connection ended; ``None`` while it is open."""
        return self.peer.failure

    def attach(self, process: RuntimeProcess) -> None:
        """Note the process (set once, right after spawn) for its stderr tail."""
        self._process = process

    def handle(self, method: str, handler: Handler) -> None:
        """Answer server-to-client requests for ``method`` with ``handler(params)``."""
        self.peer.method(method, handler)

    # -- client to server ---------------------------------------------------------------

    async def call(self, method: str, params: Params | None, timeout: float | None, *,
                   timeout_error: type[RequestTimeoutError] = RequestTimeoutError) -> Any:
        """Send a request and wait for its answer (see :meth:`Peer.request`); a timeout
        names this client's runtime and carries its stderr tail."""
        try:
            return await self.peer.request(method, params, timeout=timeout,
                                           timeout_error=timeout_error)
        except RequestTimeoutError as exc:
            raise self._context.annotate(exc, self.stderr_tail()) from None

    def notify(self, method: str, params: Params | None) -> None:
        """Send a notification (no answer); raises the failure if the runtime is gone."""
        self.peer.notify(method, params)

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
        """``subscription`` is back under the low-water mark: maybe resume receiving."""
        if subscription in self._lagging:
            self._lagging.discard(subscription)
            if not self._lagging:
                self.peer.resume_receiving()

    def stderr_tail(self) -> tuple[str, ...]:
        """The runtime's stderr tail, for errors raised outside the process's callbacks."""
        return () if self._process is None else self._process.stderr_tail

    # -- failure -------------------------------------------------------------------------

    def fail(self, exc: DshError) -> None:
        """Fail every waiter, subscription and later call with ``exc`` (the first wins)."""
        self.peer.fail(exc)
        self._fail_subscriptions()

    def _closed(self, reason: DshError) -> DshError:
        """The peer's end (the runtime exited, broke the protocol or closed its stdout):
        the error everyone gets names this client; a clean end of :meth:`close` is
        "client is closed"."""
        if self.closing and isinstance(reason, RuntimeExitedError):
            reason = ClientClosedError("client is closed")
        tail = reason.stderr_tail if isinstance(reason, RuntimeExitedError) else \
            self.stderr_tail()
        failure = self._context.annotate(reason, tail)
        # The peer records it after this returns; subscriptions read it from here.
        self._fail_subscriptions(failure)
        return failure

    def _fail_subscriptions(self, failure: DshError | None = None) -> None:
        failure = failure or self.failure
        assert failure is not None
        for subscription in self._subscriptions:
            subscription.fail(failure)
        self._subscriptions.clear()
        if self._lagging:
            self._lagging.clear()
            self.peer.resume_receiving()

    # -- notifications from the runtime --------------------------------------------------

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
                if not self._lagging:
                    self.peer.pause_receiving()
                self._lagging.add(subscription)
