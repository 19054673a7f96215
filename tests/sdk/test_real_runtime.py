"""The client against the real runtime, offline (``examples/offline/patch.yml``: the
scripted provider), on both carriers: ``sdk-minimal`` and ``sdk`` with a private home."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sdkkit import OFFLINE_PATCH, alive, assert_gone

from dsh.sdk import (
    AsyncDshClient,
    BusyError,
    ClientConfig,
    DshClient,
    JsonRpcError,
    RuntimeExitedError,
    Stage,
)


def final(cwd: Path) -> str:
    """The offline script's answer in ``cwd`` (a folder without a pyproject.toml)."""
    return (f"You are working in `{cwd}`.\n\nThere is no `pyproject.toml` here to tell me "
            "what the project is.\n\nThis directory is the session's workspace root: my "
            "tools reach files here freely, and anything outside it only with your approval.")


def test_sdk_minimal_with_an_explicit_home(real: Callable[..., ClientConfig],
                                           tmp_path: Path) -> None:
    home = tmp_path / "explicit-home"
    with DshClient(real("sdk-minimal", dsh_home=home)) as client:
        assert client.runtime is not None and client.runtime.version is not None
        assert client.server_info["profile"]["name"] == "sdk-minimal"
        session = client.new_session()
        result = session.run("look")
        assert result.final_text == final(Path.cwd()) and result.stop_reason == "completed"
        types = [event.type for event in result.events]
        assert types[0] == "agent/inbox/spliced" and types[-1] == "turn/end"
        assert types.count("tool/call") == types.count("tool/result") == 2
        assert session.id in [s["sessionId"] for s in client.sessions()]
        assert "working_directory" in [tool["name"] for tool in client.tools()]
    assert home.is_dir()
    assert client.exit_code == 0
    assert_gone(client.pid)


def test_sdk_profile_streams_events_as_they_arrive(
        real: Callable[..., ClientConfig]) -> None:
    async def scenario() -> list[str]:
        async with AsyncDshClient(real("sdk")) as client:
            assert client.server_info["profile"]["name"] == "sdk"
            session = await client.new_session()
            return [event.type async for event in session.stream("look")]

    types = asyncio.run(scenario())
    assert "assistant/delta" in types and types[-1] == "turn/end"
    assert types.index("tool/call") < types.index("tool/result")


