"""The session store contract (``dsh/runtime/agent/store.py``): leases and paging.

Written against the store API only, through :class:`Backend`, which opens stores of one
kind on one shared database as different runtimes (host, pid, holder id, clock, pid
probe). Every test runs once per kind in ``BACKENDS``: SQLite (one ``sessions.db``) and
PostgreSQL (one schema of a real server, each store its own connection and its own
home for the host-local parts).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

import pytest

from dsh.core.errors import DuplicateEventError, SessionHeldError
from dsh.runtime.agent import events
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.agent.store import HistoryPage, SessionStore
from dsh.runtime.servers.errors import code_of
from dsh.runtime.sessions import schema
from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

EXPIRY_MS = 30_000
HOST = "host-a"


class Clock:
    """Epoch milliseconds that move only when a test says so."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Backend(Protocol):
    """Opens stores sharing one database, each as the runtime the arguments describe."""

    def open(self, *, host: str, pid: int, clock: Clock,
             alive: Callable[[int], bool]) -> SessionStore: ...


class SqliteBackend:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.opened: list[SqliteSessionStore] = []

    def open(self, *, host: str, pid: int, clock: Clock,
             alive: Callable[[int], bool]) -> SessionStore:
        store = SqliteSessionStore(self.path, profile="sdk", pid=pid, host=host,
                                   lease_expiry_ms=EXPIRY_MS, clock=clock, alive=alive)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


class PostgresBackend:
    def __init__(self, dsn: str, schema: str, tmp: Path) -> None:
        self.dsn = dsn
        self.schema = schema
        self.tmp = tmp
        self.opened: list[Any] = []

    def open(self, *, host: str, pid: int, clock: Clock,
             alive: Callable[[int], bool]) -> SessionStore:
        from dsh.runtime.sessions.postgres.link import Link
        from dsh.runtime.sessions.postgres.store import PostgresSessionStore

        link = Link(self.dsn)
        link.adopt(link.connect())
        home = self.tmp / f"home-{len(self.opened)}"
        store = PostgresSessionStore(link, schema_name=self.schema, home=home, profile="sdk",
                                     pid=pid, host=host, lease_expiry_ms=EXPIRY_MS,
                                     clock=clock, alive=alive)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "postgres":
        cluster = request.getfixturevalue("pg_cluster")
        opened: Any = PostgresBackend(cluster.dsn(), request.getfixturevalue("pg_schema"),
                                      tmp_path)
    else:
        opened = SqliteBackend(tmp_path / "sessions.db")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def runtime(backend: Backend, clock: Clock, *, host: str = HOST, pid: int = 100,
            dead: frozenset[int] = frozenset()) -> Any:
    """A store as runtime ``pid`` on ``host``; pids in ``dead`` are gone on this host."""
    return backend.open(host=host, pid=pid, clock=clock, alive=lambda p: p not in dead)


def event(seq: int, text: str = "x") -> dict[str, Any]:
    return events.event(events.ERROR, seq, {"message": text}, {})


def test_a_free_lease_is_taken_and_refreshed_by_its_holder(backend: Backend,
                                                           clock: Clock) -> None:
    store = runtime(backend, clock)
    assert store.lease("s") is None
    assert store.acquire("s") is None
    first = store.lease("s")
    assert first.holder == store.holder and first.holder.host == HOST
    assert first.acquired_at == first.heartbeat_at == clock.now
    clock.now += 1000
    assert store.acquire("s") is None  # a refresh, not a new lease
    again = store.lease("s")
    assert (again.acquired_at, again.heartbeat_at) == (first.acquired_at, clock.now)


def test_a_live_holder_keeps_its_session(backend: Backend, clock: Clock) -> None:
    holder = runtime(backend, clock, pid=100)
    other = runtime(backend, clock, pid=200)
    far = runtime(backend, clock, host="host-b", pid=100)  # same pid, another machine
    holder.acquire("s")
    assert holder.holder.holder_id not in (other.holder.holder_id, far.holder.holder_id)
    for contender in (other, far):
        with pytest.raises(SessionHeldError) as caught:
            contender.acquire("s")
        error = caught.value
        assert code_of(error) == -32001 and error.retryable and not error.lost
        assert error.data == {"retryable": True, "holder": {"host": HOST, "pid": 100}}
        assert f"pid 100 on host {HOST}" in error.message
    assert holder.lease("s").holder == holder.holder


