"""Tests for :mod:`dsh.core.peer`: two real peers over an in-memory transport pair.

:class:`MemoryTransport` is a whole message transport, not a stand-in for the peer: each
message is encoded as a frame (:func:`dsh.core.jsonrpc.encode`, with the frame cap) and
decoded on the other side by a :class:`~dsh.core.jsonrpc.FrameDecoder`, delivered on a
later turn of the loop, as a pipe would. Pausing holds frames back; closing one end is EOF
for the other. The process-level suites (tests/protocol, tests/sdk, tests/mcp, tests/acp)
drive the same peer through every real transport.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dsh.core import jsonrpc
from dsh.core.errors import (
    BusyError,
    ConfigError,
    ConnectionClosedError,
    DshError,
    FrameTooLargeError,
    JsonRpcError,
    NotInitializedError,
    ParseError,
    ProtocolError,
    RequestCancelledError,
    RequestTimeoutError,
)
from dsh.core.jsonrpc import Frame, FrameDecoder, Notification
from dsh.core.peer import Peer, default_error_answer

LIMIT = 4096


class MemoryTransport:
    """One end of an in-memory connection: frames out to the other end, frames in from it."""

    def __init__(self, max_frame_bytes: int = LIMIT) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.other: MemoryTransport | None = None
        self.receiver: Peer | None = None
        self._decoder = FrameDecoder(max_frame_bytes)
        self._held: deque[bytes] = deque()
        self.paused = False
        self.pauses = 0
        self.closed = False
        self.sent: list[dict[str, Any]] = []

    def connect(self, receiver: Peer) -> None:
        self.receiver = receiver
        receiver.connection_made(self)

    # -- the MessageTransport interface -------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise ConnectionClosedError("this end is closed")
        frame = jsonrpc.encode(message, max_frame_bytes=self.max_frame_bytes)
        self.sent.append(message)
        self.write_raw(frame)

    async def drain(self) -> None:
        if self.closed:
            raise ConnectionClosedError("this end is closed")

    def pause_receiving(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_receiving(self) -> None:
        self.paused = False
        while self._held and not self.paused:
            self._deliver(self._held.popleft())

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.other is not None
            asyncio.get_running_loop().call_soon(self.other._eof)

    # -- the wire -------------------------------------------------------------------------

    def write_raw(self, data: bytes) -> None:
        """Bytes to the other end, as they are (for lines that are no message)."""
        assert self.other is not None
        asyncio.get_running_loop().call_soon(self.other._arrive, data)

    def _arrive(self, data: bytes) -> None:
        if self.paused:
            self._held.append(data)
        else:
            self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        assert self.receiver is not None
        for item in self._decoder.feed(data):
            self.receiver.message_received(item.message if isinstance(item, Frame) else item)

    def _eof(self) -> None:
        assert self.receiver is not None
        self.receiver.connection_lost(ConnectionClosedError("the other end closed (EOF)"))


def pair(client: Peer, server: Peer, *, limit: int = LIMIT
         ) -> tuple[MemoryTransport, MemoryTransport]:
    """Connect ``client`` and ``server``; their transports, in that order."""
    a, b = MemoryTransport(limit), MemoryTransport(limit)
    a.other, b.other = b, a
    a.connect(client)
    b.connect(server)
    return a, b


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, 10)

    return asyncio.run(bounded())


async def settle() -> None:
    """Let every frame in flight arrive (each hop is one call_soon)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def echo(params: Any) -> Any:
    return params


async def wait(params: Any) -> Any:
    await asyncio.sleep(params["seconds"])
    return params.get("tag")


def echo_server(**options: Any) -> Peer:
    server = Peer(strict=False, **options)
    server.methods({"echo": echo, "wait": wait})
    return server


def answering(code: int, data: Any = None) -> Callable[[Any], Awaitable[Any]]:
    async def handler(params: Any) -> Any:
        raise JsonRpcError(code, f"answered {code}", data)

    return handler


# -- requests and results -----------------------------------------------------------------


def test_a_request_gets_its_result_and_ids_count_up() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        a, _ = pair(client, server)
        assert await client.request("echo", {"x": [1, "é"]}) == {"x": [1, "é"]}
        assert await client.request("echo", [2]) == [2]
        assert [m["id"] for m in a.sent] == [1, 2]
        many = await asyncio.gather(*(client.request("echo", [i]) for i in range(20)))
        assert many == [[i] for i in range(20)]

    run(scenario())


