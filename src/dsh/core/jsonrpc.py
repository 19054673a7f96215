"""JSON-RPC 2.0 over newline-delimited UTF-8 JSON, with no I/O.

Every dsh speaker of JSON-RPC (the SDK client, the SDK and ACP servers, the MCP client,
the test fakes) goes through this module, so framing, message shape and request matching
are written once and tested once. Transports own the pipes and
:class:`dsh.core.peer.Peer` the conversation; this module only turns bytes into messages
and responses into outcomes::

    bytes ──► FrameDecoder.feed ──┬─► Frame(dict, size) ──► parse_message ──┬─► Request
                                  │                                         ├─► Notification
                                  │                                         └─► Response
                                  └─► FrameFault("too_large" | "parse" | "invalid")
                                          └─► fault.response()  (the server's answer)

    request() / notification() / result() / error() ──► dict ──► encode ──► bytes

    Response.exception() ─► JsonRpcError, typed by code (-32001 BusyError, -32002
                            NotInitializedError, -32800 RequestCancelledError)

    PendingRequests:  next_id ─► register(id, waiter) ─► resolve(Response) | fail_all(exc)

The decoder never lets one line cost more than ``max_frame_bytes`` of memory: an oversize
line is reported as soon as it crosses the limit and skipped to its newline, after which
decoding resumes, so a misbehaving peer costs one error answer, not the connection.

Importing this module must stay cheap (the SDK client imports it): stdlib only, and the
waiter primitive is whatever the caller passes, so neither asyncio nor threads beyond a
lock are pulled in here.
"""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

from dsh.core.errors import (
    BusyError,
    DshError,
    FrameTooLargeError,
    InvalidMessageError,
    JsonRpcError,
    NotInitializedError,
    ParseError,
    ProtocolError,
    RequestCancelledError,
)

