"""Spawn first: a blocking client's runtime is started before its event loop exists, so
it boots while the loop is made (``dsh.sdk._launch.HeadStart``, ``dsh.sdk._sync``).

On POSIX the runtime is spawned through ``dsh.core.process.spawn`` on the client's loop thread
before the loop runs, and the loop then adopts its pipes
(``dsh.sdk._transport._AdoptedProcess``). Where a loop cannot adopt pipes (Windows'
proactor), asyncio spawns it; that branch is run here too, with ``SPAWNS_FIRST`` off,
against the same fake runtime.
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
from dsh.sdk import AsyncDshClient, ClientConfig, ClientState, ConfigError, DshClient, _launch
from sdkkit import assert_gone, children, eventually

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
    config = ClientConfig(dsh_bin=sys.argv[1], dsh_home=sys.argv[2])
    with DshClient(config) as client:
        tools = client.tools()
    print(json.dumps({"spawns": seen, "tools": len(tools), "exit_code": client.exit_code}))
    """)


@pytest.mark.skipif(os.name != "posix", reason="asyncio spawns the runtime off POSIX")
def test_the_runtime_is_spawned_on_the_loop_thread_before_the_loop_runs(
        tmp_path: Path, dsh_home: Path, fake: Callable[..., ClientConfig]) -> None:
    config = fake("ok")
    done = subprocess.run([sys.executable, "-c", PROBE, str(config.dsh_bin), str(dsh_home)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    runtime = [s for s in out["spawns"] if s["argv0"].endswith(config.dsh_bin.name)
               or "setpriv" in s["argv0"]]
    # The loop thread, which lives as long as the client (the parent-death tie is the
    # spawning thread's), and no loop running yet.
    assert runtime == [{"argv0": runtime[0]["argv0"], "thread": "dsh-sdk-loop",
                        "loop": False}], out["spawns"]
    assert out["tools"] > 0 and out["exit_code"] == 0


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


def test_a_client_never_started_spawns_nothing_and_closes(
        fake: Callable[..., ClientConfig]) -> None:
    before = children()
    client = DshClient(fake("ok"))
    assert client.state is ClientState.NEW and client.pid is None
    assert client.readiness().stage is None
    client.close()
    assert client.state is ClientState.CLOSED
    assert children() <= before


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
