"""Server-sent event streams: the agent's notifications, fanned out per session.

The agent calls its listeners synchronously on the loop; :class:`EventHub` is one such
listener and hands each notification, framed once, to the open streams of that session
without ever blocking the agent. A stream that falls too far behind (a stalled browser)
is ended rather than buffered without bound: ``EventSource`` reconnects with
``Last-Event-ID`` and the server replays the missed events from the session's history.

A stream first replays the session's log, a page (:data:`PAGE_BYTES`) at a time from the
live log itself (no copy), and every stream replaying the same log gets the same encoded
pages (:class:`Pages`, a bounded cache): three hundred streams of a big session cost one
encoding of its history and a page of buffer each, and hand the loop back after every
page, so other requests (``/api/status``) are answered meanwhile.

Wire format (one frame per notification)::

    id: <seq>                      (session.event only: the event's seq)
    event: session.event | session.status | approval | config
    data: <one-line JSON>          (the SDK notification's params, unchanged)
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

MAX_BACKLOG = 4096
"""Notifications one stream may hold unsent before it is ended (the client resumes)."""
KEEPALIVE_S = 15.0
PAGE_BYTES = 64 * 1024
"""A replay page ends at the first event that brings it to this many bytes (or the log's
end): what one stream writes before it lets the loop serve others."""
CACHE_BYTES = 16 * 1024 * 1024
"""Encoded replay pages kept for the streams that come next (least recently used go)."""
PAGES_PER_PASS = 4
"""Replay pages written per pass of the event loop, across all streams."""

Item = tuple[str, dict[str, Any], bytes]
"""A notification: method, params, and its frame (encoded once for every stream)."""


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

    async def next(self, timeout: float = KEEPALIVE_S) -> Item | Literal[False] | None:
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


class _Page(NamedTuple):
    """An encoded replay page: the frames of ``log[start:end]``, and the first and last
    event objects it was made from (the page is still the log's while they are)."""

    first: Mapping[str, Any]
    last: Mapping[str, Any]
    end: int
    data: bytes
    full: bool  # reached PAGE_BYTES; else it ended at the log's end as it was then


class Pages:
    """Replay pages of the sessions' logs, encoded once and shared by every stream.

    A log only grows (seqs are never rewritten), so a page stays valid while the log
    still holds the very event objects it was made from; a page that ended at the log's
    end is made again once the log has grown past it, so pages keep their full size.
    """

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self._pages: collections.OrderedDict[tuple[str, int], _Page] = (
            collections.OrderedDict())
        self._bytes = 0
        self._max_bytes = max_bytes

    def page(self, session_id: str, log: Sequence[Mapping[str, Any]],
             start: int) -> tuple[bytes, int]:
        """The frames of ``log`` from ``start`` (< ``len(log)``), and where the next page
        starts."""
        key = (session_id, start)
        cached = self._pages.get(key)
        if cached is not None and cached.end <= len(log) and log[start] is cached.first \
                and log[cached.end - 1] is cached.last \
                and (cached.full or cached.end == len(log)):
            self._pages.move_to_end(key)
            return cached.data, cached.end
        frames: list[bytes] = []
        size, end = 0, start
        while end < len(log) and size < PAGE_BYTES:
            frames.append(frame("session.event", {"sessionId": session_id,
                                                  "event": log[end]}))
            size += len(frames[-1])
            end += 1
        data = b"".join(frames)
        if cached is not None:
            self._drop(key)
        if len(data) <= self._max_bytes // 8:  # one huge event is not worth keeping
            self._pages[key] = _Page(log[start], log[end - 1], end, data, size >= PAGE_BYTES)
            self._bytes += len(data)
            while self._bytes > self._max_bytes:
                self._drop(next(iter(self._pages)))
        return data, end

    def _drop(self, key: tuple[str, int]) -> None:
        self._bytes -= len(self._pages.pop(key).data)


class Turns:
    """The line replaying streams wait in: each pass of the event loop lets the next
    ``per_pass`` of them write a page. A stream takes a turn per page and holds nothing
    while it writes it, so one whose client stopped reading (its writes wait for the
    socket) never holds up the others."""

    def __init__(self, per_pass: int = PAGES_PER_PASS) -> None:
        self._line: collections.deque[asyncio.Future[None]] = collections.deque()
        self._per_pass = per_pass
        self._scheduled = False

    async def wait(self) -> None:
        """Return once it is this stream's turn to write a page."""
        turn = asyncio.get_running_loop().create_future()
        self._line.append(turn)
        self._schedule()
        await turn

    def _schedule(self) -> None:
        if self._line and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._next)

    def _next(self) -> None:
        self._scheduled = False
        given = 0
        while self._line and given < self._per_pass:
            turn = self._line.popleft()
            if not turn.done():  # a stream that went away meanwhile is skipped
                turn.set_result(None)
                given += 1
        self._schedule()


class EventHub:
    """Routes notifications to the streams of their session; ``config`` goes to all.
    ``pages`` are the replay pages the streams share, ``turns`` their line."""

    def __init__(self) -> None:
        self._subs: dict[str | None, set[Subscription]] = {}
        self._closed = False
        self.pages = Pages()
        self.turns = Turns()

    def subscribe(self, session_id: str) -> Subscription:
        sub = Subscription(session_id, self._release)
        if self._closed:
            sub.end()
        else:
            self._subs.setdefault(session_id, set()).add(sub)
        return sub

    def _release(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.session_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.session_id]

    def publish(self, method: str, params: dict[str, Any]) -> None:
        """An agent (or approval) notification: to the streams of ``params["sessionId"]``."""
        subs = self._subs.get(params.get("sessionId"))
        if subs:
            item = (method, params, frame(method, params))
            for sub in list(subs):
                sub.push(item)

    def broadcast(self, method: str, params: dict[str, Any]) -> None:
        """A notification about the whole runtime (config reloads): to every stream."""
        item = (method, params, frame(method, params))
        for sub in self._all():
            sub.push(item)

    @property
    def closed(self) -> bool:
        """Whether the server is shutting down (a replaying stream stops too)."""
        return self._closed

    def close(self) -> None:
        """End every stream (shutdown), so no open response holds the server up."""
        self._closed = True
        for sub in self._all():
            sub.end()

    def _all(self) -> list[Subscription]:
        return [sub for subs in self._subs.values() for sub in subs]
