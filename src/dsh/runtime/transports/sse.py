"""An incremental, bounded server-sent-events decoder (the WHATWG ``text/event-stream`` rules).

The one event-stream reader of the runtime: model providers' streamed answers and MCP's
streamable HTTP transport both read through it, each with its own bound. Pure and
I/O-free, so it is tested by feeding bytes and the HTTP code only shovels network chunks
into it: :meth:`SSEDecoder.feed` accepts bytes split anywhere (even between the ``\\r``
and ``\\n`` of one line ending) and returns the events completed so far.

What the spec asks and this does: lines end with CRLF, LF or CR; a leading UTF-8 BOM is
dropped; a line starting with ``:`` is a comment (servers send them as keep-alives);
``field: value`` loses one space after the colon; several ``data`` lines join with ``\\n``;
a blank line dispatches the event, and an event without any ``data`` line is dropped; an
event left unterminated when the stream ends is discarded (so EOF is not a dispatch).
``id`` and ``retry`` serve reconnection, which a model stream never does (a resumed
completion would repeat deltas), so they are ignored like unknown fields.

Bounded: one event (its pending line plus its data) may not exceed ``max_event_bytes``,
so a server that never sends a line ending cannot grow memory without limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsh.core.errors import ProtocolError

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024

_EOL = re.compile(rb"[\r\n]")
_BOM = "\ufeff"


class SSEError(ProtocolError):
    """The byte stream is not a valid event stream (bad UTF-8, or an event over the bound)."""


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event: its type (``message`` unless an ``event:`` line said otherwise)
    and its data lines joined with ``\\n``."""

    data: str
    event: str = "message"


class SSEDecoder:
    """Turns a byte stream into :class:`ServerSentEvent` values, chunk by chunk."""

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._line = bytearray()
        self._skip_lf = False  # the previous chunk ended in CR; a leading LF belongs to it
        self._first_line = True
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Consume ``chunk`` and return the events it completed, in order."""
        events: list[ServerSentEvent] = []
        start = 0
        if self._skip_lf and chunk[:1] == b"\n":
            start = 1
        self._skip_lf = False
        while (match := _EOL.search(chunk, start)) is not None:
            end = match.start()
            self._append(chunk, start, end)
            self._end_line(events)
            if chunk[end] == 0x0D:
                if end + 1 == len(chunk):
                    self._skip_lf = True
                elif chunk[end + 1] == 0x0A:
                    end += 1
            start = end + 1
        self._append(chunk, start, len(chunk))
        return events

    def _append(self, chunk: bytes, start: int, end: int) -> None:
        self._line += chunk[start:end]
        if len(self._line) + self._data_bytes > self._max:
            raise SSEError(f"an event exceeds {self._max} bytes")

    def _end_line(self, events: list[ServerSentEvent]) -> None:
        try:
            line = self._line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEError("event stream is not valid UTF-8") from exc
        size = len(self._line)
        self._line.clear()
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            if self._data:
                events.append(ServerSentEvent("\n".join(self._data), self._event or "message"))
            self._data.clear()
            self._data_bytes = 0
            self._event = ""
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_bytes += size
        elif name == "event":
            self._event = value
