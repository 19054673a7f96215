"""How an error leaves a protocol server: one table from dsh's errors to their answers,
for the SDK server, ACP and the web API alike: a JSON-RPC code, and for the web an HTTP
status with a stable error code. No other module picks a wire code for dsh's errors.

The agent and the plugins raise what went wrong (:mod:`dsh.core.errors`) and know no wire
code; the servers answer with this table. The first row whose class the error is an
instance of wins, so subclasses come before their bases::

    error                 JSON-RPC                    HTTP
    JsonRpcError          its own code and data       by its code (below)
    ProtocolError         its rpc_code                by its code (below)
    SessionNotFoundError  -32602                      404 unknown-session
    SessionBusyError      -32001, data {retryable,    429 busy (Retry-After)
                          holder?}
    InvalidArgumentError  -32602, data {code}         400 invalid-params
                          when it names one
    UsageError            -32602                      400 invalid-params
    ConfigError           -32602                      400 invalid-params
    CompactionError       -32603, data {code}         503 unavailable
    DshError              -32603                      503 unavailable

An error carrying its own JSON-RPC code (a peer's answer, the protocol's own errors) is
answered on the web by that code (:data:`HTTP_BY_CODE`), 500 ``internal`` when it has
none there. Messages leave with credentials inside URLs masked
(:func:`dsh.core.redact.redact`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dsh.core import jsonrpc
from dsh.core.errors import (
    CompactionError,
    ConfigError,
    DshError,
    InvalidArgumentError,
    JsonRpcError,
    ProtocolError,
    SessionBusyError,
    SessionNotFoundError,
    UsageError,
)
from dsh.core.redact import redact


class Answer(NamedTuple):
    """How one kind of error is answered: its JSON-RPC code, and the web's HTTP status
    with the stable error code the body carries."""

    kind: type[DshError]
    rpc_code: int
    status: int
    http_code: str


ANSWERS: tuple[Answer, ...] = (
    Answer(SessionNotFoundError, jsonrpc.INVALID_PARAMS, 404, "unknown-session"),
    Answer(SessionBusyError, jsonrpc.SERVER_BUSY, 429, "busy"),
    Answer(InvalidArgumentError, jsonrpc.INVALID_PARAMS, 400, "invalid-params"),
    Answer(UsageError, jsonrpc.INVALID_PARAMS, 400, "invalid-params"),
    Answer(ConfigError, jsonrpc.INVALID_PARAMS, 400, "invalid-params"),
    Answer(CompactionError, jsonrpc.INTERNAL_ERROR, 503, "unavailable"),
    Answer(DshError, jsonrpc.INTERNAL_ERROR, 503, "unavailable"),
)
"""Each error class and its answers, first match wins."""

HTTP_BY_CODE = {
    jsonrpc.INVALID_PARAMS: (400, "invalid-params"),
    jsonrpc.SERVER_BUSY: (429, "busy"),
    jsonrpc.INTERNAL_ERROR: (503, "unavailable"),
}
"""The web's answer for an error that carries its own JSON-RPC code."""


def _answer(exc: DshError) -> Answer:
    return next(answer for answer in ANSWERS if isinstance(exc, answer.kind))


def code_of(exc: DshError) -> int:
    """The JSON-RPC code ``exc`` leaves a server with."""
    if isinstance(exc, JsonRpcError):
        return exc.code
    if isinstance(exc, ProtocolError):
        return exc.rpc_code
    return _answer(exc).rpc_code


def data_of(exc: DshError) -> Any:
    """The ``data`` member of the answer (None: none)."""
    if isinstance(exc, (JsonRpcError, SessionBusyError)):
        return exc.data
    if isinstance(exc, (InvalidArgumentError, CompactionError)) and exc.code is not None:
        return {"code": exc.code}
    return None


def to_wire(exc: DshError) -> dict[str, Any]:
    """The ``error`` member of a JSON-RPC response for ``exc``."""
    error: dict[str, Any] = {"code": code_of(exc), "message": redact(
        exc.message if isinstance(exc, JsonRpcError) else str(exc))}
    data = data_of(exc)
    if data is not None:
        error["data"] = data
    return error


def http_status(exc: DshError) -> tuple[int, str, str]:
    """The web API's ``(status, code, message)`` for ``exc``."""
    message = to_wire(exc)["message"]
    if isinstance(exc, (JsonRpcError, ProtocolError)):
        status, code = HTTP_BY_CODE.get(code_of(exc), (500, "internal"))
        return status, code, message
    answer = _answer(exc)
    return answer.status, answer.http_code, message
