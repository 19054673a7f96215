"""The runtime SIGKILLed at points of a turn, driven by the real SDK client.

The durable contract (``dsh/runtime/sessions/sqlite_store.py``): the agent appends every
event to ``sessions.db`` in its own transaction *before* any client sees it. So after a
kill at any point:

* the client's waiters fail with :class:`RuntimeExitedError` (killed by SIGKILL) carrying
  the runtime's stderr tail;
* ``sessions.db`` passes ``PRAGMA integrity_check`` and the session's seqs have no gap;
* events lost: 0, meaning every event the client received is stored, byte for byte;
* a new runtime resumes the session: the history starts with exactly the stored events,
  the interrupted turn is closed (``turn/end`` ``error``/``interrupted``), and a new
  prompt runs on with the next seqs.

Kill points are picked by waiting for a specific event (mid model stream, mid tool call,
between steps) plus seeded-random delays into a multi-step turn.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import (
    MARKER_ROW,
    OFFLINE_PATCH,
    SETTLE,
    Figure,
    assert_gapless,
    eventually,
    lost,
    scripted_patch,
    stored_events,
)
from proctable import pids_with

from dsh.sdk import AsyncDshClient, ClientConfig, ClientState, RuntimeExitedError

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")]

Trigger = Callable[[dict[str, Any]], bool]

# A long, chatty first step (many small deltas), a slow tool, then more steps; the last
# never comes, so a kill at any of the random delays lands inside the turn.
STEPS: list[dict[str, Any]] = [
    {"text": "Streaming a long answer before I look around. " * 40, "delay_ms": 100,
     "tool_calls": [{"name": "working_directory", "arguments": {}}]},
    {"text": "Now a slow command.", "delay_ms": 150,
     "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 0.8"}}]},
    {"text": "Still going.", "delay_ms": 150,
     "tool_calls": [{"name": "working_directory", "arguments": {}}]},
    {"text": "Done.", "delay_ms": 60000},
]


def _kind(kind: str, **data: Any) -> Trigger:
    return lambda event: event["type"] == kind and all(
        event["data"].get(k) == v for k, v in data.items())


def _config(home: Path, patch: Path) -> ClientConfig:
    return ClientConfig(profile="sdk", dsh_home=home, patches=[OFFLINE_PATCH, patch],
                        provider="scripted", model="scripted", initialize_timeout=60.0,
                        shutdown_timeout=2.0)


async def _doomed_run(config: ClientConfig, trigger: Trigger | float
                      ) -> tuple[str, list[dict[str, Any]], RuntimeExitedError, AsyncDshClient]:
    """Prompt, kill the runtime at ``trigger`` (an event predicate or a delay in seconds),
    and collect every event received until the client reports the exit."""
    client = AsyncDshClient(config)
    await client.start()
    sent: list[dict[str, Any]] = []
    try:
        session = await client.new_session()
        with client.subscribe(lambda n: n.method == "session.event") as events:
            await client.request("session/prompt", {
                "sessionId": session.id,
                "contentBlocks": [{"type": "text", "text": "work slowly"}]})
            if isinstance(trigger, float):
                await asyncio.sleep(trigger)
            else:
                while not sent or not trigger(sent[-1]):
                    note = await asyncio.wait_for(events.get(), SETTLE)
                    sent.append(note.params["event"])
            assert client.pid is not None
            os.kill(client.pid, signal.SIGKILL)
            with pytest.raises(RuntimeExitedError) as caught:
                while True:  # frames written before the kill still arrive, then the error
                    note = await asyncio.wait_for(events.get(), SETTLE)
                    sent.append(note.params["event"])
        assert client.state is ClientState.FAILED
    finally:
        await client.close()
    return session.id, sent, caught.value, client


async def _resume(config: ClientConfig, session_id: str
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """History after ``session/resume`` in a new runtime, then the events of a new prompt."""
    async with AsyncDshClient(config) as client:
        session = await client.resume_session(session_id)
        params = {"sessionId": session_id}
        history = (await client.request("session/history", params))["events"]
        result = await session.run("carry on")
        assert result.stop_reason == "completed", result
        after = (await client.request("session/history", params))["events"]
    assert after[:len(history)] == history
    more = after[len(history):]
    assert [e["type"] for e in more] == [e.type for e in result.events]
    return history, more


KILL_POINTS: dict[str, Trigger | float] = {
    "mid-model-stream": _kind("assistant/delta"),
    "mid-tool-call": _kind("tool/call", name="bash"),
    "between-steps": _kind("step/end", step=1),
    "before-first-step": _kind("turn/start"),
    **{f"random-{seed}": random.Random(seed).uniform(0.0, 2.5) for seed in (3, 7, 11, 23)},
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_loses_no_event_and_the_session_resumes(point: str, dsh_home: Path,
                                                     tmp_path: Path, figure: Figure) -> None:
    doomed = _config(dsh_home, scripted_patch(tmp_path, STEPS, name="doomed"))
    session_id, sent, error, client = asyncio.run(_doomed_run(doomed, KILL_POINTS[point]))

    assert error.exit_code == -signal.SIGKILL == client.exit_code
    assert "killed by signal SIGKILL" in str(error)
    assert any(MARKER_ROW in line for line in error.stderr_tail), error.stderr_tail

    verdict, stored = stored_events(dsh_home, session_id)
    assert verdict == "ok"
    assert_gapless(stored)
    events_lost = lost(sent, stored)
    assert events_lost == 0, (events_lost, sent, stored)
    figure("events received", len(sent))
    figure("events lost", events_lost)
    figure("integrity_check", verdict)

    # The resumer's model answers at once, so the new prompt completes.
    fine = _config(dsh_home, scripted_patch(tmp_path, [{"text": "recovered"}], name="fine"))
    history, more = asyncio.run(_resume(fine, session_id))
    assert history[:len(stored)] == stored
    tail = history[len(stored):]
    if any(e["type"] == "turn/start" for e in stored):  # the open turn is closed
        assert [e["type"] for e in tail][-1] == "turn/end", tail
        assert tail[-1]["data"]["reason"]["error"]["code"] == "interrupted"
    else:  # killed before the turn began: nothing to close
        assert tail == []
    assert_gapless(history + more)
    assert more[-1]["type"] == "turn/end"
    assert more[-1]["data"]["reason"]["kind"] == "completed"
    verdict, final = stored_events(dsh_home, session_id)
    assert verdict == "ok" and final == history + more
    figure("seq gaps after resume", 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_runtime_leaves_no_unsandboxed_tool_running(dsh_home: Path,
                                                             tmp_path: Path) -> None:
    """Unsandboxed, the command gets a parent-death signal (``setpriv --pdeathsig``), so
    the kernel kills it with a SIGKILLed runtime; what a shell forks is not covered."""
    token = f"dsh-orphan-probe-{os.getpid()}"
    steps = [{"text": "", "tool_calls": [{"name": "bash", "arguments": {
        "command": f"exec -a {token} sleep 60"}}]}, {"text": "never", "delay_ms": 60000}]
    extra = "- {id: 'tools:shell', merge: {config: {sandbox: {mode: 'off'}}}}\n"
    config = _config(dsh_home, scripted_patch(tmp_path, steps, name="orphan", extra=extra))

    def started(event: dict[str, Any]) -> bool:
        if event["type"] != "tool/call":
            return False
        eventually(lambda: bool(pids_with(token)), "the tool command running")
        return True

    try:
        asyncio.run(_doomed_run(config, started))
        eventually(lambda: not pids_with(token), "no tool command left", bound=3.0)
    finally:
        for pid in pids_with(token):
            os.kill(pid, signal.SIGKILL)
