"""Server-sent event streams: the agent's notifications, fanned out per session.

The agent calls its listeners synchronously on the loop; :class:`EventHub` is one such
listener and hands each notification to the open streams of that session without ever
blocking the agent. A stream that falls too far behind (a stalled browser) is ended
rather than buffered without bound: ``EventSource`` reconnects with ``Last-Event-ID`` and
the server replays the missed events from the session's history.

Wire format (one frame per notification)::

    id: <seq>                      (session.event only: the event's seq)
    event: session.event | session.status | approval | config
    data: <one-line JSON>          (the SDK notification's params, unchanged)
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable
from typing import Any

MAX_BACKLOG = 4096
"""Notifications one stream may hold unsent before it is ended (the client resumes)."""
KEEPALIVE_S = 15.0

Item = tuple[str, dict[str, Any]]


def frame(method: str, params: dict[str, Any]) -> bytes:
    """One SSE frame; ``session.event`` frames carry the event's seq as their id (an
    event outside the log, ``session/moved``, has none)."""
    head = ""
    if method == "session.event" and "seq" in params["event"]:
        head = f"id: {params['event']['seq']}\n"
    data = json.dumps(params, ensure_ascii=False, separators=(",", ":"))
    return f"{head}event: {method}\ndata: {data}\n\n".encode()


class Subscription:
    """One open stream's queue: bounded, woken per notification, ended by the hub."""

    def __init__(self, session_id: str | None, release: Callable[[Subscription], None]) -> None:
        self.session_id = session_id
        self._items: collections.deque[Item] = collections.deque()
        self._wake = asyncio.Event()
        self._ended = False
        self._release = release

    def push(self, item: Item) -> None:
        if self._ended:
            return
        if len(self._items) >= MAX_BACKLOG:
            self.end()
            return
        self._items.append(item)
        self._wake.set()

    def end(self) -> None:
        """No more items: the stream finishes after what it already holds."""
        self._ended = True
        self._wake.set()

    async def next(self, timeout: float = KEEPALIVE_S) -> Item | bool | None:
        """The next item; None when ended; False after ``timeout`` (time for a keepalive)."""
        while not self._items:
            if self._ended:
                return None
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                return False
        return self._items.popleft()

    def close(self) -> None:
        """The stream is gone: stop receiving."""
        self.end()
        self._release(self)


class EventHub:
    """Routes notifications to the streams of their session; ``config`` goes to all."""

    def __init__(self) -> None:
        self._subs: set[Subscription] = set()
        self._closed = False

    def subscribe(self, session_id: str) -> Subscription:
        sub = Subscription(session_id, self._subs.discard)
        if self._closed:
            sub.end()
        else:
            self._subs.add(sub)
        return sub

    def publish(self, method: str, params: dict[str, Any]) -> None:
        """An agent (or approval) notification: to the streams of ``params["sessionId"]``."""
        session_id = params.get("sessionId")
        for sub in list(self._subs):
            if sub.session_id == session_id:
                sub.push((method, params))

    def broadcast(self, method: str, params: dict[str, Any]) -> None:
        """A notification about the whole runtime (config reloads): to every stream."""
        for sub in list(self._subs):
            sub.push((method, params))

    def close(self) -> None:
        """End every stream (shutdown), so no open response holds the server up."""
        self._closed = True
        for sub in list(self._subs):
            sub.end()
