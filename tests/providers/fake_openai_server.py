"""A real, scriptable OpenAI-compatible HTTP server on 127.0.0.1, for provider tests.

Each request takes the next scripted :class:`Reply` (status, headers, body pieces sent as
separate HTTP chunks with optional pauses between them, then a clean end, an abrupt cut,
or a hold until the client hangs up) and is recorded as a :class:`Received`, so tests
assert what actually went over the wire. The server runs in a thread of the test process;
leaving the ``with`` block stops it and joins every connection thread.
"""

from __future__ import annotations

import json
import select
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_LIMIT_S = 10.0
"""Longest a ``hold`` reply waits for the client to hang up, so a failed test cannot hang."""


@dataclass(frozen=True)
class Reply:
    """One scripted response. ``pieces`` are body chunks; a float pauses that many seconds.

    ``cut`` closes the connection after the pieces without ending the chunked body;
    ``hold`` keeps the response open after them until the client disconnects.
    """

    status: int = 200
    pieces: Sequence[bytes | float] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    cut: bool = False
    hold: bool = False


@dataclass(frozen=True)
class Received:
    """One request as the server saw it (header names lower-cased, body parsed as JSON;
    ``client_port`` tells whether two requests shared a connection)."""

    path: str
    headers: Mapping[str, str]
    body: Any
    client_port: int


def event(payload: Any) -> bytes:
    """One SSE event: ``data: <json>`` (or a raw string such as ``[DONE]``) and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def chunk(delta: Mapping[str, Any] | None = None, *, finish: str | None = None,
          usage: Mapping[str, int] | None = None) -> bytes:
    """A ``chat.completion.chunk`` event with one choice (or none, for a usage chunk)."""
    payload: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
    payload["choices"] = [] if delta is None and finish is None else [
        {"index": 0, "delta": dict(delta or {}), "finish_reason": finish}]
    if usage is not None:
        payload["usage"] = dict(usage)
    return event(payload)


def text_stream(*texts: str, finish: str = "stop", prompt_tokens: int = 7,
                completion_tokens: int = 3) -> list[bytes | float]:
    """The pieces of a complete streamed answer made of ``texts``, with usage and [DONE]."""
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": text}) for text in texts),
        chunk({}, finish=finish),
        chunk(usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                     "total_tokens": prompt_tokens + completion_tokens}),
        event("[DONE]"),
    ]


def error_reply(status: int, message: str, **headers: str) -> Reply:
    """A JSON error response in the OpenAI shape."""
    body = json.dumps({"error": {"message": message, "type": "test"}}).encode()
    return Reply(status, [body], {"Content-Type": "application/json", **headers})


class FakeOpenAIServer:
    """The server; ``script`` queues replies, ``requests`` lists what arrived."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.disconnected = threading.Event()
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def base_url(self) -> str:
        """The URL a provider row's ``base_url`` should name."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._replies.extend(replies)

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _take(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if not self._replies:
                return error_reply(500, "the test scripted no reply for this request")
            return self._replies.popleft()


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins the connection threads: nothing leaks
    block_on_close = True
    owner: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up is what many tests provoke; anything else is printed."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = HOLD_LIMIT_S
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on ``requests``, not on an access log."""

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = owner._take(Received(self.path, headers, json.loads(raw or b"null"),
                                     self.client_address[1]))
        self.send_response(reply.status)
        names = {name.lower() for name in reply.headers}
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if "content-type" not in names:
            self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in reply.pieces:
            if isinstance(piece, float):
                owner._stopping.wait(piece)
            elif piece:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        if reply.cut:
            self.close_connection = True
            return
        if reply.hold:
            self._wait_for_hangup()
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    def _wait_for_hangup(self) -> None:
        owner = self.server.owner
        waited = 0.0
        while waited < HOLD_LIMIT_S and not owner._stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            waited += 0.05
            if readable and not self.connection.recv(1):
                owner.disconnected.set()
                return
