"""The SQLite session store on real files in the test's home."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from dsh.core.errors import PluginError
from dsh.runtime.agent import events
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.sessions import schema
from dsh.runtime.sessions.sqlite_store import CLOSED, INTERRUPTED, OPEN, SqliteSessionStore


def _store(home: Path, **kw: object) -> SqliteSessionStore:
    return SqliteSessionStore(home / "sessions.db", profile="sdk", **kw)  # type: ignore[arg-type]


def _turn(record: SessionRecord, store: SqliteSessionStore, text: str) -> None:
    """Append one completed turn's events the way the agent emits them."""
    def emit(kind: str, data: dict, extra: dict | None = None) -> None:
        event = events.event(kind, len(record.events), data, extra or {})
        record.events.append(event)
        store.append(record.session_id, event)

    record.turns += 1
    n = record.turns
    emit(events.TURN_START, events.turn_data(n))
    emit(events.STEP_START, events.step_data(n, 1))
    if record.system is None:
        record.system = events.system_message("be useful")
        emit(events.SYSTEM_MESSAGE, events.placed(n, 1, record.system), events.APPEND)
    prompt = events.user_message([{"type": "text", "text": text}], events.new_id())
    record.messages.append(prompt)
    emit(events.USER_MESSAGE, prompt, events.APPEND)
    context = events.context_message(record.cwd)
    record.messages.append(context)
    emit(events.USER_MESSAGE, context, events.APPEND)
    record.context_cwd = record.cwd
    answer = events.assistant_message([{"type": "text", "text": "ok " + text}],
                                      provider="scripted", model="m")
    record.messages.append(answer)
    emit(events.ASSISTANT_MESSAGE, events.assistant_data(n, 1, answer, None), events.APPEND)
    emit(events.STEP_END, events.step_data(n, 1))
    emit(events.TURN_END, events.turn_end(n, "completed"))


def test_append_and_load_round_trip(dsh_home: Path, tmp_path: Path) -> None:
    store = _store(dsh_home)
    try:
        record = SessionRecord("s1", str(tmp_path), title="first")
        store.acquire("s1")
        store.save(record)
        _turn(record, store, "hello")
        _turn(record, store, "again")
        store.save(record)
    finally:
        store.close()
    again = _store(dsh_home)
    try:
        loaded = again.load("s1")
        assert loaded is not None
        assert loaded.events == record.events
        assert loaded.messages == record.messages
        assert loaded.system == record.system
        assert (loaded.turns, loaded.title, loaded.cwd) == (2, "first", str(tmp_path))
        assert loaded.context_cwd == str(tmp_path)
        assert again.load("nope") is None
        assert again.status("s1") == CLOSED
    finally:
        again.close()


def test_events_appended_without_a_save_survive(dsh_home: Path, tmp_path: Path) -> None:
    """Appends alone are durable: a runtime that never saves again loses nothing."""
    store = _store(dsh_home)
    record = SessionRecord("s2", str(tmp_path))
    store.acquire("s2")
    store.save(record)
    _turn(record, store, "one")
    reader = _store(dsh_home, pid=1)  # another runtime, reading while the writer lives
    try:
        loaded = reader.load("s2")
        assert loaded is not None and [e["seq"] for e in loaded.events] == list(range(8))
        assert loaded.turns == 1 and len(loaded.messages) == 3
    finally:
        reader.close()
        store.close()


def test_save_fills_gaps_left_by_failed_appends(dsh_home: Path, tmp_path: Path) -> None:
    store = _store(dsh_home)
    try:
        record = SessionRecord("s3", str(tmp_path))
        for seq in range(3):
            record.events.append(events.event(events.ERROR, seq, {"message": str(seq)}, {}))
        store.acquire("s3")
        store.append("s3", record.events[0])
        store.save(record)
        store.save(record)  # idempotent
        loaded = store.load("s3")
        assert loaded is not None and loaded.events == record.events
    finally:
        store.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_created_private_with_wal_and_a_schema_version(tmp_path: Path) -> None:
    home = tmp_path / "fresh-home"
    store = _store(home)
    try:
        assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(home / "sessions.db").st_mode) == 0o600
        conn = store.connection
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    finally:
        store.close()


def test_a_newer_schema_is_refused(dsh_home: Path) -> None:
    conn = sqlite3.connect(dsh_home / "sessions.db")
    conn.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    conn.close()
    with pytest.raises(PluginError, match="newer than this dsh supports"):
        _store(dsh_home)


def test_sessions_of_dead_runtimes_become_interrupted(dsh_home: Path, tmp_path: Path) -> None:
    dead = _store(dsh_home, pid=999_999_999)
    dead.acquire("gone")
    dead.save(SessionRecord("gone", str(tmp_path)))
    dead.connection.close()  # a crash: no close(), the row stays open
    dead._conn = None  # type: ignore[assignment]
    store = _store(dsh_home)
    try:
        store.acquire("mine")
        store.save(SessionRecord("mine", str(tmp_path)))
        assert store.status("gone") == OPEN
        store.reconcile(alive=lambda pid: False)
        assert store.status("gone") == INTERRUPTED
        assert store.status("mine") == OPEN  # our own pid is never "dead"
        assert [s["sessionId"] for s in store.summaries()] == ["gone", "mine"]
    finally:
        store.close()


def test_the_log_is_indexed_by_session_and_seq(dsh_home: Path) -> None:
    """Appends and loads are a primary-key insert and range scan, never a table scan."""
    store = _store(dsh_home)
    try:
        plan = " ".join(r[3] for r in store.connection.execute(
            "EXPLAIN QUERY PLAN SELECT body FROM events WHERE session_id = ? ORDER BY seq",
            ("x",)))
        assert "SEARCH events USING PRIMARY KEY" in plan and "TEMP B-TREE" not in plan
    finally:
        store.close()


def test_a_log_is_parsed_in_one_call_with_the_collector_paused_and_restored() -> None:
    import gc

    from dsh.runtime.sessions import records

    log = [{"seq": n, "type": "error", "data": {"message": "é\u2028\"x\"", "n": [n, 1.5]}}
           for n in range(50)]
    bodies = [records.encode(e) for e in log]
    assert gc.isenabled()
    assert records.decode(bodies) == log and gc.isenabled()
    gc.disable()
    try:
        assert records.decode(bodies) == log and not gc.isenabled()
    finally:
        gc.enable()
    assert records.decode([]) == []
