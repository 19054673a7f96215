"""The agent under a lease it can lose: a real kernel with ``sessions-sqlite`` on a file,
and a second store on the same file acting as a runtime on another host, later in time
(its clock past the expiry), that takes the session over.

A runtime that stalled past the expiry must stop running a session another runtime took:
its heartbeat finds the loss and the agent cancels the turn (a fenced write would find it
too), nothing more of the session is stored, its clients are told (an ``error`` and the
turn's ``turn/end``, code ``lease-lost``, and ``session/moved``, none of them in the log),
and its next use of the session answers busy naming the new holder.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from dsh.core.errors import SessionHeldError
from dsh.runtime.agent import events
from dsh.runtime.sessions.sqlite_store import DEFAULT_LEASE_EXPIRY_MS, SqliteSessionStore

AGENTKIT = str(Path(__file__).resolve().parents[1] / "agent")


@pytest.fixture(autouse=True)
def _agentkit_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(AGENTKIT)


def later_runtime() -> SqliteSessionStore:
    """A store on the kernel's home (the test's ``DSH_HOME``, as agentkit boots it), as a
    runtime on host-b whose clock is past every lease's expiry."""
    return SqliteSessionStore(
        Path(os.environ["DSH_HOME"]) / "sessions.db", profile="sdk", pid=4242, host="host-b",
        clock=lambda: int(time.time() * 1000) + DEFAULT_LEASE_EXPIRY_MS * 3)


def test_a_session_taken_over_mid_turn_stops_here_and_answers_busy(tmp_path: Path) -> None:
    from agentkit import Booted, rows, text, write_script

    os.chdir(tmp_path)
    script = write_script(tmp_path, [
        {"text": "Looking first.", "tool_calls": [{"name": "working_directory",
                                                    "arguments": {}}]},
        {"text": "never sent", "delay_ms": 60000}])
    tree = [{"id": "sessions", "name": "sessions-sqlite"},
            *rows(script, agent={"max_steps": 5})]
    tree[1]["inject"] = ["sessions"]

    async def scenario() -> None:
        async with Booted(tree) as b:
            await b.agent.prompt("s1", text("go"))
            await b.until(lambda: b.types("s1").count("step/start") == 2)
            await b.seen("s1", "request/context")
            sent = len(b.events("s1"))
            other = later_runtime()
            try:
                taken = other.acquire("s1")
                assert taken is not None and taken.holder.pid == os.getpid()
                # its next heartbeat (the sessions row's task) tells the runtime, which
                # cancels the turn at once and tells its clients, outside the log: an
                # error naming the new holder, the turn's end (lease-lost), the move;
                # nothing of the cancelled turn itself is stored or sent
                assert b.kernel.context.service("sessions").heartbeat() == ["s1"]
                await b.idle("s1")
                told = b.events("s1")[sent:]
                holder = {"host": "host-b", "pid": 4242}
                assert [(e["type"], "seq" in e) for e in told] == [
                    ("error", False), ("turn/end", False), ("session/moved", False)]
                assert told[0]["data"]["code"] == "lease-lost"
                assert told[0]["data"]["holder"] == holder
                assert "taken over by another runtime (pid 4242 on host host-b)" in \
                    told[0]["data"]["message"]
                assert told[1]["data"] == {"turn": 1, "reason": {"kind": "error", "error": {
                    "message": told[0]["data"]["message"], "code": "lease-lost"}}}
                assert told[2]["data"] == {"holder": holder}
                assert b.statuses("s1")[-1] == "idle"
                stored = other.load("s1")
                assert stored is not None and stored.events == b.events("s1")[:sent]
                with pytest.raises(SessionHeldError) as caught:
                    await b.agent.prompt("s1", text("again"))
                assert caught.value.holder == {"host": "host-b", "pid": 4242}
                with pytest.raises(SessionHeldError):
                    await b.agent.resume("s1")
                assert "s1" not in [s["sessionId"] for s in b.agent.list_sessions()
                                    if s["status"] == "running"]
                # the new holder writes on from the next seq
                other.append("s1", events.event(events.ERROR, sent, {"message": "b"}, {}))
                assert [e["seq"] for e in other.load("s1").events] == list(range(sent + 1))
            finally:
                other.close()

    asyncio.run(scenario())


def test_a_heartbeat_tells_a_stalled_runtime_what_it_lost(tmp_path: Path) -> None:
    """An idle session lost while the runtime stalled is let go at its next use."""
    from agentkit import Booted, rows, text, write_script

    os.chdir(tmp_path)
    tree = [{"id": "sessions", "name": "sessions-sqlite"},
            *rows(write_script(tmp_path, [{"text": "one"}, {"text": "two"}]))]
    tree[1]["inject"] = ["sessions"]

    async def scenario() -> None:
        async with Booted(tree) as b:
            await b.agent.prompt("idle", text("hi"))
            await b.idle("idle")
            other = later_runtime()
            try:
                other.acquire("idle")
                store = b.kernel.context.service("sessions")
                assert store.heartbeat() == ["idle"]
                with pytest.raises(SessionHeldError) as caught:
                    await b.agent.prompt("idle", text("more"))
                assert "pid 4242 on host host-b" in caught.value.message
                page = b.agent.history_page("idle", start_seq=0, limit=100, max_bytes=10**6)
                assert page.events == other.load("idle").events  # read from the store now
                other.release("idle")
                await b.agent.prompt("idle", text("mine again"))
                await b.idle("idle", 2)
                assert b.of("idle", "turn/end")[-1]["reason"] == {"kind": "completed"}
            finally:
                other.close()

    asyncio.run(scenario())
