"""The HTTP API and the page, as one Starlette application behind :class:`Guard`.

Every endpoint is a thin adapter over :class:`~dsh.runtime.servers.operations.Operations`,
the same operations the SDK protocol serves, so the two cannot disagree: the endpoint
reads its JSON body (size-capped, 413; malformed or nested deeper than
:data:`MAX_JSON_DEPTH`, 400), calls one operation, and answers
JSON. dsh's errors are answered from the servers' one table
(:mod:`dsh.runtime.servers.errors`): an unknown session 404, invalid parameters 400, busy
429 (retryable), a closed agent 503; this module answers only what is the web's own (a
body too large or malformed, an unknown approval).
"""

from __future__ import annotations

import array
import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from dsh.core.errors import DshError, SessionNotFoundError
from dsh.runtime.servers import validation
from dsh.runtime.servers.errors import http_status
from dsh.runtime.servers.operations import Operations
from dsh.runtime.web.approvals import DECISIONS, ApprovalBroker
from dsh.runtime.web.guard import Guard, problem_body
from dsh.runtime.web.streams import EventHub, frame

DRAIN_LIMIT = 64 * 1024 * 1024
"""An oversized body is read and dropped up to this much before the 413, so the client
sees the answer instead of a reset connection; past it the connection is cut."""

MAX_JSON_DEPTH = 64
"""Arrays and objects a JSON body may nest (a prompt needs 3). Checked before parsing, so
deep nesting is a 400, never the parser's RecursionError (a 500, or a reset connection)."""

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
# Opening brackets to 1, closing ones to 255 (-1 as a signed byte), everything else gone.
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))

STATIC_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "render.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    # Markdown, its sanitizer and code highlighting, vendored (static/vendor/README.md).
    "vendor/markdown-it.min.js": "text/javascript; charset=utf-8",
    "vendor/purify.min.js": "text/javascript; charset=utf-8",
    "vendor/highlight.min.js": "text/javascript; charset=utf-8",
    "vendor/highlight-github.min.css": "text/css; charset=utf-8",
}