def test_a_dead_holder_on_this_host_is_taken_over_at_once(backend: Backend,
                                                          clock: Clock) -> None:
    dead = runtime(backend, clock, pid=100)
    dead.acquire("s")
    dead.save(SessionRecord("s", "/w"))
    dead.append("s", event(0))
    # host-b cannot see host-a's processes: for it the lease is live until it expires
    with pytest.raises(SessionHeldError):
        runtime(backend, clock, host="host-b", dead=frozenset({100})).acquire("s")
    heir = runtime(backend, clock, pid=200, dead=frozenset({100}))
    taken = heir.acquire("s")
    assert taken is not None and taken.holder == dead.holder
    assert heir.lease("s").holder == heir.holder
    # the old holder, had it lived on, can write nothing more
    with pytest.raises(SessionHeldError) as caught:
        dead.append("s", event(1, "late"))
    assert caught.value.lost and caught.value.holder == {"host": HOST, "pid": 200}
    with pytest.raises(SessionHeldError):
        dead.save(SessionRecord("s", "/elsewhere"))
    assert dead.heartbeat() == []  # it already knows
    heir.append("s", event(1, "mine"))
    assert [e["data"]["message"] for e in heir.load("s").events] == ["x", "mine"]
    assert heir.load("s").cwd == "/w"


def test_a_lease_expires_without_heartbeats_on_any_host(backend: Backend,
                                                        clock: Clock) -> None:
    holder = runtime(backend, clock, pid=100)
    holder.acquire("s")
    far = runtime(backend, clock, host="host-b", pid=300)
    clock.now += EXPIRY_MS  # not older than the expiry yet
    with pytest.raises(SessionHeldError):
        far.acquire("s")
    assert holder.heartbeat() == []  # a heartbeat keeps it
    clock.now += EXPIRY_MS
    with pytest.raises(SessionHeldError):
        far.acquire("s")
    clock.now += EXPIRY_MS + 1
    taken = far.acquire("s")
    assert taken is not None and taken.holder == holder.holder
    assert holder.heartbeat() == ["s"]  # the stalled holder learns it lost the session
    assert holder.heartbeat() == []
    with pytest.raises(SessionHeldError) as caught:
        holder.append("s", event(0))
    assert caught.value.holder == {"host": "host-b", "pid": 300}


def test_release_and_close_hand_the_session_on(backend: Backend, clock: Clock) -> None:
    first = runtime(backend, clock, pid=100)
    second = runtime(backend, clock, pid=200)
    first.acquire("a")
    first.acquire("b")
    first.release("a")
    assert second.acquire("a") is None
    first.release("a")  # not its lease any more: nothing happens
    assert second.lease("a").holder == second.holder
    first.close()
    assert second.acquire("b") is None


def test_writes_need_the_lease_and_never_replace_a_seq(backend: Backend,
                                                       clock: Clock) -> None:
    store = runtime(backend, clock)
    with pytest.raises(SessionHeldError) as caught:
        store.append("s", event(0))
    assert not caught.value.lost and "not leased by this runtime" in caught.value.message
    with pytest.raises(SessionHeldError):
        store.save(SessionRecord("s", "/w"))
    assert store.load("s") is None
    store.acquire("s")
    store.save(SessionRecord("s", "/w"))
    store.append("s", event(0, "first"))
    with pytest.raises(DuplicateEventError) as dup:
        store.append("s", event(0, "second"))
    assert (dup.value.session_id, dup.value.seq) == ("s", 0)
    store.append("s", event(1))
    assert [e["data"]["message"] for e in store.load("s").events] == ["first", "x"]


