"""The servers' one table from dsh's errors to JSON-RPC error answers (issue 22).

The agent raises what went wrong; the SDK server, ACP and the web API answer through
:mod:`dsh.runtime.servers.errors`. Every error class has an answer, the sessions' own
errors keep the codes clients rely on (-32001 busy and retryable, -32602 with a
``data.code``), and a credential inside a URL never leaves in a message.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from dsh.core import errors, jsonrpc
from dsh.core.errors import (
    BusyError,
    CompactionError,
    ConfigError,
    DshError,
    InvalidArgumentError,
    JsonRpcError,
    ParseError,
    SessionBusyError,
    SessionHeldError,
    SessionNotFoundError,
    UsageError,
)
from dsh.runtime.servers.errors import code_of, http_status, to_wire

ROOT = Path(__file__).resolve().parents[2]


def test_every_error_class_has_an_answer() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, DshError)]
    assert len(classes) > 20
    for kind in classes:
        exc = kind.__new__(kind)  # no constructor arguments needed to ask for its code
        if isinstance(exc, JsonRpcError):
            continue  # it carries its own code
        assert isinstance(code_of(exc), int), kind


@pytest.mark.parametrize(("exc", "wire"), [
    (SessionNotFoundError("s1"), {"code": -32602, "message": "unknown session 's1'"}),
    (InvalidArgumentError("unknown model 'm'", code="unknown-model"),
     {"code": -32602, "message": "unknown model 'm'", "data": {"code": "unknown-model"}}),
    (SessionBusyError("session busy: queue full"),
     {"code": -32001, "message": "session busy: queue full", "data": {"retryable": True}}),
    (SessionHeldError("s1", {"host": "h", "pid": 7}),
     {"code": -32001, "message": "session busy: 's1' is held by another runtime (pid 7 on "
      "host h); retry once its work ends (an idle session is given back within seconds, "
      "a dead holder's lease taken over)",
      "data": {"retryable": True, "holder": {"host": "h", "pid": 7}}}),
    (CompactionError("compaction failed: boom", code="overloaded"),
     {"code": -32603, "message": "compaction failed: boom", "data": {"code": "overloaded"}}),
    (UsageError("bad"), {"code": -32602, "message": "bad"}),
    (ConfigError("bad file"), {"code": -32602, "message": "bad file"}),
    (DshError("the agent is closed"), {"code": -32603, "message": "the agent is closed"}),
    (ParseError("not JSON"), {"code": -32700, "message": "not JSON"}),
    (JsonRpcError(-32002, "not initialized"), {"code": -32002, "message": "not initialized"}),
    (BusyError("busy", [1]), {"code": -32001, "message": "busy", "data": [1]}),
])
def test_answers(exc: DshError, wire: dict[str, object]) -> None:
    assert to_wire(exc) == wire


def test_the_web_answers_from_the_same_table() -> None:
    assert http_status(SessionNotFoundError("s1")) == (404, "unknown-session",
                                                       "unknown session 's1'")
    assert http_status(InvalidArgumentError("no", code="unknown-model"))[:2] == (
        400, "invalid-params")
    assert http_status(SessionHeldError("s1", None))[:2] == (429, "busy")
    assert http_status(SessionBusyError("busy"))[:2] == (429, "busy")
    assert http_status(CompactionError("x"))[:2] == (503, "unavailable")
    assert http_status(DshError("x"))[:2] == (503, "unavailable")
    assert http_status(ParseError("not JSON"))[:2] == (500, "internal")
    assert http_status(JsonRpcError(jsonrpc.INVALID_PARAMS, "x"))[:2] == (400, "invalid-params")
    assert http_status(JsonRpcError(jsonrpc.METHOD_NOT_FOUND, "x"))[:2] == (500, "internal")


def test_no_server_picks_a_status_for_an_error_of_the_tree() -> None:
    """The web's own answers (a body too large, malformed JSON, an unknown approval) are
    its own; every status for an error of dsh's tree comes from the table."""
    routes = (ROOT / "src" / "dsh" / "runtime" / "web" / "routes.py").read_text(
        encoding="utf-8")
    statuses = sorted(set(re.findall(r'ProblemError\((\d+), "([a-z-]+)"', routes)))
    assert statuses == [("400", "bad-request"), ("400", "invalid-params"),
                        ("400", "malformed-json"), ("404", "unknown-approval"),
                        ("408", "timeout"), ("413", "too-large")]
    assert "unknown-session" not in routes


def test_a_credential_in_a_url_never_leaves() -> None:
    wire = to_wire(DshError("cannot reach https://user:secret@example.com/v1?api_key=k"))
    assert "secret" not in wire["message"] and "api_key=k" not in wire["message"]
