"""The streamable HTTP transport: each message POSTed to the server's one endpoint.

Per the MCP spec (2025-03-26 on): a request's answer comes back as the POST's JSON body or
as a ``text/event-stream`` of messages ending with it; notifications and answers get
``202 Accepted``. The server's ``Mcp-Session-Id`` from the ``initialize`` answer and the
negotiated ``MCP-Protocol-Version`` ride on every later POST, and closing sends ``DELETE``.

It is a message transport of the session's :class:`~dsh.core.peer.Peer` with no byte
stream below it: each message sent is one POST, run in a task of its own, so a slow tool
call never holds up another; what the answers carry is handed to the peer as it is read.
Notifications and answers are POSTed in the order they were sent, and a request waits
until those sent before it were accepted (``notifications/initialized`` must reach the
server before the next request); :meth:`StreamableHttpTransport.drain` waits for them and
raises the failure of one that was refused. An HTTP failure for a request (refused
connection, a 4xx/5xx status, a stream that ends before the answer) comes back as that
request's JSON-RPC error, naming the status; a ``404`` for a known session means the
server forgot it, which ends the connection. While the peer pauses receiving, the tasks
stop reading their answers.

Left out: the optional GET stream for server-initiated messages (dsh offers nothing a
server could ask for), resuming a broken stream with ``Last-Event-ID``, and redirects
(not followed, so headers holding credentials never travel to another origin).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from dsh.core import jsonrpc
from dsh.core.errors import ConnectionClosedError, DshError, ProtocolError
from dsh.core.redact import redact
from dsh.runtime.transports.sse import SSEDecoder

if TYPE_CHECKING:
    from dsh.core.peer import Peer

_SERVER_ERROR = -32000
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest message one event of an answer's stream may carry (as on stdio)."""
_JSON = {"content-type": "application/json"}


