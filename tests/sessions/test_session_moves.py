"""Sessions move between runtimes (issue 30, 0b): a real kernel with ``sessions-sqlite`` on
a file gives a session's lease back once the session has no work, keeps it parked in
memory, takes it back on the next prompt, and drops it (telling clients
``session/moved``) when another runtime (a second store on the same file, as another
runtime on another host) leased or wrote it meanwhile.

Each test waits for the release by watching the lease table (bounded: a failure, never a
timing).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dsh.core.errors import SessionHeldError
from dsh.runtime.agent import events
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.sessions.sqlite_store import SqliteSessionStore
from dsh.runtime.tools.base import ToolContext, ToolResult

AGENTKIT = str(Path(__file__).resolve().parents[1] / "agent")
HELD: list[Any] = []
"""The hold the ``hold_session`` fixture tool took (released by the test)."""


@pytest.fixture(autouse=True)
def _agentkit_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(AGENTKIT)


class HoldTool:
    """Starts 'background work' that holds the session (``ToolContext.keep``)."""

    name = "hold_session"
    description = "Hold the session as a background job would."
    parameters = {"type": "object"}
    mutating = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        HELD.append(ctx.keep())
        return ToolResult("holding")


class HoldTools(Plugin):
    manifest = Manifest(id="hold-tools", version="1", capabilities=frozenset({Capability.TOOL}))

    def apply(self, reg: Registrar) -> None:
        reg.tool(HoldTool())


def tree(script: str, *, cap: int = 32, extra: list[dict[str, Any]] | None = None,
         ) -> list[dict[str, Any]]:
    from agentkit import rows

    found = [{"id": "sessions", "name": "sessions-sqlite",
              "config": {"idle_release_s": 0.05, "lease_heartbeat_s": 60,
                         "lease_expiry_s": 120}},
             *rows(script, agent={"max_idle_sessions": cap},
                   extra=[*(extra or []),
                          {"id": "journal", "name": "agentkit:FixtureHooks",
                           "config": {"mode": "record",
                                      "events": ["session_start", "session_end"]}}])]
    found[1]["inject"] = ["sessions"]
    return found


def other_runtime() -> SqliteSessionStore:
    """A second store on the kernel's ``sessions.db``, as another runtime on host-b."""
    return SqliteSessionStore(Path(os.environ["DSH_HOME"]) / "sessions.db", profile="sdk",
                              pid=4242, host="host-b")


async def released(store: Any, session_id: str) -> None:
    """Wait until the lease of ``session_id`` is given back (bounded)."""
    async def wait() -> None:
        while store.lease(session_id) is not None:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(wait(), 10)


async def until(predicate: Any) -> None:
    """Wait until ``predicate()`` (work the agent does in the background; bounded)."""
    async def wait() -> None:
        while not predicate():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(wait(), 10)


def ends(session_id: str) -> int:
    from agentkit import JOURNAL

    return sum(1 for kind, sid, *_ in JOURNAL if kind == "session_end" and sid == session_id)


def starts(session_id: str) -> int:
    from agentkit import JOURNAL

    return sum(1 for kind, sid, *_ in JOURNAL if kind == "session_start" and sid == session_id)


def test_an_idle_session_gives_its_lease_back_and_the_next_prompt_takes_it_back(
        tmp_path: Path) -> None:
    from agentkit import Booted, text, write_script

    os.chdir(tmp_path)
    script = write_script(tmp_path, [{"text": "one"}, {"text": "two"}])

    async def scenario() -> None:
        async with Booted(tree(script)) as b:
            store = b.kernel.context.service("sessions")
            await b.agent.prompt("s", text("hi"))
            await b.idle("s")
            await released(store, "s")
            assert not store.holds("s")
            assert b.agent.list_sessions()[0]["status"] == "idle"
            await b.agent.prompt("s", text("again"))  # taken back: no reload, no restart
            assert store.holds("s")
            await b.idle("s", 2)
            assert (starts("s"), ends("s")) == (1, 0)
            assert [e["reason"]["kind"] for e in b.of("s", "turn/end")] == ["completed"] * 2
            await released(store, "s")
            seqs = [e["seq"] for e in store.load("s").events]
            assert seqs == list(range(len(b.events("s"))))

    asyncio.run(scenario())


