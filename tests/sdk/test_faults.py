"""Misbehaving runtimes (the fake, as a real process): each gives its typed error, with
the stage, profile, carrier and stderr tail, at once, and leaves nothing running.

"At once" is checked without a clock: the initialize timeout is set to an hour and the
whole start is capped far below it, so waiting out the timeout would fail the test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sdkkit import LINUX, SETTLE, alive, assert_gone

import dsh.sdk._transport
from dsh.sdk import (
    AsyncDshClient,
    ClientClosedError,
    ClientConfig,
    ClientState,
    DshClient,
    FrameTooLargeError,
    InitializeTimeoutError,
    ProtocolError,
    RuntimeExitedError,
    Stage,
)

pytestmark = pytest.mark.reliability

HOUR = 3600.0


def failed_start(config: ClientConfig) -> tuple[BaseException, AsyncDshClient]:
    client = AsyncDshClient(config)

    async def attempt() -> BaseException:
        with pytest.raises(Exception) as caught:
            await asyncio.wait_for(client.start(), SETTLE * 3)
        return caught.value

    exc = asyncio.run(attempt())
    assert client.state is ClientState.CLOSED
    assert_gone(client.pid)
    return exc, client


def assert_names_stage(exc: BaseException, stage: str) -> None:
    text = str(exc)
    assert f"stage {stage!r}" in text, text
    assert "profile 'sdk'" in text and "carrier exe (" in text, text


def test_garbage_on_stdout_is_a_protocol_error(fake: Callable[..., ClientConfig]) -> None:
    exc, client = failed_start(fake("garbage", initialize_timeout=HOUR))
    assert isinstance(exc, ProtocolError)
    assert "not valid UTF-8 JSON" in str(exc)
    assert_names_stage(exc, "handshake")
    assert client.exit_code is not None


def test_exit_during_initialize_reports_code_and_stderr(
        fake: Callable[..., ClientConfig]) -> None:
    exc, client = failed_start(fake("exit-during-init", initialize_timeout=HOUR))
    assert isinstance(exc, RuntimeExitedError)
    assert exc.exit_code == 3 == client.exit_code
    assert exc.stderr_tail == ("fake: loading profile",
                               "fake: fatal: plugin 'x' failed to load")
    assert "exited with code 3" in str(exc) and "  | fake: fatal" in str(exc)
    assert_names_stage(exc, "handshake")


def test_never_answers_is_an_initialize_timeout(fake: Callable[..., ClientConfig]) -> None:
    exc, _ = failed_start(fake("silent", initialize_timeout=0.3))
    assert isinstance(exc, InitializeTimeoutError) and isinstance(exc, TimeoutError)
    assert "no answer to initialize within 0.3 s" in str(exc)
    assert_names_stage(exc, "handshake")


def test_frame_over_the_cap(fake: Callable[..., ClientConfig]) -> None:
    exc, _ = failed_start(fake("oversize", max_frame_bytes=4096, initialize_timeout=HOUR))
    assert isinstance(exc, FrameTooLargeError)
    assert exc.limit == 4096 and exc.size > 4096
    assert_names_stage(exc, "handshake")


def test_a_frame_under_a_raised_cap_passes(fake: Callable[..., ClientConfig]) -> None:
    config = fake("oversize", max_frame_bytes=1024 * 1024, initialize_timeout=HOUR,
                  env={"FAKE_OVERSIZE_BYTES": str(512 * 1024)})
    client = DshClient(config)
    # initialize passes (the frame fits), tools/list has no "tools": an empty list.
    with client:
        assert client.tools() == []
    assert_gone(client.pid)


def test_runtime_death_mid_run_fails_every_waiter_at_once(
        fake: Callable[..., ClientConfig]) -> None:
    async def scenario() -> None:
        async with AsyncDshClient(fake("ok")) as client:
            session = await client.new_session()
            with client.subscribe() as watcher:
                with pytest.raises(RuntimeExitedError) as caught:
                    await asyncio.wait_for(session.run("crash"), SETTLE)
                with pytest.raises(RuntimeExitedError):
                    await watcher.get()
            assert caught.value.exit_code == 5
            assert "fake: crashing on purpose" in caught.value.stderr_tail
            assert "profile 'sdk'" in str(caught.value)
            assert "startup" not in str(caught.value)
            assert client.state is ClientState.FAILED
            with pytest.raises(RuntimeExitedError):
                await client.tools()
        assert client.state is ClientState.CLOSED
        with pytest.raises(ClientClosedError, match="client is closed"):
            await client.tools()

    asyncio.run(scenario())


def test_shutdown_ladder_reaches_sigkill(fake: Callable[..., ClientConfig]) -> None:
    client = DshClient(fake("slow-shutdown", shutdown_timeout=0.2))
    client.start()
    assert client.new_session().run("hi").final_text == "echo: hi"
    client.close()
    assert client.exit_code == -signal.SIGKILL
    assert_gone(client.pid)


def test_clean_shutdown_exits_zero_and_kills_the_runtimes_children(
        fake: Callable[..., ClientConfig]) -> None:
    with DshClient(fake("ok")) as client:
        text = client.new_session().run("spawn-child").final_text
        child = int(text.removeprefix("child: "))
        assert alive(child)
    assert client.exit_code == 0
    assert_gone(client.pid)
    assert_gone(child)


def test_cancelled_start_leaves_nothing(fake: Callable[..., ClientConfig]) -> None:
    async def scenario() -> int | None:
        client = AsyncDshClient(fake("silent", initialize_timeout=HOUR))
        task = asyncio.ensure_future(client.start())
        while client.pid is None:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.state is ClientState.CLOSED
        return client.pid

    assert_gone(asyncio.run(scenario()))


def test_cancelled_body_closes_the_client(fake: Callable[..., ClientConfig]) -> None:
    async def scenario() -> int | None:
        client = AsyncDshClient(fake("ok"))

        async def body() -> None:
            async with client:
                await asyncio.sleep(HOUR)

        task = asyncio.ensure_future(body())
        while client.state is not ClientState.READY:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.state is ClientState.CLOSED and client.exit_code == 0
        return client.pid

    assert_gone(asyncio.run(scenario()))


@pytest.mark.skipif(not LINUX, reason="needs Linux: an executable dsh_bin dies with its parent "
                    "by the kernel's parent-death signal (setpriv --pdeathsig), which macOS "
                    "lacks (dsh.core.process, 'Tied to its parent')")
def test_runtime_dies_with_its_parent(tmp_path: Path,
                                      fake: Callable[..., ClientConfig]) -> None:
    # "linger" outlives the EOF of its stdin, so only the parent-death signal ends it.
    config = fake("linger")
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from dsh.sdk import ClientConfig, DshClient
        client = DshClient(ClientConfig(dsh_bin={str(config.dsh_bin)!r},
                                        dsh_home={str(config.dsh_home)!r}))
        client.start()
        print(client.pid, flush=True)
        time.sleep(3600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True)
    runtime = None
    try:
        assert parent.stdout is not None
        runtime = int(parent.stdout.readline())
        assert alive(runtime)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert_gone(runtime)
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()
        if runtime is not None and alive(runtime):
            os.killpg(runtime, signal.SIGKILL)


def test_failed_sync_start_closes_the_client_and_its_thread(
        fake: Callable[..., ClientConfig]) -> None:
    client = DshClient(fake("exit-during-init", initialize_timeout=HOUR))
    with pytest.raises(RuntimeExitedError), client:
        pass
    assert client.state is ClientState.CLOSED
    assert "dsh-sdk-loop" not in [thread.name for thread in threading.enumerate()]
    assert_gone(client.pid)
    with pytest.raises(ClientClosedError, match="client is closed"):
        client.tools()


def test_stage_reached_is_reported_after_a_failed_start(
        fake: Callable[..., ClientConfig]) -> None:
    exc, client = failed_start(fake("silent", initialize_timeout=0.2))
    readiness = asyncio.run(client.readiness())
    assert readiness.stage is Stage.SPAWNED and readiness.reload_required is None
    assert isinstance(exc, InitializeTimeoutError)


def test_stdout_closed_by_a_live_runtime_breaks_the_connection(
        fake: Callable[..., ClientConfig], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dsh.sdk._transport, "EXIT_GRACE", 0.2)
    client = DshClient(fake("ok", shutdown_timeout=0.5))
    with client:
        session = client.new_session()
        with pytest.raises(ProtocolError, match="closed its stdout but kept running"):
            session.run("close-stdout")
        assert client.state is ClientState.FAILED
    assert client.exit_code == -signal.SIGTERM
    assert_gone(client.pid)