def test_history_pages_are_bounded_by_count_and_bytes(backend: Backend, clock: Clock) -> None:
    store = runtime(backend, clock)
    assert store.history_page("s", start_seq=0, limit=10, max_bytes=1000) is None
    store.acquire("s")
    store.save(SessionRecord("s", "/w"))
    assert store.history_page("s", start_seq=0, limit=10, max_bytes=1000) == \
        HistoryPage([], None)
    log = [event(seq, "m" * (2000 if seq == 5 else 10)) for seq in range(12)]
    for item in log:
        store.append("s", item)
    size = len(json.dumps(log[0], separators=(",", ":")))

    def page(start: int, limit: int, max_bytes: int) -> tuple[list[int], int | None]:
        found = store.history_page("s", start_seq=start, limit=limit, max_bytes=max_bytes)
        return [e["seq"] for e in found.events], found.next_seq

    assert page(0, 4, 10_000) == ([0, 1, 2, 3], 4)
    assert page(8, 4, 10_000) == ([8, 9, 10, 11], None)
    assert page(0, 100, 3 * size) == ([0, 1, 2], 3)  # the byte bound
    assert page(3, 100, 3 * size) == ([3, 4], 5)  # seq 5 does not fit behind them
    assert page(5, 100, 3 * size) == ([5], 6)  # alone, it is a page: paging moves on
    assert page(12, 5, 10_000) == ([], None)
    assert store.history_page("s", start_seq=0, limit=100, max_bytes=10**6).events == log
    # reading needs no lease: another runtime pages the same log
    reader = runtime(backend, clock, host="host-b", pid=7)
    assert reader.history_page("s", start_seq=3, limit=2, max_bytes=10_000) == \
        HistoryPage(log[3:5], 5)


