"""A deadline for every request's head: a connection that has not sent a whole request
line and headers in time is closed.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) and nothing else: a
connection that sends nothing, or trickles a header a byte at a time, is kept for good
(800 such half-open connections stayed open against ``dsh web``, each a socket and a
protocol object, and a client could add more until the process ran out of files). The
deadline runs from the connection's start and again from the end of each response, and
stops once the head is complete: a long event stream or a slow turn is not cut. The body
has its deadline where it is read (:meth:`dsh.runtime.web.routes.WebApi._body`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete
    within :attr:`head_timeout` seconds (set per server by :func:`with_head_timeout`)."""

    head_timeout = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in (or the request failed)
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's head (uvicorn's keep-alive timer runs too)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def with_head_timeout(seconds: float) -> type[Any]:
    """The protocol class for a server whose request heads must arrive within ``seconds``."""
    return type("HeadTimeoutProtocol", (HeadTimeoutProtocol,), {"head_timeout": seconds})