def test_a_session_another_runtime_continued_is_dropped_with_session_moved_and_reloaded(
        tmp_path: Path) -> None:
    from agentkit import Booted, text, write_script

    os.chdir(tmp_path)
    script = write_script(tmp_path, [{"text": "one"}, {"text": "three"}])

    async def scenario() -> None:
        async with Booted(tree(script)) as b:
            store = b.kernel.context.service("sessions")
            await b.agent.prompt("s", text("hi"))
            await b.idle("s")
            await released(store, "s")
            other = other_runtime()
            try:  # another runtime runs a turn of its own, then lets the session go
                other.acquire("s")
                record = other.load("s")
                top = len(record.events)
                for offset, (kind, data) in enumerate([
                        (events.TURN_START, {"turn": 2}),
                        (events.TURN_END, {"turn": 2, "reason": {"kind": "completed"}})]):
                    other.append("s", events.event(kind, top + offset, data, {}))
                other.save(other.load("s"))
                other.release("s")
                assert store.heartbeat() == []  # it finds the watched session moved
                [moved] = [e for e in b.events("s") if e["type"] == "session/moved"]
                assert moved["data"] == {"holder": None} and "seq" not in moved
                await until(lambda: ends("s") == 1)  # dropped from memory: session_end
                await b.agent.prompt("s", text("back here"))
                await b.idle("s", 2)
                stored = other.load("s")
                assert [e["seq"] for e in stored.events] == list(range(len(stored.events)))
                assert [e["data"]["turn"] for e in stored.events
                        if e["type"] == "turn/start"] == [1, 2, 3]
                assert b.agent.list_sessions()[0]["turns"] == 3
            finally:
                other.close()

    asyncio.run(scenario())


def test_a_write_the_heartbeat_has_not_seen_is_found_when_taking_back(tmp_path: Path) -> None:
    from agentkit import Booted, text, write_script

    os.chdir(tmp_path)
    script = write_script(tmp_path, [{"text": "one"}, {"text": "two"}])

    async def scenario() -> None:
        async with Booted(tree(script)) as b:
            store = b.kernel.context.service("sessions")
            await b.agent.prompt("s", text("hi"))
            await b.idle("s")
            await released(store, "s")
            other = other_runtime()
            try:
                other.acquire("s")
                record = other.load("s")
                other.append("s", events.event(events.ERROR, len(record.events),
                                                {"message": "from host-b"}, {}))
                other.release("s")
            finally:
                other.close()
            await b.agent.prompt("s", text("again"))  # no heartbeat came: version check
            await b.idle("s", 2)
            assert (starts("s"), ends("s")) == (2, 1)  # reloaded, not taken back as was
            log = store.load("s").events
            assert [e["seq"] for e in log] == list(range(len(log)))
            assert any(e["type"] == "error" and e["data"]["message"] == "from host-b"
                       for e in log)

    asyncio.run(scenario())


def test_a_session_another_runtime_holds_is_moved_naming_it_and_busy(tmp_path: Path) -> None:
    from agentkit import Booted, text, write_script

    os.chdir(tmp_path)
    script = write_script(tmp_path, [{"text": "one"}])

    async def scenario() -> None:
        async with Booted(tree(script)) as b:
            store = b.kernel.context.service("sessions")
            await b.agent.prompt("s", text("hi"))
            await b.idle("s")
            await released(store, "s")
            other = other_runtime()
            try:
                other.acquire("s")
                store.heartbeat()
                [moved] = [e for e in b.events("s") if e["type"] == "session/moved"]
                assert moved["data"] == {"holder": {"host": "host-b", "pid": 4242}}
                with pytest.raises(SessionHeldError) as caught:
                    await b.agent.prompt("s", text("mine?"))
                assert caught.value.holder == {"host": "host-b", "pid": 4242}
                history = b.agent.history_page("s", start_seq=0, limit=100, max_bytes=10**6)
                assert history.events == other.load("s").events  # reading needs no lease
            finally:
                other.close()

    asyncio.run(scenario())


