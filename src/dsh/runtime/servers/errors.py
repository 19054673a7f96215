"""How an error leaves a protocol server: one table from dsh's errors to JSON-RPC error
answers, for the SDK server, ACP and the web API alike (the web maps the code on to an
HTTP status, :data:`HTTP_STATUS`).

The agent and the plugins raise what went wrong (:mod:`dsh.core.errors`) and know no wire
code; the servers answer with this table. The first row whose class the error is an
instance of wins, so subclasses come before their bases::

    JsonRpcError          its own code and data (a server's own answer, or a peer's)
    ProtocolError         its rpc_code (the JSON-RPC protocol's own errors)
    SessionBusyError      -32001 busy, data {retryable, holder?}
    InvalidArgumentError  -32602, data {code} when it names one
    UsageError            -32602
    ConfigError           -32602
    CompactionError       -32603, data {code}
    DshError              -32603

Messages leave with credentials inside URLs masked (:func:`dsh.core.redact.redact`).
"""

from __future__ import annotations

from typing import Any

from dsh.core import jsonrpc
from dsh.core.errors import (
    CompactionError,
    ConfigError,
    DshError,
    InvalidArgumentError,
    JsonRpcError,
    ProtocolError,
    SessionBusyError,
    UsageError,
)
from dsh.core.redact import redact

CODES: tuple[tuple[type[DshError], int], ...] = (
    (SessionBusyError, jsonrpc.SERVER_BUSY),
    (InvalidArgumentError, jsonrpc.INVALID_PARAMS),
    (UsageError, jsonrpc.INVALID_PARAMS),
    (ConfigError, jsonrpc.INVALID_PARAMS),
    (CompactionError, jsonrpc.INTERNAL_ERROR),
    (DshError, jsonrpc.INTERNAL_ERROR),
)
"""Each error class and its JSON-RPC code, first match wins."""

HTTP_STATUS = {
    jsonrpc.INVALID_PARAMS: (400, "invalid-params"),
    jsonrpc.SERVER_BUSY: (429, "busy"),
    jsonrpc.INTERNAL_ERROR: (503, "unavailable"),
}
"""The web API's answer for a JSON-RPC code: HTTP status and its stable error code."""


def code_of(exc: DshError) -> int:
    """The JSON-RPC code ``exc`` leaves a server with."""
    if isinstance(exc, JsonRpcError):
        return exc.code
    if isinstance(exc, ProtocolError):
        return exc.rpc_code
    return next(code for kind, code in CODES if isinstance(exc, kind))


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
    wire = to_wire(exc)
    status, code = HTTP_STATUS.get(wire["code"], (500, "internal"))
    return status, code, wire["message"]