class ProblemError(Exception):
    """An error answer: HTTP status, a stable code and a one-line message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _problem_response(exc: ProblemError) -> Response:
    headers = {"retry-after": "1"} if exc.status == 429 else \
        {"connection": "close"} if exc.status == 408 else None  # the body's rest is unread
    return Response(problem_body(exc.code, exc.message), exc.status,
                    media_type="application/json", headers=headers)


Endpoint = Callable[[Request], Awaitable[Response]]


def _api(fn: Endpoint) -> Endpoint:
    """Turn :class:`ProblemError` and dsh's errors into error answers (the servers' one table,
    :mod:`dsh.runtime.servers.errors`, with its HTTP statuses)."""

    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except DshError as exc:
            return _problem_response(ProblemError(*http_status(exc)))
        except ProblemError as exc:
            return _problem_response(exc)

    return endpoint


@dataclass
class WebApi:
    """The endpoints of one server; ``static`` holds the page's files by name."""

    ops: Operations
    hub: EventHub
    broker: ApprovalBroker
    default_cwd: str
    max_body_bytes: int
    static: Mapping[str, bytes]
    body_timeout_s: float = 10.0

    # -- helpers -------------------------------------------------------------------------

    async def _body(self, request: Request, *, optional: bool = False) -> dict[str, Any]:
        """The JSON object body: over the cap 413, malformed or not an object 400."""
        length = request.headers.get("content-length")
        if length is not None and not length.isdigit():
            raise ProblemError(400, "bad-request", "Content-Length is not a number")
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > DRAIN_LIMIT:
                    break
                if size <= self.max_body_bytes:
                    chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), self.body_timeout_s)
        except asyncio.TimeoutError:
            raise ProblemError(408, "timeout", f"the request body did not arrive within "
                               f"{self.body_timeout_s:g} s (config request_timeout_s)"
                               ) from None
        if size > self.max_body_bytes:
            raise ProblemError(413, "too-large",
                          f"request body over {self.max_body_bytes} bytes (config max_body_bytes)")
        raw = b"".join(chunks)
        if not raw.strip() and optional:
            return {}
        if _nesting(raw) > MAX_JSON_DEPTH:
            raise ProblemError(400, "malformed-json",
                               f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProblemError(400, "malformed-json", f"malformed JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise ProblemError(400, "malformed-json", "the JSON body must be an object")
        problem = validation.lone_surrogate(body)
        if problem is not None:
            raise ProblemError(400, "invalid-params", problem)
        return body

    async def _make_live(self, session_id: str) -> None:
        """Restore a persisted session unless it is live here (unknown: the resume's
        SessionNotFoundError; another runtime's: busy)."""
        try:
            self.ops.live_events(session_id)
        except SessionNotFoundError:
            await self.ops.resume(session_id)

    # -- page ----------------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        return Response(self.static["index.html"], media_type=STATIC_TYPES["index.html"])

    # -- sessions ------------------------------------------------------------------------

    async def list_sessions(self, request: Request) -> Response:
        """The sessions' summaries, narrowed by ``?sessionId=&workspace=&limit=``."""
        query = request.query_params
        narrow: dict[str, Any] = {k: query[k] for k in ("sessionId", "workspace")
                                  if query.get(k)}
        if "limit" in query:
            text = query["limit"]
            digits = text.isascii() and text.isdigit() and len(text) < 10
            narrow["limit"] = int(text) if digits else -1
        return JSONResponse({"sessions": self.ops.list_sessions(narrow)})

    async def new_session(self, request: Request) -> Response:
        cwd = validation.string(await self._body(request, optional=True), "cwd",
                                required=False)
        return JSONResponse({"sessionId": await self.ops.new_session(cwd, self.default_cwd)},
                            201)

    async def prompt(self, request: Request) -> Response:
        body = await self._body(request)
        session_id = request.path_params["id"]
        message_id = await self.ops.prompt(session_id, body.get("contentBlocks"),
                                           self.default_cwd, {
                                               key: request.headers[key]
                                               for key in validation.TRACE_KEYS
                                               if key in request.headers})
        return JSONResponse({"messageId": message_id}, 202)

    async def cancel(self, request: Request) -> Response:
        await self._body(request, optional=True)
        return JSONResponse({"cancelled": await self.ops.cancel(request.path_params["id"])})

    async def resume(self, request: Request) -> Response:
        await self._body(request, optional=True)
        await self.ops.resume(request.path_params["id"])
        return JSONResponse({})

    async def history(self, request: Request) -> Response:
        """A page of the log (``?cursor=&limit=``): ``{events, nextCursor}``; read from the
        store for a session not live here, so it needs no lease."""
        session_id = request.path_params["id"]
        query = request.query_params
        window: dict[str, Any] = {"cursor": query.get("cursor") or None}
        if "limit" in query:
            text = query["limit"]
            digits = text.isascii() and text.isdigit() and len(text) < 10
            window["limit"] = int(text) if digits else -1
        return JSONResponse(self.ops.history(session_id, window))

    async def events(self, request: Request) -> Response:
        """The session's events from ``since`` (or after ``Last-Event-ID``), its status and
        pending approvals, then everything live.

        The history is replayed from the live log a shared page at a time
        (:class:`~dsh.runtime.web.streams.Pages`), each page in its turn
        (:class:`~dsh.runtime.web.streams.Turns`), until the stream has caught up; it then
        subscribes with no await in between, so no event is missed or sent twice."""
        session_id = request.path_params["id"]
        since = _since(request)
        await self._make_live(session_id)

        async def stream() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            seq = since
            while True:
                try:
                    log = self.ops.live_events(session_id)
                except SessionNotFoundError:
                    return  # let go meanwhile (its lease taken over): the client retries
                if seq >= len(log):
                    break
                await self.hub.turns.wait()
                if self.hub.closed:
                    return  # shutting down: no replay holds the server up
                data, seq = self.hub.pages.page(session_id, log, seq)
                yield data
            last = seq - 1
            sub = self.hub.subscribe(session_id)
            status = next((s.get("status") for s in self.ops.list_sessions(
                {"sessionId": session_id})), "idle")
            waiting = [a for a in self.broker.pending() if a["sessionId"] == session_id]
            try:
                yield frame("session.status", {"sessionId": session_id, "status": status})
                for approval in waiting:  # asked before this stream went live
                    yield frame("approval", {**approval, "state": "pending"})
                while True:
                    item = await sub.next()
                    if item is None:
                        return
                    if item is False:
                        yield b": keepalive\n\n"
                        continue
                    method, params, data = item
                    if method == "session.event" and "seq" in params["event"]:
                        if params["event"]["seq"] <= last:
                            continue
                        last = params["event"]["seq"]
                    yield data
            finally:
                sub.close()

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    # -- a session's own choices, changes, usage, the user's shell ------------------------

    async def settings(self, request: Request) -> Response:
        return JSONResponse(await self.ops.settings(request.path_params["id"]))

    async def set_model(self, request: Request) -> Response:
        body = await self._body(request)
        return JSONResponse(await self.ops.set_model(request.path_params["id"], body))

    async def set_policy(self, request: Request) -> Response:
        body = await self._body(request)
        if "mode" not in body:
            raise ProblemError(400, "invalid-params", '"mode" is required')
        return JSONResponse(await self.ops.set_policy(request.path_params["id"], body["mode"]))

    async def forget_decisions(self, request: Request) -> Response:
        await self._body(request, optional=True)
        return JSONResponse(await self.ops.forget_decisions(request.path_params["id"]))

    async def changes(self, request: Request) -> Response:
        return JSONResponse(self.ops.changes(request.path_params["id"]))

    async def usage(self, request: Request) -> Response:
        return JSONResponse(self.ops.usage(request.path_params["id"]))

    async def shell(self, request: Request) -> Response:
        body = await self._body(request)
        return JSONResponse(await self.ops.shell(request.path_params["id"], body.get("command")))

    # -- introspection -------------------------------------------------------------------

    async def tools(self, request: Request) -> Response:
        return JSONResponse({"tools": self.ops.tools()})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"routes": self.ops.models()})

    async def config(self, request: Request) -> Response:
        status = self.ops.status("ready")
        return JSONResponse({"config": self.ops.config(), "patchReload": status["patchReload"],
                             "reloadRequired": status["reloadRequired"]})

    async def status(self, request: Request) -> Response:
        return JSONResponse(self.ops.status("ready"))

    # -- approvals -----------------------------------------------------------------------

    async def approvals(self, request: Request) -> Response:
        return JSONResponse({"approvals": self.broker.pending()})

    async def decide(self, request: Request) -> Response:
        body = await self._body(request)
        decision = body.get("decision")
        if decision not in DECISIONS:
            raise ProblemError(400, "invalid-params", '"decision" must be "allow" or "deny"')
        if body.get("remember") not in (None, "session") or not isinstance(
                body.get("note"), (str, type(None))):
            raise ProblemError(400, "invalid-params", '"remember" may only be "session", '
                               'and "note" must be a string')
        approval_id = request.path_params["id"]
        if not self.broker.decide(approval_id, validation.approval_answer(body)):
            raise ProblemError(404, "unknown-approval",
                          f"no pending approval '{approval_id}' (decided, expired or unknown)")
        return JSONResponse({"approvalId": approval_id, "decision": decision})

    # -- the application -----------------------------------------------------------------

    def app(self, *, token: str, hosts: frozenset[str]) -> Guard:
        """The ASGI application: routes behind the Host and token guard."""
        api = [
            Route("/api/sessions", self.list_sessions, methods=["GET"]),
            Route("/api/sessions", self.new_session, methods=["POST"]),
            Route("/api/sessions/{id}/prompt", self.prompt, methods=["POST"]),
            Route("/api/sessions/{id}/events", self.events, methods=["GET"]),
            Route("/api/sessions/{id}/cancel", self.cancel, methods=["POST"]),
            Route("/api/sessions/{id}/resume", self.resume, methods=["POST"]),
            Route("/api/sessions/{id}/history", self.history, methods=["GET"]),
            Route("/api/sessions/{id}/settings", self.settings, methods=["GET"]),
            Route("/api/sessions/{id}/model", self.set_model, methods=["POST"]),
            Route("/api/sessions/{id}/policy", self.set_policy, methods=["POST"]),
            Route("/api/sessions/{id}/approvals/forget", self.forget_decisions,
                  methods=["POST"]),
            Route("/api/sessions/{id}/changes", self.changes, methods=["GET"]),
            Route("/api/sessions/{id}/usage", self.usage, methods=["GET"]),
            Route("/api/sessions/{id}/shell", self.shell, methods=["POST"]),
            Route("/api/tools", self.tools, methods=["GET"]),
            Route("/api/models", self.models, methods=["GET"]),
            Route("/api/config", self.config, methods=["GET"]),
            Route("/api/status", self.status, methods=["GET"]),
            Route("/api/approvals", self.approvals, methods=["GET"]),
            Route("/api/approvals/{id}", self.decide, methods=["POST"]),
        ]
        routes = [Route(r.path, _api(r.endpoint), methods=sorted(r.methods or ()))
                  for r in api]
        routes += [Route("/", self.page, methods=["GET"])]
        assets = [name for name in STATIC_TYPES if name != "index.html"]
        routes += [Route(f"/static/{name}", self._asset(name), methods=["GET"])
                   for name in assets]
        public = frozenset(f"/static/{name}" for name in assets)
        return Guard(Starlette(routes=routes), token=token, hosts=hosts, public_paths=public)

    def _asset(self, name: str) -> Endpoint:
        async def asset(request: Request) -> Response:
            return Response(self.static[name], media_type=STATIC_TYPES[name])

        return asset


def _nesting(raw: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``raw`` nest (brackets inside
    strings do not count), at C speed: a body of a megabyte of brackets costs
    milliseconds, and no recursion."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return 0  # too few brackets to nest that deep
    steps = array.array("b")
    steps.frombytes(_STRING.sub(b"", raw).translate(_STEPS, _NOT_BRACKETS))
    return max(itertools.accumulate(steps), default=0)


def _since(request: Request) -> int:
    """Where a stream starts: after ``Last-Event-ID`` (a reconnect), else ``since`` (0)."""
    last_id = request.headers.get("last-event-id")
    text, name = (last_id, "Last-Event-ID") if last_id else (
        request.query_params.get("since", "0"), "since")
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ProblemError(400, "invalid-params", f"{name} must be a non-negative integer")
    return value + 1 if name == "Last-Event-ID" else value