def test_past_the_cap_the_longest_idle_sessions_are_unloaded(tmp_path: Path) -> None:
    from agentkit import Booted, text, write_script

    os.chdir(tmp_path)
    script = write_script(tmp_path, [{"text": "ok"}])

    async def scenario() -> None:
        async with Booted(tree(script, cap=2)) as b:
            store = b.kernel.context.service("sessions")
            for name in ("a", "b", "c", "d"):
                await b.agent.prompt(name, text("hi"))
                await b.idle(name)
                await released(store, name)
            in_memory = sorted(s.id for s in b.agent._sessions.all())
            assert in_memory == ["c", "d"]
            await until(lambda: [ends(n) for n in "abcd"] == [1, 1, 0, 0])
            listed = {s["sessionId"]: s["turns"] for s in b.agent.list_sessions()}
            assert listed == {"a": 1, "b": 1, "c": 1, "d": 1}  # stored, listed, not loaded
            await b.agent.prompt("a", text("again"))  # restored from the store
            await b.idle("a", 2)
            assert starts("a") == 2

    asyncio.run(scenario())


def test_background_work_keeps_the_lease_until_it_ends(tmp_path: Path) -> None:
    from agentkit import Booted, text, write_script

    os.chdir(tmp_path)
    HELD.clear()
    script = write_script(tmp_path, [
        {"text": "starting", "tool_calls": [{"name": "hold_session", "arguments": {}}]},
        {"text": "started"}])
    extra = [{"id": "hold", "name": "test_session_moves:HoldTools"}]

    async def scenario() -> None:
        async with Booted(tree(script, extra=extra)) as b:
            store = b.kernel.context.service("sessions")
            await b.agent.prompt("s", text("go"))
            await b.idle("s")
            await asyncio.sleep(0.3)  # six graces: still held, the work lives on
            assert store.lease("s") is not None and store.holds("s")
            [release] = HELD
            release()
            await released(store, "s")

    asyncio.run(scenario())


def test_summaries_count_turns_usage_cost_compaction_and_survive_a_resume(
        tmp_path: Path) -> None:
    """The summary the store keeps, after turns (usage and cost), a compaction (its own
    model call costs too), and a restart of the runtime that resumes the session."""
    from agentkit import Booted, text, write_script

    os.chdir(tmp_path)
    usage = {"inputTokens": 100, "outputTokens": 10, "cacheHitTokens": 60,
             "reasoningTokens": 4, "costUsd": 0.25}
    script = write_script(tmp_path, [
        {"text": "first", "usage": usage}, {"text": "second", "usage": usage},
        {"text": "the summary", "usage": {"inputTokens": 50, "outputTokens": 5,
                                          "costUsd": 0.5}},
        {"text": "third", "usage": usage}])

    async def scenario() -> None:
        async with Booted(tree(script)) as b:
            await b.agent.prompt("s", text("Title of it"))
            await b.idle("s")
            await b.agent.prompt("s", text("more"))
            await b.idle("s", 2)
            done = await b.agent.compact("s")
            assert done["compacted"] is True
            [entry] = b.agent.list_sessions()
            assert (entry["title"], entry["turns"]) == ("Title of it", 2)
            assert entry["usage"] == {"inputTokens": 250, "outputTokens": 25,
                                      "cacheHitTokens": 120, "cacheMissTokens": 80,
                                      "reasoningTokens": 8}
            assert entry["costUsd"] == 1.0
            assert entry["workspace"] == os.path.realpath(tmp_path)
        async with Booted(tree(script)) as b:  # a new runtime: resume, one more turn
            await b.agent.resume("s")
            await b.agent.prompt("s", text("once more"))
            await b.idle("s")
            [entry] = b.agent.list_sessions()
            assert entry["turns"] == 3 and entry["costUsd"] == 1.25
            assert entry["usage"]["inputTokens"] == 350
            # The last change: the turn's last event, or the save that follows it (the
            # summary moves to the time of either; a save may be a millisecond later).
            last = b.events("s")[-1]["time"]
            assert last <= entry["updatedAt"] <= time.time() * 1000

    asyncio.run(scenario())
