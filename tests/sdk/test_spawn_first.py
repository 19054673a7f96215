"""Spawn first: a blocking client's runtime is started before its event loop exists, so
it boots while the loop is made (``dsh.sdk._launch.HeadStart``, ``dsh.sdk._sync``).

On POSIX the runtime is spawned through ``dsh.core.process.spawn`` before the loop runs,
and the loop then adopts its pipes (``dsh.sdk._transport._AdoptedProcess``). A runtime
the client located itself watches the client's process, so the caller's own thread
spawns it before the loop thread even starts; any other executable is tied by the
kernel to its spawning thread, so the loop thread spawns it. Where a loop cannot adopt
pipes (Windows' proactor), asyncio spawns it; that branch is run here too, with
``SPAWNS_FIRST`` off, against the same fake runtime.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from sdkkit import OFFLINE_PATCH, READS_PROC, assert_gone, children, eventually

from dsh.sdk import AsyncDshClient, ClientConfig, ClientState, ConfigError, DshClient, _launch

PROBE = textwrap.dedent("""\
    import json, sys, threading
    seen = []
    def audit(event, args):
        if event == "subprocess.Popen":
            aio = sys.modules.get("asyncio")
            seen.append({"argv0": str(args[1][0]), "thread": threading.current_thread().name,
                         "loop": aio is not None and aio._get_running_loop() is not None})
    sys.addaudithook(audit)
    from dsh.sdk import ClientConfig, DshClient
    config = ClientConfig(**json.loads(sys.argv[1]))
    with DshClient(config) as client:
        tools = client.tools()
    print(json.dumps({"spawns": seen, "tools": len(tools), "exit_code": client.exit_code,
                      "runtime": client.runtime.path}))
    """)


def _spawns(config: dict[str, object], cwd: Path) -> dict[str, object]:
    """Run a DshClient with ``config`` in a fresh interpreter: each Popen it made (argv[0],
    thread, whether a loop ran), its runtime's path and its tool count."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(config)],
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.name != "posix", reason="asyncio spawns the runtime off POSIX")
def test_the_runtime_is_spawned_on_the_loop_thread_before_the_loop_runs(
        tmp_path: Path, dsh_home: Path, fake: Callable[..., ClientConfig]) -> None:
    config = fake("ok")
    out = _spawns({"dsh_bin": str(config.dsh_bin), "dsh_home": str(dsh_home)}, tmp_path)
    runtime = [s for s in out["spawns"] if s["argv0"].endswith(config.dsh_bin.name)
               or "setpriv" in s["argv0"]]
    # The loop thread, which lives as long as the client (the parent-death tie is the
    # spawning thread's), and no loop running yet.
    assert runtime == [{"argv0": runtime[0]["argv0"], "thread": "dsh-sdk-loop",
                        "loop": False}], out["spawns"]
    assert out["tools"] > 0 and out["exit_code"] == 0



@pytest.mark.skipif(os.name != "posix", reason="asyncio spawns the runtime off POSIX")
def test_a_located_runtime_is_spawned_by_the_caller_before_the_loop_thread_starts(
        tmp_path: Path, dsh_home: Path, carrier: str) -> None:
    """The runtime the client found itself watches the client's process (no thread tie),
    so start() spawns it at once on the caller's thread: no thread start before it."""
    out = _spawns({"carrier": carrier, "profile": "sdk-minimal", "patches": [str(OFFLINE_PATCH)],
                   "dsh_home": str(dsh_home)}, tmp_path)
    runtime = [s for s in out["spawns"] if s["argv0"] == out["runtime"]]
    assert runtime == [{"argv0": out["runtime"], "thread": "MainThread", "loop": False}], \
        out["spawns"]
    assert not any("setpriv" in s["argv0"] for s in out["spawns"])
    assert out["tools"] > 0 and out["exit_code"] == 0

@READS_PROC
def test_asyncio_spawned_runtime_behaves_alike(
        monkeypatch: pytest.MonkeyPatch, fake: Callable[..., ClientConfig]) -> None:
    """The branch Windows takes: nothing spawned before the loop, asyncio spawns it."""
    monkeypatch.setattr(_launch, "SPAWNS_FIRST", False)
    config = fake("ok")
    before = children()
    with DshClient(config) as client:
        assert client.tools()
        result = client.new_session().run("hello")
        assert result.stop_reason == "completed"
        pid = client.pid
    assert client.state is ClientState.CLOSED and client.exit_code == 0
    assert_gone(pid)

    async def scenario() -> int | None:
        async with AsyncDshClient(config) as aclient:
            assert await aclient.tools()
        return aclient.pid

    assert_gone(asyncio.run(scenario()))
    eventually(lambda: children() <= before, "no runtime left")


@READS_PROC
def test_a_client_never_started_spawns_nothing_and_closes(
        fake: Callable[..., ClientConfig]) -> None:
    before = children()
    client = DshClient(fake("ok"))
    assert client.state is ClientState.NEW and client.pid is None
    assert client.readiness().stage is None
    client.close()
    assert client.state is ClientState.CLOSED
    assert children() <= before


@READS_PROC
def test_a_failed_head_start_spawns_nothing(tmp_path: Path,
                                            fake: Callable[..., ClientConfig]) -> None:
    """A launch that fails its checks (here: a missing patch) is reported from start()
    with its stage, and no process was started for it."""
    before = children()
    client = DshClient(fake("ok", patches=[tmp_path / "missing.yml"]))
    with pytest.raises(ConfigError, match=r"stage 'configured'.*missing\.yml"):
        client.start()
    assert client.state is ClientState.CLOSED
    assert children() <= before
    head = _launch.HeadStart(ClientConfig(dsh_bin=tmp_path / "missing-dsh",
                                          dsh_home=tmp_path / "home"), os.environ)
    assert head.child is None and head.spec is None and head.error is not None
