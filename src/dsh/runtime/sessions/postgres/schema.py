"""The PostgreSQL schema of ``sessions-postgres``: created and migrated by the plugin.

Every table lives in one PostgreSQL schema (``config.schema``, default ``dsh``), so a
database can hold other things, or several dsh deployments side by side. The version is
a row of ``<schema>.dsh_schema``; :data:`MIGRATIONS` is this store's own numbered list
(independent of ``sessions.db``'s versions), each step applied once, in order.

Safe from many hosts at once: :func:`migrate` runs in one transaction under a
transaction-level advisory lock (``pg_advisory_xact_lock``) keyed by the schema's name,
so runtimes starting together on a fresh database create the tables once, and one from
an older dsh never runs half a migration against a newer one. A schema newer than this
dsh knows is refused naming both versions.

Tables (the SQLite store's, minus workspaces, which are paths on each host):

* ``sessions``: one row per session; ``owner_holder``/``owner_host``/``owner_pid`` name
  the runtime running it (NULL once closed); ``state`` the small JSON snapshot (text,
  as the SQLite store keeps it: an export carries it byte for byte).
* ``events``: the log, primary key ``(session_id, seq)``; ``body`` is the event's JSON
  text exactly as a client received it (text, not jsonb, which would reorder keys).
* ``session_leases``: one lease per session (holder, host, pid, heartbeat in epoch ms).
* ``goals``: each session's goals, compare-and-set on ``revision``.

Before any step, the schema is checked against what its version says (:func:`check`):
a version newer than this dsh, tables in the schema but no ``dsh_schema`` (another
program's), or a table or column its version has missing is refused naming the schema,
with nothing changed (:mod:`dsh.runtime.sessions.schemashape`).

Version 2 adds the summary columns of ``sessions`` (:mod:`dsh.runtime.sessions.summaries`:
workspace, turns, token counts, cost, revision) with the listing's indexes, and fills them
from the stored logs in the migration's transaction.
"""

from __future__ import annotations

import re
from typing import Any

from dsh.core.errors import EXIT_USAGE, ConfigError, PluginError
from dsh.runtime.sessions import schemashape, summaries

SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_V1 = (
    """CREATE TABLE {s}.sessions (
        id text PRIMARY KEY,
        profile text NOT NULL,
        cwd text NOT NULL,
        status text NOT NULL,
        title text NOT NULL DEFAULT '',
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        owner_holder text,
        owner_host text,
        owner_pid integer,
        state text NOT NULL DEFAULT '{{}}'
    )""",
    "CREATE INDEX sessions_by_owner ON {s}.sessions (owner_holder) "
    "WHERE owner_holder IS NOT NULL",
    """CREATE TABLE {s}.events (
        session_id text NOT NULL,
        seq integer NOT NULL,
        type text NOT NULL,
        time bigint NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    """CREATE TABLE {s}.session_leases (
        session_id text PRIMARY KEY,
        holder_id text NOT NULL,
        host text NOT NULL,
        pid integer NOT NULL,
        acquired_at bigint NOT NULL,
        heartbeat_at bigint NOT NULL
    )""",
    "CREATE INDEX session_leases_by_holder ON {s}.session_leases (holder_id)",
    """CREATE TABLE {s}.goals (
        session_id text NOT NULL,
        id text NOT NULL,
        number integer NOT NULL,
        revision integer NOT NULL,
        objective text NOT NULL,
        status text NOT NULL,
        max_rounds integer NOT NULL,
        rounds_used integer NOT NULL DEFAULT 0,
        blocked_reason text,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        PRIMARY KEY (session_id, id)
    )""",
)

_V2 = (
    *(f"ALTER TABLE {{s}}.sessions ADD COLUMN {column} {kind} NOT NULL DEFAULT {default}"
      for column, kind, default in (
          ("workspace", "text", "''"), ("turns", "integer", "0"),
          *((c, "bigint", "0") for c in summaries.USAGE_COLUMNS),
          ("cost_usd", "double precision", "0"), ("revision", "bigint", "0"))),
    "CREATE INDEX sessions_by_updated ON {s}.sessions (updated_at)",
    "CREATE INDEX sessions_by_workspace ON {s}.sessions (workspace, updated_at)",
)

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = ((1, _V1), (2, _V2))
"""Each version's statements (``{s}`` is the quoted schema), applied in order."""
VERSION = MIGRATIONS[-1][0]
TABLES = ("sessions", "events", "session_leases", "goals")


def check_name(schema: str) -> str:
    """A schema name dsh can quote safely; ConfigError naming ``config.schema`` else."""
    if not SCHEMA_NAME.match(schema):
        raise ConfigError(f"config.schema: {schema!r} is not a schema name dsh uses "
                          "(lower-case letters, digits and _, not starting with a digit, "
                          "at most 63)")
    return schema


def quoted(schema: str) -> str:
    """The schema as an SQL identifier (checked by :func:`check_name`)."""
    return f'"{check_name(schema)}"'


def found_version(conn: Any, schema: str) -> int | None:
    """The schema's version, or None when dsh has not created it (no lock taken)."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{quoted(schema)}.dsh_schema",)).fetchone()
    if row is None or row[0] is None:
        return None
    version = conn.execute(f"SELECT version FROM {quoted(schema)}.dsh_schema WHERE id = 1"
                           ).fetchone()
    return None if version is None else int(version[0])


def check(conn: Any, schema: str, where: str) -> int:
    """The version of ``schema`` (0 when dsh has not created it), or ``PluginError``
    (exit 2) naming it and what is wrong: a version newer than this dsh, tables but no
    dsh version (another program's schema), a table or column its version has missing.
    Reads only (the doctor asks it too)."""
    found = found_version(conn, schema) or 0
    if found > VERSION:
        raise PluginError(f"PostgreSQL schema {schema!r} at {where} has version {found}, "
                          f"newer than this dsh supports ({VERSION})",
                          hint="upgrade dsh on this host, or use another schema",
                          exit_code=EXIT_USAGE)
    present = tables_of(conn, schema)
    versioned = present.pop("dsh_schema", None) is not None
    if found == 0:
        if present and versioned:
            raise PluginError(f"PostgreSQL schema {schema!r} at {where} is damaged: its "
                              "dsh_schema table holds no version, but it has tables",
                              hint="restore it from a backup, or set config.schema to "
                                   "another schema", exit_code=EXIT_USAGE)
        if present:
            raise PluginError(f"PostgreSQL schema {schema!r} at {where} is not dsh's: it has "
                              f"no dsh version and holds tables dsh did not create "
                              f"({', '.join(sorted(present))})",
                              hint="set config.schema to a schema of dsh's own",
                              exit_code=EXIT_USAGE)
        return found
    wrong = schemashape.problems(expected(found), present)
    if wrong:
        raise PluginError(f"PostgreSQL schema {schema!r} at {where} is damaged: version "
                          f"{found}, but {'; '.join(wrong)}",
                          hint="restore it from a backup, or set config.schema to another "
                               "schema", exit_code=EXIT_USAGE)
    return found


def expected(version: int) -> schemashape.Shape:
    """The tables and columns a schema at ``version`` has."""
    return schemashape.shape(tuple(statement for step, statements in MIGRATIONS
                                   if step <= version for statement in statements))


def tables_of(conn: Any, schema: str) -> dict[str, set[str]]:
    """The tables of ``schema`` and their columns, in one query (the catalog, which shows
    every table whatever the role may read)."""
    found: dict[str, set[str]] = {}
    for table, column in conn.execute(
            "SELECT c.relname, a.attname FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 "
            "AND NOT a.attisdropped", (schema,)):
        found.setdefault(table, set()).add(column)
    return found


def migrate(conn: Any, schema: str, where: str) -> int:
    """Bring ``schema`` to :data:`VERSION` (creating it on first use); returns the version
    found before (0 for a fresh one). ``where`` names the database in errors.

    One transaction under an advisory lock: a concurrent runtime waits, then finds the
    work done. A schema :func:`check` refuses is refused before anything changes.
    """
    s = quoted(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"dsh.schema:{schema}",))
        found = check(conn, schema, where)
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.dsh_schema (id integer PRIMARY KEY "
                     "CHECK (id = 1), version integer NOT NULL, written_by text NOT NULL)")
        for version, statements in MIGRATIONS:
            if found < version:
                for statement in statements:
                    conn.execute(statement.format(s=s))
        if 0 < found < 2:
            _fill_summaries(conn, s)
        if found < VERSION:
            from dsh._version import __version__

            conn.execute(f"INSERT INTO {s}.dsh_schema (id, version, written_by) "
                         "VALUES (1, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                         "version = excluded.version, written_by = excluded.written_by",
                         (VERSION, f"dsh {__version__}"))
    return found


def _fill_summaries(conn: Any, s: str) -> None:
    """Version 2 on a schema that has sessions: each row's workspace from its state, and
    its summary folded from its log (one ordered scan through a server-side cursor, a
    session at a time)."""
    rows = conn.execute(f"SELECT id, cwd, state FROM {s}.sessions").fetchall()
    with conn.cursor() as cur:
        cur.executemany(f"UPDATE {s}.sessions SET workspace = %s WHERE id = %s",
                        [(summaries.workspace_of(cwd, state), sid) for sid, cwd, state in rows])
    update = summaries.update_sql(f"{s}.sessions", greatest="GREATEST", mark="%s")
    found = []
    with conn.cursor(name="dsh_fill_summaries") as scan:
        scan.execute(f"SELECT session_id, body FROM {s}.events ORDER BY session_id, seq")
        found = list(summaries.backfill(scan))
    with conn.cursor() as cur:
        cur.executemany(update, [summaries.update_params(session_id, f.as_delta())
                                 for session_id, f in found])