def test_concurrent_requests_are_answered_out_of_order() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        pair(client, server)
        done: list[str] = []

        async def ask(seconds: float, tag: str) -> None:
            done.append(await client.request("wait", {"seconds": seconds, "tag": tag}))

        await asyncio.gather(ask(0.2, "slow"), ask(0, "fast"))
        assert done == ["fast", "slow"]

    run(scenario())


# -- timeouts ------------------------------------------------------------------------------


def test_a_timeout_is_typed_and_tells_the_peer_where_the_protocol_can() -> None:
    async def scenario() -> None:
        client = Peer(strict=True, cancel_method="notifications/cancelled")
        server = echo_server()
        cancels: list[Any] = []
        server.on_notification("notifications/cancelled", cancels.append)
        pair(client, server)
        with pytest.raises(RequestTimeoutError) as info:
            await client.request("wait", {"seconds": 5}, timeout=0.05)
        exc = info.value
        assert isinstance(exc, TimeoutError) and isinstance(exc, DshError)
        assert str(exc) == "no answer to wait within 0.05 s"
        await settle()
        assert cancels == [{"requestId": 1, "reason": "no answer within 0.05 s"}]
        # The late answer is dropped; the connection lives on.
        assert await client.request("echo", ["alive"]) == ["alive"]

    run(scenario())


def test_without_a_cancel_method_a_timeout_sends_nothing() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        seen: list[Notification] = []
        server.on_any_notification(seen.append)
        a, _ = pair(client, server)
        with pytest.raises(RequestTimeoutError):
            await client.request("wait", {"seconds": 5}, timeout=0.01)
        await settle()
        assert seen == [] and [m["method"] for m in a.sent] == ["wait"]

    run(scenario())


def test_the_timeout_error_class_is_the_callers_choice() -> None:
    class StartupTimeoutError(RequestTimeoutError):
        pass

    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        pair(client, server)
        with pytest.raises(StartupTimeoutError):
            await client.request("wait", {"seconds": 5}, timeout=0.01,
                                 timeout_error=StartupTimeoutError)

    run(scenario())


def test_a_cancelled_caller_also_tells_the_peer() -> None:
    async def scenario() -> None:
        client = Peer(strict=True, cancel_method="notifications/cancelled")
        server = echo_server()
        cancels: list[Any] = []
        server.on_notification("notifications/cancelled", cancels.append)
        pair(client, server)
        asked = asyncio.ensure_future(client.request("wait", {"seconds": 5}))
        await settle()
        asked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asked
        await settle()
        assert cancels == [{"requestId": 1, "reason": "the request was cancelled"}]

    run(scenario())


# -- error answers -------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "kind"), [
    (-32001, BusyError),
    (-32002, NotInitializedError),
    (-32800, RequestCancelledError),
    (-32602, JsonRpcError),
    (7, JsonRpcError),
])
def test_error_answers_become_typed_errors(code: int, kind: type[JsonRpcError]) -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), Peer(strict=False)
        server.method("fail", answering(code, {"retryable": True}))
        pair(client, server)
        with pytest.raises(kind) as info:
            await client.request("fail")
        assert type(info.value) is kind
        assert (info.value.code, info.value.message, info.value.data) == (
            code, f"answered {code}", {"retryable": True})

    run(scenario())


def test_error_answers_keep_code_and_data_and_the_connection_lives() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        server.method("busy", answering(-32001, {"retryable": True, "holder": None}))
        pair(client, server)
        with pytest.raises(BusyError) as info:
            await client.request("busy")
        assert info.value.retryable and info.value.data == {"retryable": True, "holder": None}
        assert await client.request("echo", [1]) == [1]

    run(scenario())


# -- the end of the connection -------------------------------------------------------------


def test_eof_fails_every_waiter_and_later_request_with_one_error() -> None:
    async def scenario() -> None:
        closed: list[DshError] = []

        def on_close(reason: DshError) -> DshError:
            closed.append(reason)
            return ConnectionClosedError(f"the server went away: {reason}")

        client, server = Peer(strict=True, on_close=on_close), echo_server()
        _, b = pair(client, server)
        waiters = [asyncio.ensure_future(client.request("wait", {"seconds": 30}))
                   for _ in range(3)]
        await settle()
        await b.close()
        errors = await asyncio.gather(*waiters, return_exceptions=True)
        assert len(closed) == 1 and "EOF" in str(closed[0])
        assert all(e is client.failure for e in errors)
        assert "the server went away" in str(client.failure)
        with pytest.raises(ConnectionClosedError) as later:
            await client.request("echo")
        assert later.value is client.failure
        with pytest.raises(ConnectionClosedError):
            client.notify("ping")
        assert client.notify("ping", quiet=True) is False
        assert client.closed

    run(scenario())