def test_readiness_reports_reload_required_when_a_patch_changes(
        real: Callable[..., ClientConfig], tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    layer.mkdir()
    for name in ("patch.yml", "script.yml"):
        shutil.copy(OFFLINE_PATCH.parent / name, layer / name)
    with DshClient(real("sdk-minimal", patches=[layer / "patch.yml"])) as client:
        readiness = client.readiness()
        assert readiness.stage is Stage.TOOLS_READY and readiness.reload_required is False
        with open(layer / "patch.yml", "a", encoding="utf-8") as f:
            f.write("# changed after start\n")
        assert client.readiness().reload_required is True


def test_a_session_resumes_in_a_new_runtime(real: Callable[..., ClientConfig]) -> None:
    with DshClient(real("sdk-minimal")) as client:
        session = client.new_session()
        session.run("look")
    with DshClient(real("sdk-minimal")) as client:
        assert session.id in [s["sessionId"] for s in client.sessions()]
        assert client.resume_session(session.id).id == session.id


def test_unknown_provider_fails_at_the_handshake(real: Callable[..., ClientConfig]) -> None:
    client = DshClient(real("sdk-minimal", provider="no-such-route"))
    with pytest.raises(JsonRpcError) as caught:
        client.start()
    assert caught.value.code == -32602 and "no-such-route" in str(caught.value)
    assert "stage 'handshake'" in str(caught.value)
    assert "profile 'sdk-minimal'" in str(caught.value)
    assert_gone(client.pid)


def test_profile_without_the_sdk_server_row_says_so(real: Callable[..., ClientConfig],
                                                    dsh_home: Path) -> None:
    profile = dsh_home / "profiles" / "no-server"
    profile.mkdir(parents=True)
    (profile / "profile.toml").write_text(
        '[profile]\nbundles = ["dsh-base"]\npatch-reload = "startup"\n')
    client = DshClient(real("no-server"))
    with pytest.raises(RuntimeExitedError) as caught:
        client.start()
    assert "profile 'no-server' has no SDK server row" in str(caught.value)
    assert "'sdk-jsonrpc-server'" in str(caught.value)
    assert caught.value.stderr_tail
    assert_gone(client.pid)


def test_unknown_profile_exits_with_the_runtimes_own_words(
        real: Callable[..., ClientConfig]) -> None:
    client = DshClient(real("no-such-profile"))
    with pytest.raises(RuntimeExitedError) as caught:
        client.start()
    assert caught.value.exit_code == 2
    assert any("unknown profile 'no-such-profile'" in line
               for line in caught.value.stderr_tail)
    assert "has no SDK server row" not in str(caught.value)
    assert_gone(client.pid)


def test_sessions_take_mcp_servers_a_history_and_modes(
        real: Callable[..., ClientConfig], tmp_path: Path) -> None:
    """The client's session options reach the runtime: a per-session MCP server's tool is
    called, a seeded history is what the model sees first, and plan mode switches."""
    import json
    import sys

    server = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_test_server.py"
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"tool_calls": [
        {"name": "mcp__mine__add", "arguments": {"a": 2, "b": 3}}]}) + "\n"
        + json.dumps({"text": "added"}) + "\n")
    patch = tmp_path / "patch.yml"
    patch.write_text("- insert:\n    - {id: llm-scripted, name: llm-scripted, config: "
                     f"{{script: {json.dumps(str(script))}}}}}\n"
                     "- id: agent\n  merge: {config: {default_route: scripted}}\n")
    seeded = [{"role": "user", "content": [{"type": "text", "text": "remember 42"}]},
              {"role": "assistant", "content": [{"type": "text", "text": "noted"}]}]
    mine = {"name": "mine", "command": sys.executable, "args": [str(server)], "env": []}
    with DshClient(real("sdk", patches=[patch])) as client:
        session = client.new_session(mcp_servers=[mine], history=seeded)
        result = session.run("add two and three")
        answers = [e.data["message"] for e in result.events if e.type == "tool/result"]
        assert [a["content"][0]["text"] for a in answers] == ["5"], answers
        assert result.final_text == "added"
        assert session.mode() == "default"
        assert session.set_mode("plan") == "plan" and session.mode() == "plan"
        with pytest.raises(JsonRpcError, match="unknown mode 'yolo'"):
            session.set_mode("yolo")
        other = client.new_session()  # the server was this session's only
        with pytest.raises(JsonRpcError, match=r"mcpServers\[0\].command must be a non-empty"):
            client.new_session(mcp_servers=[{"name": "mine", "command": ""}])
        assert other.mode() == "default"
        history = client.request("session/history", {"sessionId": session.id})["events"]
    texts = [e["data"].get("content", [{}])[0].get("text") for e in history
             if e["type"] == "user/message"]
    assert texts[0] == "remember 42"