class StreamableHttpTransport:
    """The server at ``url``; ``headers`` go on every request."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        self.protocol_version: str | None = None
        self._url = url
        self._shown = redact(url)  # credentials in the URL never reach a message
        self._headers = dict(headers)
        self._session_id: str | None = None
        self._client: httpx.AsyncClient | None = None
        self._receiver: Peer | None = None
        self._posts: set[asyncio.Task[None]] = set()
        self._last_post: asyncio.Task[None] | None = None  # the last notification or answer
        self._refused: ConnectionClosedError | None = None
        self._receiving = asyncio.Event()
        self._receiving.set()
        self._closed = False

    async def open(self, receiver: Peer) -> None:
        """Make the HTTP client (the first POST connects) and connect ``receiver``."""
        self._client = httpx.AsyncClient(headers=self._headers, follow_redirects=False,
                                         timeout=httpx.Timeout(30.0, read=300.0))
        self._receiver = receiver
        receiver.connection_made(self)

    def send(self, message: dict[str, Any]) -> None:
        """POST ``message`` in a task; a request's answer reaches the peer when it comes."""
        if self._closed or self._client is None:
            raise ConnectionClosedError("the connection is closed")
        body = jsonrpc.encode(message)
        after = self._last_post
        if "method" in message and "id" in message:
            self._spawn(self._exchange(message, body, after))
        else:
            self._last_post = self._spawn(self._post(body, after))

    async def drain(self) -> None:
        """Wait until the notifications and answers sent so far were accepted; raises
        :class:`ConnectionClosedError` for one the server refused (once)."""
        if self._last_post is not None:
            await asyncio.wait({self._last_post})
        refused, self._refused = self._refused, None
        if refused is not None:
            raise refused

    def pause_receiving(self) -> None:
        """Hand the peer nothing more until :meth:`resume_receiving`; the answers' streams
        are not read meanwhile."""
        self._receiving.clear()

    def resume_receiving(self) -> None:
        """Hand the peer messages again."""
        self._receiving.set()

    async def close(self) -> None:
        """End the server's session (``DELETE``) and the HTTP client."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._posts):
            task.cancel()
        if self._client is not None:
            if self._session_id is not None:
                with contextlib.suppress(httpx.HTTPError):
                    await self._client.delete(self._url, headers=self._request_headers(),
                                              timeout=2.0)
            await self._client.aclose()

    # -- the POSTs -------------------------------------------------------------------------

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name="dsh-mcp-post")
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)
        return task

    async def _post(self, body: bytes, after: asyncio.Task[None] | None) -> None:
        """One notification or answer, after the one sent before it."""
        assert self._client is not None
        if after is not None:
            await asyncio.wait({after})
        try:
            response = await self._client.post(self._url, content=body,
                                               headers={**self._request_headers(), **_JSON})
            await response.aread()
        except httpx.HTTPError as exc:
            self._refused = ConnectionClosedError(
                f"cannot reach {self._shown}: {_describe(exc)}")
            return
        if response.status_code == 404 and self._session_id is not None:
            self._lost()
        if response.status_code >= 400:
            self._refused = ConnectionClosedError(
                f"{self._shown} answered HTTP {response.status_code}")

    async def _exchange(self, request: dict[str, Any], body: bytes,
                        after: asyncio.Task[None] | None) -> None:
        """One request: its POST, after what was sent before it, and its answer."""
        assert self._client is not None
        if after is not None:
            await asyncio.wait({after})
        request_id = request["id"]
        try:
            async with self._client.stream("POST", self._url, content=body,
                                           headers={**self._request_headers(), **_JSON}
                                           ) as response:
                if request["method"] == "initialize":
                    self._session_id = response.headers.get("mcp-session-id") or None
                if response.status_code == 404 and request["method"] != "initialize":
                    self._lost()
                    return
                if response.status_code >= 400:
                    await response.aread()
                    await self._fail(request_id, f"{self._shown} answered HTTP "
                                                 f"{response.status_code}{_reason(response)}")
                    return
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                if kind == "text/event-stream":
                    await self._read_events(response, request_id)
                elif kind == "application/json":
                    await self._deliver(json.loads(await response.aread()))
                else:
                    self._end(ProtocolError(f"an answer of content type {kind or 'none'!r}"))
        except httpx.HTTPError as exc:
            await self._fail(request_id, f"cannot reach {self._shown}: {_describe(exc)}")
        except (ValueError, ProtocolError) as exc:
            self._end(ProtocolError(f"an answer that is not JSON-RPC ({exc})"))

    async def _read_events(self, response: httpx.Response, request_id: Any) -> None:
        """The answer's event stream, through the runtime's SSE decoder
        (:mod:`dsh.runtime.transports.sse`) with the stdio transport's bound on one message."""
        events = SSEDecoder(max_event_bytes=MAX_MESSAGE_BYTES)
        async for data in response.aiter_bytes():
            for event in events.feed(data):
                if event.event != "message" or not event.data:
                    continue  # other event types, and the spec's priming events
                message = json.loads(event.data)
                await self._deliver(message)
                if isinstance(message, dict) and message.get("id") == request_id \
                        and "method" not in message:
                    return
        await self._fail(request_id,
                         "the server ended the answer's event stream before answering")

    async def _deliver(self, payload: Any) -> None:
        for message in payload if isinstance(payload, list) else [payload]:
            await self._receiving.wait()
            if self._receiver is not None and not self._closed:
                self._receiver.message_received(message)

    async def _fail(self, request_id: Any, message: str) -> None:
        """Answer request ``request_id`` with an error naming the HTTP failure."""
        await self._deliver({"jsonrpc": "2.0", "id": request_id,
                             "error": {"code": _SERVER_ERROR, "message": message}})

    def _lost(self) -> None:
        self._end(ConnectionClosedError("the server no longer knows this session"))

    def _end(self, reason: DshError) -> None:
        if self._receiver is not None and not self._closed:
            self._receiver.connection_lost(reason)

    def _request_headers(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream"}
        if self._session_id is not None:
            headers["mcp-session-id"] = self._session_id
        if self.protocol_version is not None:
            headers["mcp-protocol-version"] = self.protocol_version
        return headers


def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.LocalProtocolError):
        # Its text quotes the offending header value, which may be a configured secret.
        return f"{type(exc).__name__}: a header value or the URL cannot be sent"
    text = redact(" ".join(str(exc).split()))
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _reason(response: httpx.Response) -> str:
    text = " ".join(response.text.split())[:200] if response.content else ""
    return f" ({text})" if text else ""