def test_fail_ends_the_connection_and_cancels_running_handlers() -> None:
    async def scenario() -> None:
        started = asyncio.Event()
        cancelled: list[bool] = []

        async def approve(params: Any) -> Any:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        client, server = Peer(strict=True), Peer(strict=False)
        client.method("approve", approve)
        pair(client, server)
        asked = asyncio.ensure_future(server.request("approve"))
        await started.wait()
        gone = ConnectionClosedError("client is closed")
        client.fail(gone)
        await settle()
        assert cancelled == [True] and client.failure is gone
        # Its last word, -32800, was still sent: the other side's waiter hears it.
        with pytest.raises(RequestCancelledError):
            await asked

    run(scenario())


# -- answering -----------------------------------------------------------------------------


def test_handler_errors_become_error_answers(caplog: pytest.LogCaptureFixture) -> None:
    def table(exc: DshError) -> dict[str, Any]:
        if isinstance(exc, ConfigError):
            return {"code": -32602, "message": f"table: {exc.message}"}
        return default_error_answer(exc)

    async def config_error(params: Any) -> Any:
        raise ConfigError("bad field")

    async def plain_dsh_error(params: Any) -> Any:
        raise DshError("it broke")

    async def crash(params: Any) -> Any:
        raise ValueError("secret detail")

    async def scenario() -> None:
        client = Peer(strict=True)
        server = Peer(strict=False, error_answer=table,
                      check_params=lambda p: "params.x: no" if p == {"x": "bad"} else None)
        server.methods({"config": config_error, "dsh": plain_dsh_error, "crash": crash,
                        "echo": echo})
        pair(client, server)
        with pytest.raises(JsonRpcError) as info:
            await client.request("config")
        assert (info.value.code, info.value.message) == (-32602, "table: bad field")
        with pytest.raises(JsonRpcError) as info:
            await client.request("dsh")
        assert (info.value.code, info.value.message) == (-32603, "it broke")
        with pytest.raises(JsonRpcError) as info:
            await client.request("crash")
        assert (info.value.code, info.value.message) == (-32603, "internal error (ValueError)")
        with pytest.raises(JsonRpcError) as info:
            await client.request("no/such")
        assert (info.value.code, info.value.message) == (-32601, "method not found: no/such")
        with pytest.raises(JsonRpcError) as info:
            await client.request("echo", {"x": "bad"})
        assert (info.value.code, info.value.message) == (-32602, "params.x: no")
        assert await client.request("echo", {"x": "good"}) == {"x": "good"}

    with caplog.at_level(logging.ERROR):
        run(scenario())
    # The traceback goes to the log, never onto the wire.
    assert any(r.exc_info and "secret detail" in str(r.exc_info[1]) for r in caplog.records)


def test_notifications_go_to_their_handler_else_the_catch_all() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        named: list[Any] = []
        other: list[Notification] = []
        server.on_notification("session/cancel", named.append)
        server.on_any_notification(other.append)
        pair(client, server)
        assert client.notify("session/cancel", {"sessionId": "s"})
        client.notify("progress", [1])
        await client.request("echo")  # notifications are never answered
        assert named == [{"sessionId": "s"}]
        assert other == [Notification("progress", [1])]

    run(scenario())


# -- limits --------------------------------------------------------------------------------


def test_oversize_line_to_a_lenient_peer_is_answered_and_the_stream_goes_on() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        a, _ = pair(client, server)
        errors: list[Any] = []
        client.on_any_notification(errors.append)
        answers: list[dict[str, Any]] = []
        a.receiver = _Recorder(client, answers)  # see what the server sends back raw
        a.write_raw(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":["' + b"y" * LIMIT
                    + b'"]}\n')
        await settle()
        assert answers[0]["id"] is None and answers[0]["error"]["code"] == -32600
        assert "exceeds the 4096-byte limit" in answers[0]["error"]["message"]
        a.receiver = client
        assert await client.request("echo", ["after"]) == ["after"]

    run(scenario())


def test_oversize_line_to_a_strict_peer_ends_the_connection() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        _, b = pair(client, server)
        asked = asyncio.ensure_future(client.request("wait", {"seconds": 30}))
        await settle()
        b.write_raw(b"x" * (LIMIT + 10) + b"\n")
        with pytest.raises(FrameTooLargeError) as info:
            await asked
        assert info.value is client.failure and info.value.limit == LIMIT

    run(scenario())


