"""The client over a well-behaved runtime (the fake's ``ok`` mode, a real process): runs,
streams, errors as answers, approvals, subscriptions, the stderr tail, concurrency."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sdkkit import SETTLE, assert_gone

import dsh.sdk._router
import dsh.sdk._transport
from dsh.sdk import (
    ApprovalRequest,
    AsyncDshClient,
    BusyError,
    ClientConfig,
    DshClient,
    DshError,
    Event,
    FrameTooLargeError,
    JsonRpcError,
    Notification,
    RequestTimeoutError,
    Stage,
)

RUN_TYPES = ["agent/inbox/spliced", "assistant/delta", "assistant/message", "turn/end"]


def test_run_collects_from_receipt_to_idle(fake: Callable[..., ClientConfig]) -> None:
    async def scenario() -> None:
        async with AsyncDshClient(fake("ok")) as client:
            session = await client.new_session()
            result = await session.run("hello")
            assert (result.session_id, result.final_text) == (session.id, "echo: hello")
            assert result.stop_reason == "completed"
            # The stale event and status the fake sends before the receipt are skipped.
            assert [e.type for e in result.events] == RUN_TYPES
            assert all(isinstance(e, Event) and e.session_id == session.id
                       for e in result.events)
            again = await session.run([{"type": "text", "text": "blocks"}])
            assert again.final_text == "echo: blocks"
            with pytest.raises(ValueError, match="prompt"):
                await session.run([])

    asyncio.run(scenario())


def test_stream_yields_events_and_can_stop_early(fake: Callable[..., ClientConfig]) -> None:
    async def scenario() -> None:
        async with AsyncDshClient(fake("ok")) as client:
            session = await client.new_session()
            seen = [event.type async for event in session.stream("one")]
            assert seen == RUN_TYPES
            async for event in session.stream("two"):
                assert event.type == "agent/inbox/spliced"
                break
            # Leaving early closed its subscription; the next run is not disturbed.
            assert (await session.run("three")).final_text == "echo: three"

    asyncio.run(scenario())
    with DshClient(fake("ok")) as client:
        session = client.new_session()
        assert [e.type for e in session.stream("sync")] == RUN_TYPES
        for _ in session.stream("early"):
            break
        assert session.run("after").final_text == "echo: after"
        assert session.cancel() is False


def test_error_answers_are_typed_and_the_client_lives_on(
        fake: Callable[..., ClientConfig]) -> None:
    with DshClient(fake("ok")) as client:
        session = client.new_session()
        with pytest.raises(BusyError) as busy:
            session.run("busy")
        assert busy.value.code == -32001 and busy.value.retryable
        assert isinstance(busy.value, JsonRpcError)
        with pytest.raises(JsonRpcError) as missing:
            client.resume_session("nope")
        assert missing.value.code == -32602 and "no such session" in str(missing.value)
        assert client.resume_session(session.id).id == session.id
        with pytest.raises(JsonRpcError) as unknown:
            client.request("no/such/method")
        assert unknown.value.code == -32601
        with pytest.raises(RequestTimeoutError) as late:
            client.request("test/never", timeout=0.2)
        assert isinstance(late.value, TimeoutError)
        with pytest.raises(FrameTooLargeError):
            client.request("session/list", {"pad": "x" * client.config.max_frame_bytes})
        assert [s["sessionId"] for s in client.sessions()] == [session.id]
        assert [t["name"] for t in client.tools()] == ["echo"]


def test_frames_far_beyond_one_mebibyte(fake: Callable[..., ClientConfig]) -> None:
    text = "y" * (3 * 1024 * 1024)
    with DshClient(fake("ok")) as client:
        assert client.new_session().run(text).final_text == f"echo: {text}"


def test_readiness_reports_stage_and_reload_required(
        fake: Callable[..., ClientConfig]) -> None:
    with DshClient(fake("ok")) as client:
        readiness = client.readiness()
        assert readiness.stage is Stage.TOOLS_READY and readiness.reload_required is False
        assert client.runtime is not None and client.runtime.carrier == "exe"
        assert client.runtime.version == "0.0-fake"
        assert client.server_info["serverInfo"]["name"] == "dsh-sdk-runtime"
    with DshClient(fake("ok", env={"FAKE_RELOAD_REQUIRED": "1"})) as client:
        assert client.readiness().reload_required is True


def _initialize_params(record: Path) -> dict[str, Any]:
    for line in record.read_text().splitlines():
        message = json.loads(line)
        if message.get("method") == "initialize":
            return message["params"]
    raise AssertionError("no initialize recorded")


def test_initialize_sends_the_route_and_declares_approvals_only_with_a_callback(
        tmp_path: Path, fake: Callable[..., ClientConfig]) -> None:
    plain, declared = tmp_path / "plain.jsonl", tmp_path / "declared.jsonl"
    config = fake("ok", provider="scripted", model="m1", reasoning_effort="low",
                  max_tokens=64, env={"FAKE_RUNTIME_RECORD": str(plain)})
    with DshClient(config) as client:
        # The fake asks anyway: a client without a handler answers -32601, never hangs.
        assert client.new_session().run("approve").final_text == "approval: error -32601"
    params = _initialize_params(plain)
    assert "capabilities" not in params
    assert {k: params[k] for k in ("provider", "model", "reasoningEffort", "maxTokens")} == {
        "provider": "scripted", "model": "m1", "reasoningEffort": "low", "maxTokens": 64}
    assert params["clientInfo"]["name"] == "dsh.sdk"
    config = fake("ok", env={"FAKE_RUNTIME_RECORD": str(declared)})
    with DshClient(config, on_approval=lambda request: "allow") as client:
        assert client.new_session().run("approve").final_text == "approval: allow"
    params = _initialize_params(declared)
    assert params["capabilities"] == {"approvals": True}
    assert "provider" not in params and "model" not in params


def test_async_approval_callbacks(fake: Callable[..., ClientConfig]) -> None:
    asked: list[ApprovalRequest] = []

    async def deny(request: ApprovalRequest) -> str:
        asked.append(request)
        await asyncio.sleep(0)
        return "deny"

    def broken(request: ApprovalRequest) -> str:
        raise RuntimeError("the approver fell over")

    async def scenario() -> None:
        async with AsyncDshClient(fake("ok"), on_approval=deny) as client:
            session = await client.new_session()
            assert (await session.run("approve")).final_text == "approval: deny"
            assert asked == [ApprovalRequest(session.id, {"name": "echo", "arguments": {}})]
        async with AsyncDshClient(fake("ok"), on_approval=broken) as client:
            session = await client.new_session()
            assert (await session.run("approve")).final_text == "approval: error -32603"
        async with AsyncDshClient(fake("ok"), on_approval=lambda r: "maybe") as client:
            session = await client.new_session()
            assert (await session.run("approve")).final_text == "approval: error -32603"

    asyncio.run(scenario())


def test_subscriptions_see_notifications_in_order(fake: Callable[..., ClientConfig]) -> None:
    async def scenario() -> None:
        async with AsyncDshClient(fake("ok")) as client:
            statuses = client.subscribe(lambda n: n.method == "session.status")
            everything = client.subscribe()
            await client.notify("test/ignored", {"x": 1})
            await (await client.new_session()).run("hi")
            first = await statuses.get()
            assert isinstance(first, Notification) and first.method == "session.status"
            assert first.params["status"] == "idle"  # type: ignore[index]
            everything.close()
            async for _ in everything:
                pass  # a closed subscription drains what it had, then stops
            statuses.close()

    asyncio.run(scenario())
    with DshClient(fake("ok")) as client, client.subscribe() as watcher:
        client.new_session().run("hi")
        assert watcher.get(timeout=5).method == "session.event"
        with pytest.raises(TimeoutError):
            for _ in range(100):
                watcher.get(timeout=0.05)


def test_stderr_is_drained_into_a_bounded_tail_and_the_callback(
        fake: Callable[..., ClientConfig]) -> None:
    lines: list[str] = []

    async def scenario() -> tuple[str, ...]:
        async with AsyncDshClient(fake("ok", stderr=lines.append)) as client:
            await (await client.new_session()).run("stderr 500")
            return client.stderr_tail

    tail = asyncio.run(scenario())
    assert len(tail) == 200
    assert tail[-1] == "fake stderr line 499" and tail[0] == "fake stderr line 300"
    assert lines == [f"fake stderr line {i}" for i in range(500)]


def test_sync_client_serves_many_threads_on_one_loop(
        fake: Callable[..., ClientConfig]) -> None:
    errors: list[BaseException] = []
    with DshClient(fake("ok")) as client:
        session = client.new_session()

        def work() -> None:
            try:
                for _ in range(10):
                    assert client.tools()[0]["name"] == "echo"
                assert session.run("t").final_text == "echo: t"
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors


def test_calling_the_sync_client_from_its_loop_thread_is_refused(
        fake: Callable[..., ClientConfig]) -> None:
    refused: list[BaseException] = []
    holder: list[DshClient] = []

    def on_line(line: str) -> None:
        if holder and not refused:
            try:
                holder[0].tools()
            except DshError as exc:
                refused.append(exc)

    client = DshClient(fake("ok", stderr=on_line))
    holder.append(client)
    with client:
        client.new_session().run("stderr 1")
    assert refused and "own event-loop thread" in str(refused[0])
    assert_gone(client.pid)


def test_a_lagging_subscriber_pauses_reading_without_losing_anything(
        fake: Callable[..., ClientConfig], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dsh.sdk._router, "HIGH_WATER", 8)
    monkeypatch.setattr(dsh.sdk._router, "LOW_WATER", 2)
    paused: list[bool] = []
    pause = dsh.sdk._transport.RuntimeProcess.pause_receiving

    def counting_pause(process: dsh.sdk._transport.RuntimeProcess) -> None:
        paused.append(True)
        pause(process)

    monkeypatch.setattr(dsh.sdk._transport.RuntimeProcess, "pause_receiving", counting_pause)

    async def scenario() -> None:
        async with AsyncDshClient(fake("ok")) as client:
            session = await client.new_session()
            lagging = client.subscribe(lambda n: n.method == "session.event")
            run = asyncio.ensure_future(session.run("flood 300"))
            seen = 0
            while not run.done() or seen < 305:
                await asyncio.wait_for(lagging.get(), SETTLE)
                seen += 1
            result = run.result()
            deltas = [e for e in result.events if e.type == "assistant/delta"]
            assert len(deltas) == 301 and result.final_text == "flooded"
            # 1 stale delta before the receipt, the receipt, 301 deltas, message, turn/end
            assert seen == 305
            lagging.close()

    asyncio.run(scenario())
    assert paused, "the lagging subscriber never paused reading"
