"""The checks in front of every request: Host header first, then the launch's token.

Order matters and is part of the contract: a foreign ``Host`` is 403 before anything else
(a DNS-rebinding page gets nothing, not even "wrong token"), then a missing or wrong
token is 401. The token comes from ``Authorization: Bearer`` or, for what a browser
loads by URL (the page, an ``EventSource``), from the ``token`` query parameter; it is
compared in constant time. Only the page's static assets (its script and style, and the
vendored libraries it renders Markdown with) are public: they are the same files every
installation ships.

Every response also gets headers that keep the page to itself: no sniffing, no referrer
(the page's URL carries the token), no framing, no caching, and a content security
policy allowing only this origin.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
     b"frame-ancestors 'none'; form-action 'none'"),
)


def allowed_hosts(port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host header values this listener answers: loopback names with its port."""
    names = ["127.0.0.1", "localhost", "[::1]", *extra]
    return frozenset(f"{name}:{port}".lower() for name in names)


def problem_body(code: str, message: str) -> bytes:
    """The one error shape of the API: ``{"error": {"code", "message"}}``."""
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class Guard:
    """ASGI middleware: Host check (403), token check (401), security headers."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: frozenset[str],
                 public_paths: frozenset[str]) -> None:
        self._app = app
        self._token = token.encode()
        self._hosts = hosts
        self._public = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        send = _with_headers(send)
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if host not in self._hosts:
            await _reply(send, 403, "forbidden-host",
                         f"Host {host or '(none)'!r} is not this server's loopback address")
            return
        if scope["path"] not in self._public and not self._authorized(
                headers.get(b"authorization", b""), scope.get("query_string", b"")):
            await _reply(send, 401, "unauthorized",
                         "missing or wrong token: send Authorization: Bearer TOKEN "
                         "(or ?token=TOKEN) as printed when dsh web started",
                         [(b"www-authenticate", b'Bearer realm="dsh"')])
            return
        await self._app(scope, receive, send)

    def _authorized(self, authorization: bytes, query: bytes) -> bool:
        scheme, _, value = authorization.partition(b" ")
        if scheme.lower() == b"bearer" and value:
            return hmac.compare_digest(value.strip(), self._token)
        given = parse_qs(query.decode("latin-1")).get("token")
        return given is not None and hmac.compare_digest(given[-1].encode(), self._token)


def _with_headers(send: Send) -> Send:
    """``send`` adding :data:`SECURITY_HEADERS` to the response start."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {k.lower() for k, _ in message.get("headers", [])}
            message["headers"] = [*message.get("headers", []),
                                  *(h for h in SECURITY_HEADERS if h[0] not in present)]
        await send(message)

    return wrapped


async def _reply(send: Send, status: int, code: str, message: str,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = problem_body(code, message)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *(extra or [])]})
    await send({"type": "http.response.body", "body": body})