def test_garbage_to_a_strict_peer_is_a_protocol_error_and_to_a_lenient_one_an_answer() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        a, b = pair(client, server)
        answers: list[dict[str, Any]] = []
        a.receiver = _Recorder(client, answers)
        a.write_raw(b"{not json\n")
        a.write_raw(b'{"jsonrpc":"2.0","id":5,"method":"echo","params":"scalar"}\n')
        await settle()
        assert [(m["id"], m["error"]["code"]) for m in answers] == [(None, -32700), (5, -32600)]
        a.receiver = client
        asked = asyncio.ensure_future(client.request("wait", {"seconds": 30}))
        await settle()
        b.write_raw(b"{not json\n")
        with pytest.raises(ParseError):
            await asked
        assert isinstance(client.failure, ProtocolError)

    run(scenario())


def test_an_oversize_result_is_answered_as_an_error_for_its_id() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), Peer(strict=False)

        async def huge(params: Any) -> Any:
            return "x" * (2 * LIMIT)

        server.method("huge", huge)
        pair(client, server)
        with pytest.raises(JsonRpcError) as info:
            await client.request("huge")
        assert info.value.code == -32603 and "exceeds the 4096-byte limit" in info.value.message

    run(scenario())


def test_an_oversize_request_is_refused_before_it_is_sent() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        a, _ = pair(client, server)
        with pytest.raises(FrameTooLargeError):
            await client.request("echo", ["x" * LIMIT])
        assert a.sent == []
        assert await client.request("echo", [1]) == [1]
        assert [m["id"] for m in a.sent] == [2]

    run(scenario())


def test_the_in_flight_bound_pauses_receiving_and_serves_everything() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server(max_in_flight=4)
        _, b = pair(client, server)
        answers = await asyncio.gather(*(
            client.request("wait", {"seconds": 0.01, "tag": i}) for i in range(50)))
        assert answers == list(range(50))
        assert b.pauses > 0 and not b.paused

    run(scenario())


def test_the_owner_may_pause_receiving_and_nothing_is_lost() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        a, _ = pair(client, server)
        seen: list[Notification] = []
        client.on_any_notification(seen.append)
        client.pause_receiving()
        for i in range(5):
            server.notify("tick", [i])
        await settle()
        assert a.paused and seen == []
        client.resume_receiving()
        assert [n.params for n in seen] == [[i] for i in range(5)]

    run(scenario())


# -- serving -------------------------------------------------------------------------------


def test_serve_lets_running_requests_answer_then_cancels_stragglers() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server(drain_timeout=0.1)
        pair(client, server)
        serving = asyncio.ensure_future(server.serve())
        quick = asyncio.ensure_future(client.request("wait", {"seconds": 0.02, "tag": "q"}))
        stuck = asyncio.ensure_future(client.request("wait", {"seconds": 30}))
        await settle()
        server.stop()
        assert await quick == "q"
        with pytest.raises(RequestCancelledError, match="closing"):
            await stuck
        await serving
        # serve() closed its transport: the client saw EOF.
        await settle()
        assert isinstance(client.failure, ConnectionClosedError)

    run(scenario())


def test_a_request_to_the_other_side_fails_when_serving_stops() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        client.method("approval/request", wait)  # a human who never answers
        pair(client, server)
        serving = asyncio.ensure_future(server.serve())
        asked = asyncio.ensure_future(server.request("approval/request", {"seconds": 30},
                                                     timeout=30))
        await settle()
        server.stop()
        with pytest.raises(ConnectionClosedError, match="closed"):
            await asked
        await serving

    run(scenario())


def test_an_unanswerable_id_gets_an_anonymous_answer() -> None:
    async def scenario() -> None:
        client, server = Peer(strict=True), echo_server()
        a, _ = pair(client, server)
        answers: list[dict[str, Any]] = []
        a.receiver = _Recorder(client, answers)
        a.write_raw(b'{"jsonrpc":"2.0","id":"x\\ud800","method":"echo"}\n')
        await settle()
        assert answers == [{"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600,
            "message": "invalid JSON-RPC message: the id or method holds a lone surrogate"}}]

    run(scenario())


class _Recorder:
    """A receiver that records raw answers (to see what a server answers a bad line)."""

    def __init__(self, peer: Peer, answers: list[dict[str, Any]]) -> None:
        self._peer = peer
        self._answers = answers

    def connection_made(self, transport: Any) -> None:
        pass

    def message_received(self, item: Any) -> None:
        self._answers.append(item)

    def connection_lost(self, reason: DshError) -> None:
        self._peer.connection_lost(reason)
