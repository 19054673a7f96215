"""Nothing outlives a client: no process, thread or file descriptor, whether it is closed
or abandoned to the garbage collector."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from sdkkit import READS_PROC, assert_gone, children, eventually, fd_count, thread_count

from dsh.sdk import AsyncDshClient, ClientConfig, DshClient

pytestmark = pytest.mark.reliability


def baseline() -> tuple[int, int]:
    """Descriptors and threads now, once nothing of an earlier client is left."""
    eventually(lambda: not children(), "no child process")
    return fd_count(), thread_count()


def assert_back_to(before: tuple[int, int], pids: list[int]) -> None:
    for pid in pids:
        assert_gone(pid)
    eventually(lambda: not children(), "no child process")
    # Exit-watcher threads (the client's, or asyncio's) end just after their child is reaped.
    eventually(lambda: thread_count() <= before[1], f"threads back to {before[1]}")
    assert fd_count() == before[0]


def warm_up(config: ClientConfig) -> None:
    with DshClient(config) as client:
        client.tools()


@READS_PROC
def test_fifty_clients_started_and_closed(fake: Callable[..., ClientConfig]) -> None:
    config = fake("ok")
    warm_up(config)
    before = baseline()
    pids: list[int] = []

    async def run_async() -> None:
        async with AsyncDshClient(config) as client:
            await client.tools()
        assert client.pid is not None
        pids.append(client.pid)

    for i in range(50):
        if i % 2:
            asyncio.run(run_async())
        else:
            with DshClient(config) as client:
                client.tools()
            assert client.pid is not None
            pids.append(client.pid)
    assert_back_to(before, pids)


@READS_PROC
def test_abandoned_clients_are_killed_when_collected(
        fake: Callable[..., ClientConfig]) -> None:
    config = fake("linger")  # outlives stdin EOF: only the finalizer's signal ends it
    warm_up(fake("ok"))
    before = baseline()
    pids: list[int] = []

    def abandon_sync() -> None:
        client = DshClient(config)
        client.start()
        assert client.pid is not None
        pids.append(client.pid)

    for _ in range(5):
        abandon_sync()
    gc.collect()

    async def abandon_async() -> None:
        for _ in range(5):
            client = AsyncDshClient(config)
            await client.start()
            assert client.pid is not None
            pids.append(client.pid)
            del client
        gc.collect()
        # Stay on the loop until the kills are seen, as a program that goes on would.
        while any(pid in children() for pid in pids):
            await asyncio.sleep(0.01)

    asyncio.run(abandon_async())
    assert len(pids) == 10
    assert_back_to(before, pids)


@READS_PROC
def test_real_runtime_clients_leave_nothing(real: Callable[..., ClientConfig]) -> None:
    config = real("sdk-minimal")
    warm_up(config)
    before = baseline()
    pids: list[int] = []
    for _ in range(3):
        with DshClient(config) as client:
            client.tools()
        assert client.pid is not None and client.exit_code == 0
        pids.append(client.pid)
    assert_back_to(before, pids)


@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_clients_left_open_at_interpreter_exit_are_killed(
        tmp_path: Path, fake: Callable[..., ClientConfig], flavour: str) -> None:
    config = fake("linger")
    script = tmp_path / "leave_open.py"
    script.write_text(textwrap.dedent(f"""
        import asyncio
        from dsh.sdk import AsyncDshClient, ClientConfig, DshClient
        config = ClientConfig(dsh_bin={str(config.dsh_bin)!r},
                              dsh_home={str(config.dsh_home)!r})
        kept = []
        if {flavour!r} == "async":
            async def main():
                client = AsyncDshClient(config)
                await client.start()
                kept.append(client)
            asyncio.run(main())
        else:
            kept.append(DshClient(config))
            kept[0].start()
        print(kept[0].pid, flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stderr == ""
    assert_gone(int(done.stdout))
