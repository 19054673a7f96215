"""Tests for :mod:`dsh.core.jsonrpc`: framing, message shape and request matching."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.core import jsonrpc
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
from dsh.core.jsonrpc import (
    Frame,
    FrameDecoder,
    FrameFault,
    Notification,
    PendingRequests,
    Request,
    Response,
    encode,
    parse_message,
)
from dsh.runtime.servers.errors import code_of

# -- helpers and strategies --------------------------------------------------------------


def frames(items: list[jsonrpc.Decoded]) -> list[dict[str, Any]]:
    assert all(isinstance(item, Frame) for item in items), items
    return [item.message for item in items if isinstance(item, Frame)]


def only_fault(items: list[jsonrpc.Decoded]) -> FrameFault:
    assert len(items) == 1 and isinstance(items[0], FrameFault), items
    return items[0]


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=6,
)
ids = st.integers() | st.text()
params = st.none() | st.dictionaries(st.text(), json_values, max_size=3) | st.lists(json_values)
messages = st.one_of(
    st.builds(jsonrpc.request, ids, st.text(), params),
    st.builds(jsonrpc.notification, st.text(), params),
    st.builds(jsonrpc.result, ids | st.none(), json_values),
    st.builds(jsonrpc.error, ids | st.none(), st.integers(), st.text(), json_values),
)


# -- encode and builders -----------------------------------------------------------------


def test_encode_is_compact_utf8_with_one_trailing_newline() -> None:
    frame = encode(jsonrpc.request(1, "say", {"text": "héllo\nworld ☃"}))
    expected = '{"jsonrpc":"2.0","id":1,"method":"say","params":{"text":"héllo\\nworld ☃"}}\n'
    assert frame == expected.encode()
    assert frame.count(b"\n") == 1


def test_encode_refuses_what_is_not_json() -> None:
    for bad in ({"x": object()}, {"x": float("nan")}, {"x": "\ud800"}):
        with pytest.raises(DshError, match="cannot be encoded") as info:
            encode(bad)
        assert code_of(info.value) == jsonrpc.INTERNAL_ERROR  # a server answers -32603
        assert info.value.__cause__ is not None


def test_encode_enforces_an_optional_size_limit() -> None:
    message = jsonrpc.result(1, "x" * 20)
    size = len(encode(message)) - 1
    assert encode(message, max_frame_bytes=size).endswith(b"\n")
    with pytest.raises(FrameTooLargeError) as info:
        encode(message, max_frame_bytes=size - 1)
    assert (info.value.size, info.value.limit) == (size, size - 1)


def test_builders_omit_absent_members() -> None:
    assert jsonrpc.request("a", "m") == {"jsonrpc": "2.0", "id": "a", "method": "m"}
    assert jsonrpc.request(1, "m", []) == {"jsonrpc": "2.0", "id": 1, "method": "m", "params": []}
    assert jsonrpc.notification("m") == {"jsonrpc": "2.0", "method": "m"}
    assert jsonrpc.notification("m", {"a": 1})["params"] == {"a": 1}
    assert jsonrpc.result(2, None) == {"jsonrpc": "2.0", "id": 2, "result": None}
    assert jsonrpc.error(None, -1, "no") == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -1, "message": "no"},
    }
    assert jsonrpc.error(3, -1, "no", {"why": 1})["error"]["data"] == {"why": 1}


def test_codes_are_the_documented_ones() -> None:
    assert (jsonrpc.PARSE_ERROR, jsonrpc.INVALID_REQUEST, jsonrpc.METHOD_NOT_FOUND) == (
        -32700,
        -32600,
        -32601,
    )
    assert (jsonrpc.INVALID_PARAMS, jsonrpc.INTERNAL_ERROR) == (-32602, -32603)
    assert (jsonrpc.SERVER_BUSY, jsonrpc.NOT_INITIALIZED, jsonrpc.REQUEST_CANCELLED) == (
        -32001,
        -32002,
        -32800,
    )
    assert jsonrpc.DEFAULT_MAX_FRAME_BYTES == 16 * 1024 * 1024
    assert FrameDecoder().max_frame_bytes == jsonrpc.DEFAULT_MAX_FRAME_BYTES


def test_import_is_light() -> None:
    code = (
        "import sys; import dsh; before = set(sys.modules); import dsh.core.jsonrpc; "
        "print(sorted({'asyncio', 'yaml', 'httpx'} & (set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- FrameDecoder ------------------------------------------------------------------------


def test_decoder_splits_lines_and_reports_sizes() -> None:
    decoder = FrameDecoder()
    items = decoder.feed(b'{"a":1}\n{"b":"\xc3\xa9"}\n{"c"')
    assert items == [Frame({"a": 1}, 7), Frame({"b": "é"}, 10)]
    assert decoder.pending_bytes == 4
    assert decoder.feed(b":3}\n") == [Frame({"c": 3}, 7)]
    assert decoder.pending_bytes == 0


def test_decoder_tolerates_crlf_and_skips_blank_lines() -> None:
    decoder = FrameDecoder()
    assert frames(decoder.feed(b'\n\r\n  \t\r\n{"a":1}\r\n\n{"b":2}\r')) == [{"a": 1}]
    assert frames(decoder.feed(b"\n")) == [{"b": 2}]


def test_decoder_rejects_a_nonpositive_limit() -> None:
    with pytest.raises(ValueError, match="positive"):
        FrameDecoder(0)


def test_finish_decodes_an_unterminated_last_line_and_resets() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b'{"a":1}') == []
    assert frames(decoder.finish()) == [{"a": 1}]
    assert decoder.finish() == []
    assert frames(decoder.feed(b'{"b":2}\n')) == [{"b": 2}]


@pytest.mark.parametrize(
    "line",
    [b"{", b"\xff{}", b'{"a":NaN}', b'{"a":Infinity}', b"\xef\xbb\xbf{}", b"[" * 100_000],
)
def test_unparsable_line_is_a_parse_fault(line: bytes) -> None:
    fault = only_fault(FrameDecoder().feed(line + b"\n"))
    assert fault.kind == "parse"
    assert isinstance(fault.error, ParseError)
    assert fault.size == len(line)
    assert fault.id is None
    response = fault.response()
    assert response["id"] is None
    assert response["error"]["code"] == jsonrpc.PARSE_ERROR


@pytest.mark.parametrize(
    ("line", "expected_id"),
    [
        (b"3", None),
        (b'"hi"', None),
        (b"null", None),
        (b"[]", None),
        (b'[{"jsonrpc":"2.0","id":7,"method":"m"}]', 7),
        (b'[{"jsonrpc":"2.0","id":true,"method":"m"}]', None),
        (b'[{"id":1},{"id":2}]', None),
    ],
)
def test_non_object_json_is_an_invalid_fault(line: bytes, expected_id: Any) -> None:
    fault = only_fault(FrameDecoder().feed(line + b"\n"))
    assert fault.kind == "invalid"
    assert isinstance(fault.error, InvalidMessageError)
    assert fault.id == expected_id
    assert fault.response()["id"] == expected_id
    assert fault.response()["error"]["code"] == jsonrpc.INVALID_REQUEST


def test_limit_counts_line_bytes_without_terminator() -> None:
    decoder = FrameDecoder(max_frame_bytes=9)
    assert frames(decoder.feed(b'{"a":"1"}\n{"a":"1"}\r\n')) == [{"a": "1"}, {"a": "1"}]
    fault = only_fault(decoder.feed(b'{"a":"12"}\n'))
    assert fault.kind == "too_large"
    assert isinstance(fault.error, FrameTooLargeError)
    assert (fault.error.size, fault.error.limit) == (10, 9)
    assert fault.response() == jsonrpc.error(None, jsonrpc.INVALID_REQUEST, fault.error.message)


def test_crlf_line_at_the_limit_survives_being_split_before_its_newline() -> None:
    decoder = FrameDecoder(max_frame_bytes=9)
    assert decoder.feed(b'{"a":"1"}\r') == []
    assert decoder.pending_bytes == 10
    assert frames(decoder.feed(b"\n")) == [{"a": "1"}]


def test_oversize_partial_line_is_reported_early_and_discarded() -> None:
    decoder = FrameDecoder(max_frame_bytes=8)
    assert decoder.feed(b'{"a":"') == []
    fault = only_fault(decoder.feed(b"x" * 100))
    assert fault.kind == "too_large"
    assert fault.size == 106
    assert decoder.pending_bytes == 0
    assert decoder.feed(b"y" * 1000) == []
    assert decoder.pending_bytes == 0
    assert frames(decoder.feed(b'"}\n{"b":2}\n')) == [{"b": 2}]


def test_oversize_line_within_one_chunk_is_one_fault() -> None:
    decoder = FrameDecoder(max_frame_bytes=8)
    items = decoder.feed(b'{"a":1}\n' + b"z" * 50 + b'\n{"b":2}\n')
    assert isinstance(items[1], FrameFault) and items[1].size == 50
    assert [type(item) for item in items] == [Frame, FrameFault, Frame]
    assert frames([items[0], items[2]]) == [{"a": 1}, {"b": 2}]


def test_oversize_line_at_eof_is_reported_once() -> None:
    decoder = FrameDecoder(max_frame_bytes=4)
    assert only_fault(decoder.feed(b"123456")).kind == "too_large"
    assert decoder.finish() == []


# -- parse_message -----------------------------------------------------------------------


def test_classifies_requests_notifications_and_responses() -> None:
    assert parse_message(jsonrpc.request(1, "m", {"a": 1})) == Request(1, "m", {"a": 1})
    assert parse_message(jsonrpc.request("x", "m")) == Request("x", "m", None)
    assert parse_message(jsonrpc.request(None, "m", [1])) == Request(None, "m", [1])
    assert parse_message(jsonrpc.notification("n")) == Notification("n")
    assert parse_message(jsonrpc.result(1, None)) == Response(1)
    assert parse_message(jsonrpc.result(1, [2])) == Response(1, result=[2])
    message = jsonrpc.error(None, -32700, "bad", {"x": 1})
    assert parse_message(message) == Response(None, error=message["error"])


def test_unknown_members_are_ignored() -> None:
    assert parse_message({**jsonrpc.notification("n"), "extra": 1}) == Notification("n")


@pytest.mark.parametrize(
    ("message", "reason", "expected_id"),
    [
        ({"id": 1, "method": "m"}, "jsonrpc", 1),
        ({"jsonrpc": "1.0", "id": 1, "method": "m"}, "jsonrpc", 1),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, '"id"', None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, '"id"', None),
        ({"jsonrpc": "2.0", "id": [1], "method": "m"}, '"id"', None),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, '"method"', 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "m", "params": 3}, '"params"', 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "m", "params": None}, '"params"', 1),
        ({"jsonrpc": "2.0", "method": "m", "params": "s"}, '"params"', None),
        ({"jsonrpc": "2.0", "id": 1, "method": "m", "result": 1}, "cannot carry", 1),
        ({"jsonrpc": "2.0", "id": 1}, "neither", 1),
        ({"jsonrpc": "2.0", "id": 1, "result": 1, "error": None}, "exactly one", 1),
        ({"jsonrpc": "2.0", "result": 1}, '"id"', None),
        ({"jsonrpc": "2.0", "id": 1, "error": "bad"}, '"error"', 1),
        ({"jsonrpc": "2.0", "id": 1, "error": {"message": "m"}}, "code", 1),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": True, "message": "m"}}, "code", 1),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": 1}}, "message", 1),
    ],
)
def test_malformed_messages_raise_invalid_message(
    message: dict[str, Any], reason: str, expected_id: Any
) -> None:
    with pytest.raises(InvalidMessageError, match=reason) as info:
        parse_message(message)
    assert isinstance(info.value, ProtocolError)
    assert info.value.rpc_code == jsonrpc.INVALID_REQUEST
    assert info.value.id == expected_id


def test_parse_message_refuses_a_non_object() -> None:
    with pytest.raises(InvalidMessageError, match="not a JSON object"):
        parse_message([1])  # type: ignore[arg-type]


def test_response_exception_carries_the_error_answer() -> None:
    assert Response(1, result=2).exception() is None
    exc = Response(1, error={"code": -32001, "message": "busy", "data": [1]}).exception()
    assert isinstance(exc, JsonRpcError)
    assert (exc.code, exc.rpc_code, exc.message, exc.data) == (-32001, -32001, "busy", [1])


@pytest.mark.parametrize(("code", "kind"), [
    (jsonrpc.SERVER_BUSY, BusyError),
    (jsonrpc.NOT_INITIALIZED, NotInitializedError),
    (jsonrpc.REQUEST_CANCELLED, RequestCancelledError),
    (jsonrpc.METHOD_NOT_FOUND, JsonRpcError),
    (-32000, JsonRpcError),
])
def test_error_answers_are_typed_by_code(code: int, kind: type[JsonRpcError]) -> None:
    exc = Response(1, error={"code": code, "message": "m", "data": {"d": 1}}).exception()
    assert type(exc) is kind
    assert exc is not None and (exc.code, exc.message, exc.data) == (code, "m", {"d": 1})
    assert set(jsonrpc.ANSWER_ERRORS) == {jsonrpc.SERVER_BUSY, jsonrpc.NOT_INITIALIZED,
                                          jsonrpc.REQUEST_CANCELLED}


# -- PendingRequests ---------------------------------------------------------------------


def test_next_id_is_monotonic_across_threads() -> None:
    pending = PendingRequests()
    seen: list[int] = []

    def take() -> None:
        seen.extend(pending.next_id() for _ in range(200))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(1, 801))


def test_resolve_settles_the_matching_waiter_once() -> None:
    pending = PendingRequests()
    first = pending.register(pending.next_id(), concurrent.futures.Future())
    second = pending.register(pending.next_id(), concurrent.futures.Future())
    assert len(pending) == 2
    assert pending.resolve(Response(2, result="two"))
    assert not pending.resolve(Response(2, result="again"))
    assert not pending.resolve(Response(99, result="stray"))
    assert not pending.resolve(Response(None, error={"code": -32700, "message": "x"}))
    assert second.result(timeout=0) == "two"
    assert not first.done()
    assert len(pending) == 1


def test_error_answer_fails_the_waiter_with_json_rpc_error() -> None:
    pending = PendingRequests()
    waiter = pending.register("a", concurrent.futures.Future())
    assert pending.resolve(Response("a", error={"code": -32601, "message": "no such method"}))
    with pytest.raises(JsonRpcError, match="no such method") as info:
        waiter.result(timeout=0)
    assert info.value.code == jsonrpc.METHOD_NOT_FOUND


def test_duplicate_id_is_refused() -> None:
    pending = PendingRequests()
    pending.register(1, concurrent.futures.Future())
    with pytest.raises(ValueError, match="already pending"):
        pending.register(1, concurrent.futures.Future())


def test_abandoned_waiter_is_skipped_and_discard_forgets() -> None:
    pending = PendingRequests()
    cancelled = pending.register(1, concurrent.futures.Future())
    assert cancelled.cancel()
    assert pending.resolve(Response(1, result="late"))
    assert cancelled.cancelled()
    waiter = pending.register(2, concurrent.futures.Future())
    assert pending.discard(2)
    assert not pending.discard(2)
    assert not pending.resolve(Response(2, result="late"))
    assert not waiter.done()
    assert len(pending) == 0


def test_fail_all_fails_every_waiter_now_and_later_with_one_exception() -> None:
    pending = PendingRequests()
    waiters = [pending.register(i, concurrent.futures.Future()) for i in range(3)]
    died = ProtocolError("runtime exited with status 1")
    pending.fail_all(died)
    pending.fail_all(ProtocolError("echo"))
    assert len(pending) == 0
    late = pending.register(pending.next_id(), concurrent.futures.Future())
    assert len(pending) == 0
    assert all(waiter.exception(timeout=0) is died for waiter in [*waiters, late])


def test_waiter_callbacks_may_reenter_the_table() -> None:
    pending = PendingRequests()
    waiter = pending.register(1, concurrent.futures.Future())
    waiter.add_done_callback(lambda _: pending.register(2, concurrent.futures.Future()))
    assert pending.resolve(Response(1, result=None))
    assert len(pending) == 1


def test_asyncio_futures_are_waiters() -> None:
    async def scenario() -> tuple[Any, BaseException | None]:
        loop = asyncio.get_running_loop()
        pending = PendingRequests()
        answered = pending.register(pending.next_id(), loop.create_future())
        orphan = pending.register(pending.next_id(), loop.create_future())
        loop.call_soon(pending.resolve, Response(1, result={"ok": True}))
        value = await answered
        pending.fail_all(ProtocolError("gone"))
        return value, orphan.exception()

    value, exc = asyncio.run(scenario())
    assert value == {"ok": True}
    assert isinstance(exc, ProtocolError)


# -- properties --------------------------------------------------------------------------


@settings(max_examples=80)
@given(
    st.lists(
        st.tuples(messages, st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\r\n \n"])),
        max_size=6,
    ),
    st.lists(st.integers(min_value=0), max_size=30),
)
def test_any_chunking_decodes_the_same_messages_in_order(
    batch: list[tuple[dict[str, Any], bytes]], cuts: list[int]
) -> None:
    stream = b"".join(encode(message)[:-1] + ending for message, ending in batch)
    decoder = FrameDecoder()
    items = [item for chunk in chunked(stream, cuts) for item in decoder.feed(chunk)]
    items += decoder.finish()
    decoded = frames(items)
    assert decoded == [message for message, _ in batch]
    assert [parse_message(m) for m in decoded] == [parse_message(m) for m, _ in batch]
    assert all(encode(message).count(b"\n") == 1 for message, _ in batch)


noise = st.binary(max_size=200) | st.lists(
    st.sampled_from([b"\n", b"\r", b"{", b"}", b"[", b'"', b"1", b" ", b"\xff", b'{"a":1}']),
    max_size=60,
).map(b"".join)


@settings(max_examples=200)
@given(noise, st.lists(st.integers(min_value=0), max_size=30), st.integers(1, 24))
def test_arbitrary_bytes_never_raise_and_memory_stays_bounded(
    data: bytes, cuts: list[int], cap: int
) -> None:
    decoder = FrameDecoder(max_frame_bytes=cap)
    items: list[jsonrpc.Decoded] = []
    for chunk in chunked(data, cuts):
        items += decoder.feed(chunk)
        assert decoder.pending_bytes <= cap + 1
    items += decoder.finish()
    assert decoder.pending_bytes == 0
    for item in items:
        assert isinstance(item, (Frame, FrameFault))
        if isinstance(item, Frame):
            assert item.size <= cap
            assert isinstance(item.message, dict)
        else:
            assert isinstance(item.error, ProtocolError)
            json.dumps(item.response())


@settings(max_examples=100)
@given(noise, messages, st.integers(0, 8), st.lists(st.integers(min_value=0), max_size=30))
def test_a_valid_line_after_garbage_always_decodes(
    garbage: bytes, message: dict[str, Any], slack: int, cuts: list[int]
) -> None:
    line = encode(message)
    cap = len(line) - 1 + slack
    garbage += b"x" * (cap + 2) if slack % 2 else b""  # half the cases end oversize
    decoder = FrameDecoder(max_frame_bytes=cap)
    chunks = chunked(garbage + b"\n" + line, cuts)
    items = [item for chunk in chunks for item in decoder.feed(chunk)]
    assert items[-1] == Frame(message, len(line) - 1)
