"""A store made by a dsh from before session summaries gains them when it is opened:
``sessions.db`` at schema version 3 and a PostgreSQL schema at version 1, each built
here with that version's own statements (the ones the old dsh ran, kept in the migration
list) and filled as the old dsh filled it, then opened by today's store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from dsh.runtime.agent import events
from dsh.runtime.sessions import schema
from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

USED = {"inputTokens": 1000, "outputTokens": 50, "cacheHitTokens": 900,
        "cacheMissTokens": 100, "reasoningTokens": 7, "costUsd": 0.004}


def old_log(turns: int) -> list[dict[str, Any]]:
    """A log as an old dsh wrote it: a title, then ``turns`` turns with usage."""
    log = [events.event(events.SESSION_TITLE, 0, {"title": "Old work"}, {})]
    for turn in range(1, turns + 1):
        for kind, data in ((events.TURN_START, {"turn": turn}),
                           (events.ASSISTANT_MESSAGE, {"turn": turn, "step": 1, "usage": USED,
                                                       "message": {"role": "assistant",
                                                                   "content": []}}),
                           (events.TURN_END, {"turn": turn,
                                              "reason": {"kind": "completed"}})):
            log.append(events.event(kind, len(log), data, {}))
    for n, item in enumerate(log):
        item["time"] = 1_700_000_000_000 + n
    return log


ROWS = [("two", "/w/two", 2, "/w"), ("none", "/w/none", 0, None)]
"""``(id, cwd, turns, state root)``: a session with turns, one never prompted (its state
from before roots were kept: its cwd is its root)."""


def check(entries: list[dict[str, Any]]) -> None:
    two, none = sorted(entries, key=lambda e: e["sessionId"], reverse=True)
    assert (two["sessionId"], two["title"], two["turns"], two["workspace"]) == (
        "two", "Old work", 2, "/w")
    assert two["usage"] == {"inputTokens": 2000, "outputTokens": 100, "cacheHitTokens": 1800,
                            "cacheMissTokens": 200, "reasoningTokens": 14}
    assert two["costUsd"] == 0.008
    assert two["updatedAt"] == 1_700_000_000_000 + 6
    assert (none["turns"], none["workspace"], none["costUsd"]) == (0, "/w/none", 0.0)


def test_an_old_sessions_db_is_migrated_with_its_summaries(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for _, script in schema._STEPS[:3]:
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    for session_id, cwd, turns, root in ROWS:
        state = {"turns": turns, **({"root": root} if root else {})}
        conn.execute("INSERT INTO sessions (id, profile, cwd, status, title, created_at, "
                     "updated_at, state) VALUES (?, 'sdk', ?, 'closed', ?, 1, 2, ?)",
                     (session_id, cwd, "Old work" if turns else "", json.dumps(state)))
        for item in old_log(turns) if turns else []:
            conn.execute("INSERT INTO events (session_id, seq, type, time, body) VALUES "
                         "(?, ?, ?, ?, ?)", (session_id, item["seq"], item["type"],
                                             item["time"], json.dumps(item)))
    conn.close()
    store = SqliteSessionStore(path, profile="sdk")
    try:
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        check(store.summaries())
        assert len(store.load("two").events) == 7  # the log itself untouched
        store.close()
        store = SqliteSessionStore(path, profile="sdk")  # opened again: nothing counted twice
        check(store.summaries())
    finally:
        store.close()


def test_an_old_postgres_schema_is_migrated_with_its_summaries(pg_cluster: Any, pg_schema: str,
                                                               tmp_path: Path) -> None:
    import psycopg

    from dsh.runtime.sessions.postgres import schema as pg
    from dsh.runtime.sessions.postgres.link import Link
    from dsh.runtime.sessions.postgres.store import PostgresSessionStore

    s = pg.quoted(pg_schema)
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(f"CREATE TABLE {s}.dsh_schema (id integer PRIMARY KEY CHECK (id = 1), "
                     "version integer NOT NULL, written_by text NOT NULL)")
        for statement in pg.MIGRATIONS[0][1]:
            conn.execute(statement.format(s=s))
        conn.execute(f"INSERT INTO {s}.dsh_schema VALUES (1, 1, 'dsh 0.0.9')")
        for session_id, cwd, turns, root in ROWS:
            state = {"turns": turns, **({"root": root} if root else {})}
            conn.execute(f"INSERT INTO {s}.sessions (id, profile, cwd, status, title, "
                         "created_at, updated_at, state) VALUES (%s, 'sdk', %s, 'closed', "
                         "%s, 1, 2, %s)", (session_id, cwd, "Old work" if turns else "",
                                           json.dumps(state)))
            for item in old_log(turns) if turns else []:
                conn.execute(f"INSERT INTO {s}.events (session_id, seq, type, time, body) "
                             "VALUES (%s, %s, %s, %s, %s)",
                             (session_id, item["seq"], item["type"], item["time"],
                              json.dumps(item)))

    def opened() -> PostgresSessionStore:
        link = Link(pg_cluster.dsn())
        link.adopt(link.connect())
        return PostgresSessionStore(link, schema_name=pg_schema, home=tmp_path / "home",
                                    profile="sdk")

    store = opened()
    try:
        assert store.migrated_from == 1
        check(store.summaries())
    finally:
        store.close()
    store = opened()
    try:
        assert store.migrated_from == pg.VERSION
        check(store.summaries())
    finally:
        store.close()
