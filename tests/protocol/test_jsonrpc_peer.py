"""The servers' JSON-RPC peer over real pipes: error answers, concurrency, requests out,
limits (the core peer, configured as every server runs it, on the servers' stdio
transport)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from peerkit import serving_peer

from dsh.core.errors import (
    BusyError,
    ConfigError,
    ConnectionClosedError,
    JsonRpcError,
    RequestTimeoutError,
)
from dsh.core.peer import Peer


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


def echo_methods(peer: Peer) -> None:
    async def echo(params: Any) -> Any:
        return params

    async def slow(params: Any) -> Any:
        await asyncio.sleep(params["delay"])
        return params["tag"]

    async def rpc_error(params: Any) -> Any:
        raise JsonRpcError(-32001, "session busy", {"retryable": True})

    async def dsh_error(params: Any) -> Any:
        raise ConfigError("bad field")

    async def crash(params: Any) -> Any:
        raise ValueError("secret detail")

    async def huge(params: Any) -> Any:
        return "x" * 5000

    peer.methods(
        {"echo": echo, "slow": slow, "rpc_error": rpc_error, "dsh_error": dsh_error,
         "crash": crash, "huge": huge}
    )


def test_request_gets_result_with_same_id() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            assert await client.call("echo", {"a": [1, "é"]}) == {
                "jsonrpc": "2.0", "id": 1, "result": {"a": [1, "é"]}
            }
            client.send({"jsonrpc": "2.0", "id": "str-id", "method": "echo", "params": [1]})
            assert (await client.recv())["id"] == "str-id"

    run(scenario())


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", -32700),
        (b"\xff\xfe", -32700),
        (b"[1, 2]", -32600),
        (b"[]", -32600),
        (b'"text"', -32600),
        (b"42", -32600),
        (b'{"jsonrpc": "1.0", "method": "echo"}', -32600),
        (b'{"method": 3}', -32600),
    ],
)
def test_bad_lines_answered_with_null_id_and_connection_survives(line: bytes, code: int) -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            client.send_raw(line + b"\n")
            answer = await client.recv()
            assert answer["id"] is None
            assert answer["error"]["code"] == code
            assert (await client.call("echo", ["alive"]))["result"] == ["alive"]

    run(scenario())


def test_invalid_request_keeps_readable_id() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            client.send({"jsonrpc": "2.0", "id": 7, "method": "echo", "params": "scalar"})
            assert await client.recv() == {
                "jsonrpc": "2.0", "id": 7,
                "error": {"code": -32600, "message": 'invalid JSON-RPC message: "params" '
                          "must be an object or an array"},
            }

    run(scenario())


def test_unknown_method() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            answer = await client.call("no/such")
            assert answer["error"] == {"code": -32601, "message": "method not found: no/such"}

    run(scenario())


def test_handler_errors_map_to_codes(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            assert (await client.call("rpc_error"))["error"] == {
                "code": -32001, "message": "session busy", "data": {"retryable": True}
            }
            assert (await client.call("dsh_error"))["error"] == {
                "code": -32602, "message": "bad field"
            }
            crash = (await client.call("crash"))["error"]
            assert crash == {"code": -32603, "message": "internal error (ValueError)"}

    run(scenario())
    # The traceback goes to the log (stderr in a process), never onto the wire.
    assert any(r.exc_info and "secret detail" in str(r.exc_info[1]) for r in caplog.records)


def test_oversize_frame_is_an_error_and_the_stream_goes_on() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods, max_frame_bytes=1000) as (_, client):
            big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "echo",
                              "params": ["y" * 5000]}).encode()
            client.send_raw(big[:3000])  # the fault must not wait for the newline
            answer = await client.recv()
            assert answer["id"] is None
            assert answer["error"]["code"] == -32600
            assert "exceeds the 1000-byte limit" in answer["error"]["message"]
            client.send_raw(big[3000:] + b"\n")
            assert (await client.call("echo", ["after"]))["result"] == ["after"]

    run(scenario())


def test_oversize_result_becomes_an_error_for_its_id() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods, max_frame_bytes=1000) as (_, client):
            answer = await client.call("huge")
            assert answer["id"] == 1
            assert answer["error"]["code"] == -32603

    run(scenario())


def test_concurrent_requests_answer_out_of_order() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            slow = client.request("slow", {"delay": 0.3, "tag": "slow"})
            fast = client.request("slow", {"delay": 0, "tag": "fast"})
            first, second = await client.recv(), await client.recv()
            assert (first["id"], first["result"]) == (fast, "fast")
            assert (second["id"], second["result"]) == (slow, "slow")

    run(scenario())


def test_in_flight_bound_pushes_back_but_serves_everything() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods, max_in_flight=4) as (_, client):
            ids = [client.request("slow", {"delay": 0.01, "tag": i}) for i in range(50)]
            answers = {}
            for _ in ids:
                frame = await client.recv()
                answers[frame["id"]] = frame["result"]
            assert answers == {rid: i for i, rid in enumerate(ids)}

    run(scenario())


def test_notifications_in_and_out() -> None:
    seen: list[Any] = []

    def setup(peer: Peer) -> None:
        echo_methods(peer)
        peer.on_notification("ping", seen.append)

    async def scenario() -> None:
        async with serving_peer(setup) as (peer, client):
            client.send({"jsonrpc": "2.0", "method": "ping", "params": {"n": 1}})
            client.send({"jsonrpc": "2.0", "method": "unknown/notification"})
            await client.call("echo")  # notifications are never answered
            peer.notify("session.status", {"status": "idle"})
            assert await client.recv() == {
                "jsonrpc": "2.0", "method": "session.status", "params": {"status": "idle"}
            }

    run(scenario())
    assert seen == [{"n": 1}]


def test_server_to_client_request_is_matched_by_id() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (peer, client):
            asked = asyncio.ensure_future(peer.request("approval/request", {"q": 1}, timeout=5))
            frame = await client.recv()
            assert frame["method"] == "approval/request"
            client.send({"jsonrpc": "2.0", "id": frame["id"], "result": {"decision": "allow"}})
            assert await asked == {"decision": "allow"}

            failing = asyncio.ensure_future(peer.request("approval/request", None, timeout=5))
            frame = await client.recv()
            client.send({"jsonrpc": "2.0", "id": frame["id"],
                         "error": {"code": -1, "message": "no"}})
            with pytest.raises(JsonRpcError, match="no"):
                await failing

            busy = asyncio.ensure_future(peer.request("approval/request", None, timeout=5))
            frame = await client.recv()
            client.send({"jsonrpc": "2.0", "id": frame["id"],
                         "error": {"code": -32001, "message": "later", "data": {"n": 1}}})
            with pytest.raises(BusyError) as info:
                await busy
            assert (info.value.code, info.value.data) == (-32001, {"n": 1})

            with pytest.raises(RequestTimeoutError, match="no answer to approval/request"):
                await peer.request("approval/request", None, timeout=0.05)
            late = await client.recv()  # no cancel notification: the SDK protocol has none
            client.send({"jsonrpc": "2.0", "id": late["id"], "result": "too late"})
            assert (await client.call("echo", ["alive"]))["result"] == ["alive"]

    run(scenario())


def test_eof_fails_waiting_server_requests_and_ends_serving() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (peer, client):
            asked = asyncio.ensure_future(peer.request("approval/request", None))
            await client.recv()
            client.close()
            with pytest.raises(ConnectionClosedError, match="closed"):
                await asked
            assert await client.at_eof()

    run(scenario())


def test_eof_lets_running_requests_answer_first() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            rid = client.request("slow", {"delay": 0.1, "tag": "late"})
            client.close()
            assert await client.recv() == {"jsonrpc": "2.0", "id": rid, "result": "late"}
            assert await client.at_eof()

    run(scenario())


def test_stop_cancels_stragglers_with_an_answer() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods, drain_timeout=0.05) as (peer, client):
            rid = client.request("slow", {"delay": 30, "tag": "never"})
            await asyncio.sleep(0.05)
            peer.stop()
            answer = await client.recv()
            assert answer["id"] == rid
            assert answer["error"]["code"] == -32800
            assert await client.at_eof()

    run(scenario())


def test_unterminated_last_line_is_still_answered() -> None:
    async def scenario() -> None:
        async with serving_peer(echo_methods) as (_, client):
            client.send_raw(b'{"jsonrpc":"2.0","id":9,"method":"echo","params":[9]}')
            client.close()
            assert (await client.recv())["result"] == [9]

    run(scenario())
