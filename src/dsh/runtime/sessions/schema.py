"""The ``sessions.db`` schema, versioned with ``PRAGMA user_version``.

One module owns every table so the store and the workspace functions agree on names, and
a future version adds a migration step here rather than scattering ``ALTER TABLE``.

* ``sessions``: one row per session. ``owner_pid`` is the runtime process holding it live
  (NULL once closed); ``state`` is a small JSON snapshot refreshed at every save: turn
  count, the directory the model was last told about (``context_cwd``), the workspace
  root fixed at creation (``root``) and the granted roots (``granted``), so a resumed
  session keeps its boundary (a row without ``root`` takes its ``cwd``).
* ``events``: the append-only log, keyed ``(session_id, seq)`` without a rowid, so an
  append is one B-tree insert and a load is one range scan, both flat as the file grows.
* ``workspaces`` / ``workspace_refs``: a workspace directory and who holds it; ``refs``
  always equals the number of ``workspace_refs`` rows (updated in the same transaction),
  so acquiring twice for one session counts once.
* ``goals`` (version 2): each session's goals (``g-1``, ``g-2`` ... in ``number`` order).
  ``revision`` counts the model's changes, for compare-and-set updates; ``rounds_used``
  counts the turns the goal was active, which the runtime bumps without a new revision.
* ``session_leases`` (version 3): which runtime runs each session (one at a time). A row
  names its holder (``holder_id``, unique per runtime process, with its ``host`` and
  ``pid``) and its last ``heartbeat_at`` (epoch ms). Its own table rather than columns of
  ``sessions``: a lease is taken before a new session's row exists, and is gone, not
  nulled, when released. See :mod:`dsh.runtime.agent.store` for the rules.
* summary columns of ``sessions`` (version 4): ``workspace``, ``turns``, token counts,
  ``cost_usd`` and ``revision`` (:mod:`dsh.runtime.sessions.summaries`), indexed for the
  newest-first listing and for a workspace's latest session. A file migrated to version
  4 has them filled from its logs, once, in the migration's transaction.
"""

from __future__ import annotations

import sqlite3

from dsh.core.errors import EXIT_USAGE, PluginError
from dsh.runtime.sessions import schemashape, summaries

VERSION = 4

_V1 = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    cwd TEXT NOT NULL,
    status TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    workspace_id TEXT,
    owner_pid INTEGER,
    state TEXT NOT NULL DEFAULT '{}'
) WITHOUT ROWID;
CREATE INDEX sessions_by_owner ON sessions (owner_pid) WHERE owner_pid IS NOT NULL;
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE workspaces (
    id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    refs INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE workspace_refs (
    workspace_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, session_id)
) WITHOUT ROWID;
"""

_V2 = """
CREATE TABLE goals (
    session_id TEXT NOT NULL,
    id TEXT NOT NULL,
    number INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    objective TEXT NOT NULL,
    status TEXT NOT NULL,
    max_rounds INTEGER NOT NULL,
    rounds_used INTEGER NOT NULL DEFAULT 0,
    blocked_reason TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, id)
) WITHOUT ROWID;
"""

_V3 = """
CREATE TABLE session_leases (
    session_id TEXT PRIMARY KEY,
    holder_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX session_leases_by_holder ON session_leases (holder_id);
"""

_V4 = """
ALTER TABLE sessions ADD COLUMN workspace TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN turns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cache_hit_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cache_miss_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sessions_by_updated ON sessions (updated_at);
CREATE INDEX sessions_by_workspace ON sessions (workspace, updated_at);
"""

_STEPS = ((1, _V1), (2, _V2), (3, _V3), (4, _V4))
"""Each version's statements, applied in order to a file at any older version."""


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the database at ``path`` to :data:`VERSION`, or refuse it as it is.

    Runs in one immediate transaction, so two runtimes opening a fresh home at once
    create the schema once. An older file gets the missing steps of :data:`_STEPS`, so a
    home made by an earlier dsh keeps its sessions and gains the new tables (and, from
    before version 4, its sessions' summaries).

    Before any step, the file is checked against what its version says
    (:func:`check`): a newer version, another program's file, or one missing a table or
    column is refused (``PluginError``, exit 2) with nothing changed.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        check(conn, path, found)
        for version, script in _STEPS:
            if found < version:
                for statement in _statements(script):
                    conn.execute(statement)
        if 0 < found < 4:
            _fill_summaries(conn)
        if found < VERSION:
            conn.execute(f"PRAGMA user_version = {VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def check(conn: sqlite3.Connection, path: str, found: int) -> None:
    """Refuse a file that is not a ``sessions.db`` at version ``found``: newer than this
    dsh, tables but no dsh version (another program's), or a table or column its version
    has missing. One line naming the file and what is wrong, exit 2."""
    away = "move the file away (dsh then creates a new one)"
    if found > VERSION:
        raise PluginError(f"{path} has schema version {found}, newer than this dsh "
                          f"supports ({VERSION})", hint="upgrade dsh or use another home",
                          exit_code=EXIT_USAGE)
    present = tables_of(conn)
    if found == 0:
        if present:
            raise PluginError(f"{path} is not a dsh sessions database: it has no dsh schema "
                              f"version and holds tables dsh did not create "
                              f"({', '.join(sorted(present))})",
                              hint=f"use another home, or {away}", exit_code=EXIT_USAGE)
        return
    wrong = schemashape.problems(expected(found), present)
    if wrong:
        raise PluginError(f"{path} is damaged: schema version {found}, but "
                          f"{'; '.join(wrong)}", hint=f"restore it from a backup, or {away}",
                          exit_code=EXIT_USAGE)


def expected(version: int) -> schemashape.Shape:
    """The tables and columns a file at ``version`` has."""
    return schemashape.shape(tuple(statement for step, script in _STEPS if step <= version
                                   for statement in _statements(script)))


def tables_of(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """The file's tables (SQLite's own left out) and their columns, in one query."""
    found: dict[str, set[str]] = {}
    for table, column in conn.execute(
            "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"):
        found.setdefault(table, set()).add(column)
    return found


def _statements(script: str) -> list[str]:
    return [statement for statement in script.split(";") if statement.strip()]


def _fill_summaries(conn: sqlite3.Connection) -> None:
    """Version 4 on a file that has sessions: each row's workspace from its state, and
    its summary folded from its log (one ordered scan, a session at a time)."""
    rows = conn.execute("SELECT id, cwd, state FROM sessions").fetchall()
    conn.executemany("UPDATE sessions SET workspace = ? WHERE id = ?",
                     [(summaries.workspace_of(cwd, state), sid) for sid, cwd, state in rows])
    update = summaries.update_sql("sessions", greatest="max", mark="?")
    scan = conn.execute("SELECT session_id, body FROM events ORDER BY session_id, seq")
    for session_id, found in list(summaries.backfill(scan)):
        conn.execute(update, summaries.update_params(session_id, found.as_delta()))
