"""A real HTTP server on 127.0.0.1 for the web tool tests: pages, redirects, a search API.

Routes are fixed (see :data:`PAGES` and :meth:`Handler.do_GET`); every request is recorded
as ``(path, query, headers)`` so a test can tell what reached the server, and what never
did. ``/slow`` waits until the server stops (or 10 s), so a timeout test never leaves a
sleeping thread behind.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PAGE = b"""<!doctype html>
<html><head><title>The  Test Page</title><style>p { color: red }</style>
<script>var secret = "SCRIPT-BODY";</script></head>
<body><h1>Hello web</h1>
<p>Some <b>bold</b> text and a <a href="/docs/next.html">relative link</a>.</p>
<ul><li>first_item</li><li>second</li></ul>
<img src="data:image/png;base64,AAAA" alt="inline picture">
</body></html>"""

PAGES: dict[str, tuple[str, bytes]] = {
    "/page.html": ("text/html; charset=utf-8", PAGE),
    "/plain.txt": ("text/plain; charset=utf-8", "plain text, caf\u00e9\n".encode()),
    "/data.json": ("application/json", b'{"answer": 42}'),
    "/big.txt": ("text/plain", b"0123456789" * 10000),
    "/image.png": ("image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 5000),
    "/untyped": ("", b"<html><body><p>sniffed html</p></body></html>"),
    "/untyped-binary": ("", b"\x00\x01\x02\x03binary"),
}


@dataclass(frozen=True)
class Seen:
    """One request as the server received it (header names lower-cased)."""

    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


class Handler(BaseHTTPRequestHandler):
    server: LocalWeb

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads :attr:`LocalWeb.seen` instead."""

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        self.server.seen.append(Seen(path, query, {k.lower(): v for k, v in self.headers.items()}))
        if path in PAGES:
            content_type, body = PAGES[path]
            self._send(200, body, content_type)
        elif path.startswith("/redirect/"):
            # /redirect/<n> -> /redirect/<n-1> ... -> /page.html
            left = int(path.rsplit("/", 1)[1])
            self._redirect("/page.html" if left <= 0 else f"/redirect/{left - 1}")
        elif path == "/loop-a":
            self._redirect("/loop-b")
        elif path == "/loop-b":
            self._redirect(f"http://127.0.0.1:{self.server.port}/loop-a")
        elif path == "/to":
            self._redirect(query["url"][0])
        elif path == "/slow":
            self.server.stopping.wait(10)
            self._send(200, b"late", "text/plain")
        elif path == "/search":
            self._search(query)
        else:
            self._send(404, b"no such page", "text/plain")

    def _search(self, query: dict[str, list[str]]) -> None:
        q = query.get("q", [""])[0]
        if q == "fail":
            self._send(500, b"engine down", "text/plain")
        elif q == "html":
            self._send(200, b"<html>not json</html>", "text/html")
        else:
            results = [{"title": f"{q} result {i}", "url": f"https://example.org/{q}/{i}",
                        "content": f"About   {q}, number {i}."} for i in range(1, 9)]
            self._send(200, json.dumps({"query": q, "results": results}).encode(),
                       "application/json")

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LocalWeb(ThreadingHTTPServer):
    """The server; :attr:`url` is its base URL, :attr:`seen` what it received."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[Seen] = []
        self.stopping = threading.Event()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        """The paths requested so far, in order."""
        return [s.path for s in self.seen]


@contextmanager
def local_web() -> Iterator[LocalWeb]:
    """A running :class:`LocalWeb`, stopped (and its socket closed) on exit."""
    server = LocalWeb()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