# A program that starts the real runtime through the SDK's own lookup, hands its end of
# the runtime's stdin to a long-lived holder (so stdin EOF cannot end the runtime), prints
# both pids, and sleeps until killed.
_PARENT = """
import os, stat, subprocess, sys, time
from dsh.sdk import ClientConfig, DshClient
profile, patch, home, carrier = sys.argv[1:5]
client = DshClient(ClientConfig(profile=profile, patches=[patch], dsh_home=home,
                                carrier=carrier, initialize_timeout=60.0))
client.start()
def pipes(pid):
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            info = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if stat.S_ISFIFO(info.st_mode):
            found[int(fd)] = info.st_ino
    return found
def write_only(fd):
    flags = next(line for line in open(f"/proc/self/fdinfo/{fd}") if line.startswith("flags:"))
    return int(flags.split()[1], 8) & 3 == os.O_WRONLY
# The runtime moves its stdin off fd 0; the pipe it reads is the one we write to.
theirs = set(pipes(client.pid).values())
ours = [fd for fd, ino in pipes("self").items() if ino in theirs and write_only(fd)]
assert len(ours) == 1, ours
holder = subprocess.Popen(["sleep", "3600"], pass_fds=ours, start_new_session=True)
print(client.pid, holder.pid, client.runtime.source, flush=True)
time.sleep(3600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfds and /proc: Linux")
def test_own_runtime_ends_with_its_killed_parent_though_stdin_stays_open(
        real: Callable[..., ClientConfig], tmp_path: Path) -> None:
    config = real("sdk-minimal")
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, config.profile, str(config.patches[0]),
         str(config.dsh_home), config.carrier], stdout=subprocess.PIPE, text=True)
    runtime = holder = None
    try:
        assert parent.stdout is not None
        runtime, holder, source = parent.stdout.readline().split()
        runtime, holder = int(runtime), int(holder)
        assert source in ("sys.executable", "dsh_runtime_bin")  # watched, not kernel-tied
        assert alive(runtime) and alive(holder)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert_gone(runtime)
        assert alive(holder)  # so the runtime's stdin was still open when it left
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()
        for pid in (runtime, holder):
            if pid is not None and alive(pid):
                os.killpg(pid, signal.SIGKILL)


def test_parent_pid_naming_another_process_is_ignored(dsh_home: Path, tmp_path: Path) -> None:
    # Inherited by a runtime that process did not start (a `dsh` a tool ran): not its
    # parent, so that process ending must not end this runtime.
    stranger = subprocess.Popen(["sleep", "3600"])
    environ = {**os.environ, "DSH_HOME": str(dsh_home), "DSH_PARENT_PID": str(stranger.pid)}
    runtime = subprocess.Popen(
        [sys.executable, "-m", "dsh", "--profile", "sdk-minimal", "--patch", str(OFFLINE_PATCH)],
        env=environ, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert runtime.stdin is not None and runtime.stdout is not None
    try:
        def ask(rid: int, method: str, params: dict[str, object] | None = None) -> dict:
            assert runtime.stdin is not None and runtime.stdout is not None
            runtime.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                            "params": params or {}}) + "\n")
            runtime.stdin.flush()
            while True:
                frame = json.loads(runtime.stdout.readline())
                if frame.get("id") == rid:
                    return frame

        assert "result" in ask(1, "initialize", {"cwd": str(tmp_path)})
        stranger.kill()
        stranger.wait()
        assert "result" in ask(2, "runtime/status")
        assert runtime.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
        runtime.stdin.close()
        assert runtime.wait(timeout=30) == 0
        runtime.stdout.close()


def test_history_reads_every_page_and_busy_names_the_holder(
        real: Callable[..., ClientConfig]) -> None:
    """``history`` follows ``nextCursor`` to the end, sync and async; a second runtime on
    the same home reads a session the first holds, and is refused resuming it."""
    with DshClient(real("sdk")) as client:
        session = client.new_session()
        session.run("look")
        session.run("again")
        whole = list(session.history())
        assert [e["seq"] for e in whole] == list(range(len(whole))) and len(whole) > 10
        assert list(session.history(page_size=3)) == whole
        assert list(client.history(session.id, page_size=1)) == whole
        early = session.history(page_size=2)
        assert next(early)["seq"] == 0
        early.close()  # leaving early closes the pages' iterator on the loop

        async def other_runtime() -> tuple[list[dict[str, Any]], BusyError]:
            async with AsyncDshClient(real("sdk")) as second:
                read = [e async for e in second.history(session.id, page_size=4)]
                with pytest.raises(BusyError) as caught:
                    await second.resume_session(session.id)
                return read, caught.value

        read, busy = asyncio.run(other_runtime())
        assert read == whole
        assert busy.data["holder"]["pid"] == client.pid
        assert f"pid {client.pid}" in busy.message