def test_racing_runtimes_take_a_dead_holders_session_once(tmp_path: Path) -> None:
    """Eight processes race for one stale lease at the same instant: exactly one wins
    (the takeover is a compare-and-set on the holder and heartbeat it judged)."""
    path = tmp_path / "sessions.db"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    with closing(SqliteSessionStore(path, profile="sdk", pid=dead_pid)) as dead:
        dead.acquire("s")
        dead._held.clear()  # a crash: the lease stays behind
        dead._conn.close()
        dead._conn = None  # type: ignore[assignment]
    gate = tmp_path / "go"
    racer = textwrap.dedent(f"""
        import os, sys, time
        from dsh.core.errors import SessionHeldError
        from dsh.runtime.sessions.sqlite_store import SqliteSessionStore
        store = SqliteSessionStore({str(path)!r}, profile="sdk", busy_timeout_ms=20000)
        print("ready", flush=True)
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.001)
        try:
            taken = store.acquire("s")
            print("won" if taken is not None and taken.holder.pid == {dead_pid} else "odd",
                  flush=True)
        except SessionHeldError as exc:
            print("busy", exc.holder["pid"], flush=True)
        sys.stdin.read()  # live on (a dead winner's lease is rightly taken) until told
        os._exit(0)  # keep the lease: no close()
    """)
    racers = [subprocess.Popen([sys.executable, "-c", racer], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for _ in range(8)]
    try:
        for proc in racers:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        gate.touch()
        outcomes = [proc.stdout.readline().split() for proc in racers]  # type: ignore[union-attr]
        for proc in racers:
            proc.communicate(timeout=60)
    finally:
        for proc in racers:
            if proc.poll() is None:
                proc.kill()
    winners = [racer.pid for racer, out in zip(racers, outcomes, strict=True)
               if out == ["won"]]
    assert len(winners) == 1, outcomes
    assert sorted(out for out in outcomes if out != ["won"]) == [
        ["busy", str(winners[0])]] * 7
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT pid FROM session_leases").fetchall() == [(winners[0],)]


def test_a_version_2_database_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        for script in (schema._V1, schema._V2):
            for statement in script.split(";"):
                if statement.strip():
                    db.execute(statement)
        db.execute("INSERT INTO sessions (id, profile, cwd, status, created_at, updated_at) "
                   "VALUES ('old', 'sdk', '/', 'closed', 0, 0)")
        kept = event(0)
        db.execute("INSERT INTO events VALUES ('old', 0, 'error', 0, ?)", (json.dumps(kept),))
        db.execute("PRAGMA user_version = 2")
    store = SqliteSessionStore(path, profile="sdk")
    try:
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert store.load("old").events == [kept]
        assert store.acquire("old") is None
        store.append("old", event(1))
        assert [e["seq"] for e in store.load("old").events] == [0, 1]
    finally:
        store.close()


# -- summaries, versions, watched sessions, removal (issue 30) -----------------------------


def turn_of(start: int, turn: int, usage: dict[str, Any] | None = None,
            at: int = 1_700_000_000_000) -> list[dict[str, Any]]:
    """One turn's summary-relevant events from seq ``start``, at times from ``at``."""
    answer = {"turn": turn, "step": 1, "message": {"role": "assistant", "content": []}}
    if usage is not None:
        answer["usage"] = usage
    made = [events.event(events.TURN_START, start, {"turn": turn}, {}),
            events.event(events.ASSISTANT_DELTA, start + 1, {"text": "…"}, {}),
            events.event(events.ASSISTANT_MESSAGE, start + 2, answer, {}),
            events.event(events.TURN_END, start + 3, {"turn": turn,
                                                       "reason": {"kind": "completed"}}, {})]
    for offset, item in enumerate(made):
        item["time"] = at + offset
    return made


USED = {"inputTokens": 100, "outputTokens": 10, "cacheHitTokens": 60,
        "cacheMissTokens": 40, "reasoningTokens": 3, "costUsd": 0.125}


def test_summaries_follow_every_append_and_read_no_log(backend: Backend,
                                                       clock: Clock) -> None:
    store = runtime(backend, clock)
    store.acquire("s")
    store.save(SessionRecord("s", "/w/sub", root="/w"))
    title = events.event(events.SESSION_TITLE, 0, {"title": "Fix it"}, {})
    store.append("s", title)
    for item in turn_of(1, 1, USED):
        store.append("s", item)
    [entry] = store.summaries()
    assert entry == {"sessionId": "s", "cwd": "/w/sub", "workspace": "/w", "title": "Fix it",
                     "createdAt": entry["createdAt"], "updatedAt": entry["updatedAt"],
                     "turns": 1, "usage": {"inputTokens": 100, "outputTokens": 10,
                                           "cacheHitTokens": 60, "cacheMissTokens": 40,
                                           "reasoningTokens": 3},
                     "costUsd": 0.125, "status": "open", "profile": "sdk"}
    # a refused append changes nothing; a duplicate seq neither
    with pytest.raises(DuplicateEventError):
        store.append("s", turn_of(1, 1, USED)[2])
    thief = runtime(backend, clock, pid=200, dead=frozenset({100}))
    thief.acquire("s")
    with pytest.raises(SessionHeldError):
        store.append("s", turn_of(5, 2, USED)[2])
    assert thief.summaries() == [entry]
    # the new holder's turns add up; save writes what an append missed, counted once
    later = turn_of(5, 2, USED, at=1_700_000_100_000)
    thief.append("s", later[0])
    record = thief.load("s")
    record.events.extend(later[1:])
    thief.save(record)
    thief.save(record)
    [after] = thief.summaries()
    assert (after["turns"], after["costUsd"], after["usage"]["inputTokens"]) == (2, 0.25, 200)
    assert after["updatedAt"] >= later[-1]["time"]
    assert thief.summary("s") == after and thief.summary("nope") is None


def test_summaries_list_newest_first_by_workspace_and_bounded(backend: Backend,
                                                              clock: Clock) -> None:
    store = runtime(backend, clock)
    for n, (name, root) in enumerate([("a", "/w1"), ("b", "/w2"), ("c", "/w1")]):
        store.acquire(name)
        store.save(SessionRecord(name, root))
        for item in turn_of(0, 1, at=1_800_000_000_000 + n * 1000):
            store.append(name, item)
    assert [s["sessionId"] for s in store.summaries()] == ["a", "b", "c"]
    assert [s["sessionId"] for s in store.summaries(newest_first=True)] == ["c", "b", "a"]
    assert [s["sessionId"] for s in store.summaries(workspace="/w1",
                                                    newest_first=True)] == ["c", "a"]
    assert [s["sessionId"] for s in store.summaries(newest_first=True, limit=1)] == ["c"]
    assert store.summaries(workspace="/elsewhere") == []


def test_a_version_moves_with_every_write_and_watchers_hear_of_moves(backend: Backend,
                                                                      clock: Clock) -> None:
    mine = runtime(backend, clock, pid=100)
    other = runtime(backend, clock, pid=200)
    assert mine.version("s") is None
    mine.acquire("s")
    mine.save(SessionRecord("s", "/w"))
    first = mine.version("s")
    mine.append("s", event(0))
    appended = mine.version("s")
    assert appended[1] == first[1] + 1
    mine.save(mine.load("s"))
    assert mine.version("s")[0] > appended[0]
    heard: list[tuple[str, Any]] = []
    mine.on_moved(lambda session_id, holder: heard.append((session_id, holder)))
    seen = mine.version("s")
    mine.release("s")
    mine.watch("s", seen)
    assert mine.heartbeat() == [] and heard == []  # nothing happened yet
    other.acquire("s")
    mine.heartbeat()
    assert heard == [("s", other.holder)]
    mine.heartbeat()
    assert len(heard) == 1  # told once
    other.append("s", event(1))
    other.release("s")
    mine.watch("s", seen)
    mine.heartbeat()
    assert heard[-1] == ("s", None)  # written and given back: moved, nobody holds it
    mine.watch("s", mine.version("s"))
    mine.unwatch("s")
    other.acquire("s")
    mine.heartbeat()
    assert len(heard) == 2


def test_live_leases_and_removing_a_session(backend: Backend, clock: Clock) -> None:
    holder = runtime(backend, clock, pid=100)
    cli = runtime(backend, clock, pid=300, dead=frozenset({200}))
    gone = runtime(backend, clock, pid=200)
    for name, store in (("held", holder), ("free", holder), ("orphan", gone)):
        store.acquire(name)
        store.save(SessionRecord(name, "/w"))
        store.append(name, event(0))
    holder.release("free")
    assert set(cli.live_leases(["held", "free", "orphan", "nope"])) == {"held"}
    with pytest.raises(SessionHeldError):
        cli.delete("held")
    assert holder.load("held") is not None and holder.lease("held").holder == holder.holder
    workspace = cli.acquire_workspace("free")
    assert workspace.is_dir()
    assert cli.delete("free") is True and cli.delete("orphan") is True
    assert not workspace.exists()  # its last hold went with it
    assert cli.load("free") is None and cli.version("orphan") is None
    assert cli.lease("free") is None and cli.lease("orphan") is None
    assert cli.history_page("free", start_seq=0, limit=10, max_bytes=1 << 20) is None
    assert cli.delete("nope") is False
    assert [s["sessionId"] for s in cli.summaries()] == ["held"]


def test_an_import_brings_the_summaries_along(backend: Backend, clock: Clock,
                                              tmp_path: Path) -> None:
    import io

    from dsh.runtime.sessions.transfer import export, import_

    source = SqliteSessionStore(tmp_path / "source.db", profile="sdk")
    try:
        source.acquire("s")
        source.save(SessionRecord("s", "/w"))
        source.append("s", events.event(events.SESSION_TITLE, 0, {"title": "Moved"}, {}))
        for item in [*turn_of(1, 1, USED), *turn_of(5, 2, USED)]:
            source.append("s", item)
        source.save(source.load("s"))
        source.release("s")
        text = io.StringIO()
        export(source, text)
        expected = source.summaries()
    finally:
        source.close()
    target = runtime(backend, clock)
    for _ in range(2):  # idempotent: the second import writes (and counts) nothing new
        counts = import_(target, io.StringIO(text.getvalue()).readlines(), "export.jsonl")
        assert counts.refused == ()
    [entry] = target.summaries()
    for key in ("title", "turns", "usage", "costUsd", "workspace", "createdAt"):
        assert entry[key] == expected[0][key], key


def open_turn_log() -> list[dict[str, Any]]:
    """A log a runtime was killed inside: turn 1, step 1, a tool call with no result."""
    message = events.assistant_message([events.tool_call_block("c1", "bash", "{}")],
                                       provider="scripted", model="scripted")
    return [events.event(events.TURN_START, 0, events.turn_data(1), {}),
            events.event(events.STEP_START, 1, events.step_data(1, 1), {}),
            events.event(events.ASSISTANT_MESSAGE, 2, events.placed(1, 1, message),
                         events.APPEND),
            events.event(events.TOOL_CALL, 3, events.tool_call(1, 1, "c1", "bash", "{}"), {})]


def test_a_turn_a_dead_holder_left_open_is_closed_for_every_reader(backend: Backend,
                                                                   clock: Clock) -> None:
    """``close_abandoned``: nothing while the holder lives (its turn may be running);
    once it is known dead (its pid gone on this host, or its lease expired on any), the
    reader closes the turn in the store, under the lease, as a restore would, once."""
    from dsh.runtime.agent import recovery

    holder = runtime(backend, clock, pid=100)
    for session_id in ("far", "near", "done"):
        holder.acquire(session_id)
        holder.save(SessionRecord(session_id, "/w", events=open_turn_log()))
    holder.append("done", events.event(events.TURN_END, 4, events.turn_end(1, "completed"),
                                       {}))
    holder.release("done")

    def log(store: Any, session_id: str) -> list[dict[str, Any]]:
        return store.history_page(session_id, start_seq=0, limit=100, max_bytes=1 << 20).events

    far = runtime(backend, clock, host="host-b", pid=300)
    near = runtime(backend, clock, pid=200)
    assert not far.close_abandoned("far") and not near.close_abandoned("near")
    assert [e["type"] for e in log(far, "far")] == [
        "turn/start", "step/start", "assistant/message", "tool/call"]
    assert not near.close_abandoned("done")  # nobody holds it, and no turn is open
    assert near.lease("done") is None

    heir = runtime(backend, clock, pid=200, dead=frozenset({100}))
    assert heir.close_abandoned("near")  # the pid is gone on this host: at once
    assert not far.close_abandoned("far")  # host-b cannot see it: it waits for the expiry
    clock.now += EXPIRY_MS + 1
    assert far.close_abandoned("far")
    for reader, session_id in ((heir, "near"), (far, "far")):
        found = log(reader, session_id)
        assert [e["seq"] for e in found] == list(range(7))
        tail = found[4:]
        assert [e["type"] for e in tail] == ["tool/result", "step/end", "turn/end"]
        assert tail[0]["sourceEventSeqs"] == [3]
        assert tail[0]["data"]["message"]["toolCallId"] == "c1"
        assert tail[0]["data"]["error"] == {"name": "ToolNotRunError", "code": "NOT_RUN"}
        assert tail[1]["data"] == {"turn": 1, "step": 1}
        assert tail[2]["data"] == {"turn": 1, "reason": {"kind": "error", "error": {
            "message": "the runtime stopped during this turn", "code": "interrupted"}}}
        assert reader.lease(session_id) is None  # taken for the close, given back
        assert not reader.close_abandoned(session_id)  # closed once
        assert near.history_page(session_id, start_seq=0, limit=100,
                                 max_bytes=1 << 20).events == found  # every reader alike
        # the old holder, had it lived on, stores nothing more; a restore adds nothing
        with pytest.raises(SessionHeldError):
            holder.append(session_id, event(7, "late"))
        restorer = runtime(backend, clock, pid=400, dead=frozenset({100}))
        restorer.acquire(session_id)
        assert recovery.closing(restorer.load(session_id).events) == []
        restorer.release(session_id)