__all__ = [
    "ANSWER_ERRORS",
    "DEFAULT_MAX_FRAME_BYTES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NOT_INITIALIZED",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "SERVER_BUSY",
    "Decoded",
    "FaultKind",
    "Frame",
    "FrameDecoder",
    "FrameFault",
    "Message",
    "Notification",
    "Params",
    "PendingRequests",
    "Request",
    "RequestId",
    "Response",
    "Waiter",
    "encode",
    "error",
    "notification",
    "parse_message",
    "request",
    "result",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_BUSY = -32001
NOT_INITIALIZED = -32002
REQUEST_CANCELLED = -32800

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024

RequestId = str | int | None
Params = dict[str, Any] | list[Any]
FaultKind = Literal["too_large", "parse", "invalid"]


# -- encoding and builders -------------------------------------------------------------


def encode(message: dict[str, Any], *, max_frame_bytes: int | None = None) -> bytes:
    """One frame: compact UTF-8 JSON and a newline, the only one (``json.dumps`` escapes
    control characters, and UTF-8 never puts ``0x0A`` inside a character). NaN is refused:
    it is not JSON. Given ``max_frame_bytes``, an oversize frame fails here, where the sender
    can still answer with a small error rather than a frame the peer would drop unread.
    """
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        frame = (text + "\n").encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        # Our own message is unencodable (a stray object, NaN, a lone surrogate): that is an
        # internal error of the sender, hence the base class and its -32603.
        raise DshError(f"message cannot be encoded as JSON: {exc}") from exc
    size = len(frame) - 1
    if max_frame_bytes is not None and size > max_frame_bytes:
        raise FrameTooLargeError(size, max_frame_bytes)
    return frame


def request(id: RequestId, method: str, params: Params | None = None) -> dict[str, Any]:
    """A request; ``params`` is omitted when ``None``, as JSON-RPC allows."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: Params | None = None) -> dict[str, Any]:
    """A notification (no id, so no answer); ``params`` is omitted when ``None``."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def result(id: RequestId, value: Any) -> dict[str, Any]:
    """A success response; ``value`` may be ``None`` (JSON ``null`` is a valid result)."""
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: RequestId, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """An error response; ``id`` is ``None`` when the request's id could not be read."""
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": body}


# -- framing ---------------------------------------------------------------------------


class Frame(NamedTuple):
    """One decoded line: a JSON object, not yet checked for JSON-RPC shape."""

    message: dict[str, Any]
    size: int


class FrameFault(NamedTuple):
    """One line that could not become a :class:`Frame`; the stream goes on after it.

    ``error`` is the typed exception a transport may log or raise; :meth:`response` is the
    answer a server sends back. For ``too_large``, ``size`` is the bytes seen when the
    limit was crossed, which may be less than the whole line.
    """

    kind: FaultKind
    error: ProtocolError
    size: int

    @property
    def id(self) -> RequestId:
        """The id recovered from the offending line, else ``None`` (answered with null)."""
        return self.error.id if isinstance(self.error, InvalidMessageError) else None

    def response(self) -> dict[str, Any]:
        """The error response a server owes the peer for this line."""
        return error(self.id, self.error.rpc_code, self.error.message)


Decoded = Frame | FrameFault


class FrameDecoder:
    """Incremental newline-delimited JSON decoder with bounded memory.

    Feed it whatever the pipe returned; it keeps at most one partial line, and never more
    than ``max_frame_bytes + 1`` bytes of it (the extra byte is a ``\\r`` that may precede
    the newline). The limit counts a line's bytes without its ``\\n`` or ``\\r\\n``.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 1:
            raise ValueError(f"max_frame_bytes must be positive, not {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._partial = bytearray()
        # True while skipping the rest of an oversize line whose fault was already yielded.
        self._discarding = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of the unterminated line held; never above ``max_frame_bytes + 1``."""
        return len(self._partial)

    def feed(self, data: bytes) -> list[Decoded]:
        """Decode every line ``data`` completes, in order; hold back the unfinished rest."""
        items: list[Decoded] = []
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            self._complete_line(data, start, end, items)
            start = end + 1
        self._hold(data, start, items)
        return items

    def finish(self) -> list[Decoded]:
        """At EOF: decode a last line the peer did not terminate, and reset."""
        return self.feed(b"\n")

    def _complete_line(self, data: bytes, start: int, end: int, items: list[Decoded]) -> None:
        if self._discarding:
            self._discarding = False
            return
        size = len(self._partial) + end - start
        if size > self.max_frame_bytes + 1:
            # Too long even if it ends in "\r"; checked before copying so a huge line that
            # arrived in one read is never duplicated into the buffer.
            self._partial.clear()
            items.append(self._too_large(size))
            return
        self._partial += data[start:end]
        line = bytes(self._partial)
        self._partial.clear()
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self.max_frame_bytes:
            items.append(self._too_large(len(line)))
            return
        if line.strip(b" \t\r"):
            items.append(_decode_line(line))

    def _hold(self, data: bytes, start: int, items: list[Decoded]) -> None:
        if self._discarding:
            return
        size = len(self._partial) + len(data) - start
        if size > self.max_frame_bytes + 1:
            # Report now rather than at the newline: the peer may never send one, and the
            # answer should not wait on it.
            self._partial.clear()
            self._discarding = True
            items.append(self._too_large(size))
        else:
            self._partial += data[start:]

    def _too_large(self, size: int) -> FrameFault:
        return FrameFault("too_large", FrameTooLargeError(size, self.max_frame_bytes), size)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode_line(line: bytes) -> Decoded:
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        # UnicodeDecodeError is a ValueError; RecursionError comes from deep nesting. The
        # cause is not chained: it holds the whole line, which would outlive the fault.
        reason = f"frame is not valid UTF-8 JSON: {exc}"
        return FrameFault("parse", ParseError(reason), len(line))
    if isinstance(value, dict):
        return Frame(value, len(line))
    if isinstance(value, list):
        # A batch. Unsupported; a batch of one request still gets its id back so that a
        # client waiting on it fails instead of hanging.
        only = value[0] if len(value) == 1 and isinstance(value[0], dict) else {}
        rid = _recover_id(only)
        fault = InvalidMessageError("JSON-RPC batches are not supported", id=rid)
    else:
        fault = InvalidMessageError("frame is JSON but not an object")
    return FrameFault("invalid", fault, len(line))


# -- messages --------------------------------------------------------------------------


class Request(NamedTuple):
    """A call that expects a :class:`Response` with the same ``id``."""

    id: RequestId
    method: str
    params: Params | None = None


class Notification(NamedTuple):
    """A one-way message: no id, never answered."""

    method: str
    params: Params | None = None


class Response(NamedTuple):
    """The answer to a request: ``error`` (the wire object) is ``None`` on success."""

    id: RequestId
    result: Any = None
    error: dict[str, Any] | None = None

    def exception(self) -> JsonRpcError | None:
        """The error answer as the exception a caller should see, or ``None``: typed for
        the codes a caller acts on (:data:`ANSWER_ERRORS`), else a :class:`JsonRpcError`
        carrying the code and data."""
        if self.error is None:
            return None
        code, message, data = self.error["code"], self.error["message"], self.error.get("data")
        typed = ANSWER_ERRORS.get(code)
        return JsonRpcError(code, message, data) if typed is None else typed(message, data)


ANSWER_ERRORS: dict[int, type[BusyError | NotInitializedError | RequestCancelledError]] = {
    SERVER_BUSY: BusyError,
    NOT_INITIALIZED: NotInitializedError,
    REQUEST_CANCELLED: RequestCancelledError,
}
"""Error answers that become their own exception class, by code: busy is retryable, the
other two say the request was sound but came too early or was given up."""


Message = Request | Notification | Response


def _valid_id(value: Any) -> bool:
    # bool is an int subclass, but ``true`` is not a JSON-RPC id.
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )


def _recover_id(obj: dict[str, Any]) -> RequestId:
    value = obj.get("id")
    return value if _valid_id(value) else None


def parse_message(obj: dict[str, Any]) -> Message:
    """Classify a decoded object, checking the JSON-RPC 2.0 shape.

    Raises :class:`InvalidMessageError` (-32600) carrying the id when it is readable, so a
    server can answer the request that was malformed. Members the spec does not define
    are ignored.
    """
    if not isinstance(obj, dict):
        raise InvalidMessageError("message is not a JSON object")
    rid = _recover_id(obj)

    def invalid(reason: str) -> InvalidMessageError:
        return InvalidMessageError(f"invalid JSON-RPC message: {reason}", id=rid)

    if obj.get("jsonrpc") != "2.0":
        raise invalid('"jsonrpc" must be "2.0"')
    if "id" in obj and not _valid_id(obj["id"]):
        raise invalid('"id" must be a string, an integer or null')
    has_result, has_error = "result" in obj, "error" in obj
    if "method" in obj:
        method, params = obj["method"], obj.get("params")
        if not isinstance(method, str):
            raise invalid('"method" must be a string')
        if has_result or has_error:
            raise invalid("a request cannot carry a result or an error")
        if "params" in obj and not isinstance(params, (dict, list)):
            raise invalid('"params" must be an object or an array')
        if "id" in obj:
            return Request(obj["id"], method, params)
        return Notification(method, params)
    if has_result == has_error:
        raise invalid("neither a request (method) nor a response (exactly one of result, error)")
    if "id" not in obj:
        raise invalid('a response must carry an "id"')
    if has_error:
        body = obj["error"]
        if not isinstance(body, dict):
            raise invalid('"error" must be an object')
        code = body.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            raise invalid('"error.code" must be an integer')
        if not isinstance(body.get("message"), str):
            raise invalid('"error.message" must be a string')
        return Response(obj["id"], error=body)
    return Response(obj["id"], result=obj["result"])


# -- request matching ------------------------------------------------------------------


class Waiter(Protocol):
    """What a caller waits on: an ``asyncio.Future`` and a ``concurrent.futures.Future`` fit.

    Its methods are called in the thread that calls :meth:`PendingRequests.resolve` or
    :meth:`PendingRequests.fail_all`; an asyncio client therefore resolves from its loop.
    """

    def done(self) -> bool: ...

    def set_result(self, result: Any, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


W = TypeVar("W", bound=Waiter)


def _settle(waiter: Waiter, value: Any = None, exc: BaseException | None = None) -> None:
    # A waiter already done was abandoned by its caller (cancelled, timed out); setting it
    # again would raise InvalidStateError in the reader, which is not the reader's fault.
    if waiter.done():
        return
    if exc is None:
        waiter.set_result(value)
    else:
        waiter.set_exception(exc)


class PendingRequests:
    """Requests in flight, by id: the table :class:`dsh.core.peer.Peer` keeps (and nothing
    else: ``tests/architecture`` holds it to that).

    Waiters are popped under the lock and settled outside it: each is settled once, and
    its callbacks may re-enter. After :meth:`fail_all` a request registered later fails at
    once with the same exception, since no reader is left to answer it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiters: dict[RequestId, Waiter] = {}
        self._failure: BaseException | None = None

    def next_id(self) -> int:
        """A fresh request id: 1, 2, 3 ... for the life of this table."""
        with self._lock:
            return next(self._ids)

    def register(self, id: RequestId, waiter: W) -> W:
        """Track ``waiter`` until a response with ``id`` arrives; returns ``waiter``.

        Register before writing the request, or a fast answer could find no waiter.
        """
        with self._lock:
            failure = self._failure
            if failure is None:
                if id in self._waiters:
                    raise ValueError(f"request id {id!r} is already pending")
                self._waiters[id] = waiter
                return waiter
        _settle(waiter, exc=failure)
        return waiter

    def resolve(self, response: Response) -> bool:
        """Settle the waiter for ``response.id`` (an error answer as :class:`JsonRpcError`);
        ``False`` when no such request is pending."""
        with self._lock:
            waiter = self._waiters.pop(response.id, None)
        if waiter is None:
            return False
        _settle(waiter, response.result, response.exception())
        return True

    def discard(self, id: RequestId) -> bool:
        """Forget a request whose caller gave up (timeout, cancellation); a late answer to
        it then resolves nothing. ``False`` when it was not pending."""
        with self._lock:
            return self._waiters.pop(id, None) is not None

    def fail_all(self, exc: BaseException) -> None:
        """Fail every waiter with ``exc`` (the peer is gone), and every later one too; a
        second call keeps the first exception, the cause, over its echoes."""
        with self._lock:
            if self._failure is None:
                self._failure = exc
            waiters = list(self._waiters.values())
            self._waiters.clear()
            failure = self._failure
        for waiter in waiters:
            _settle(waiter, exc=failure)

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiters)
