"""A session database that is not what its version says is refused at start, in one line
naming it, and left byte for byte as it was (issue 34: it used to fail on use, with
``no such table: events`` in a traceback, or be migrated into another program's file).

Real ``dsh sessions list`` and ``dsh --profile headless|sdk`` processes on a home whose
``sessions.db`` is another program's file, from a newer dsh, or missing a table or a
column; and real runtimes on a PostgreSQL schema that another program owns or that lost
a table.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pgcluster
import pytest
from runtimeproc import OFFLINE_PATCH, REPO

from dsh.runtime.sessions import schema

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

POSTGRES_PATCH = REPO / "examples" / "postgres" / "patch.yml"


def write(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def dsh_file(path: Path, version: int, *damage: str) -> None:
    """A ``sessions.db`` as dsh left it at ``version``, then ``damage`` done to it."""
    steps = [s for step, script in schema._STEPS if step <= version
             for s in script.split(";") if s.strip()]
    write(path, *steps, f"PRAGMA user_version = {version}", *damage)


def foreign(path: Path) -> None:
    write(path, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
          "INSERT INTO notes (body) VALUES ('mine, not dsh''s')")


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "another program's file": (
        foreign, "is not a dsh sessions database: it has no dsh schema version and holds "
                 "tables dsh did not create (notes)"),
    "a newer dsh's file": (
        lambda p: dsh_file(p, schema.VERSION, f"PRAGMA user_version = {schema.VERSION + 1}"),
        f"has schema version {schema.VERSION + 1}, newer than this dsh supports "
        f"({schema.VERSION})"),
    "a table dropped": (
        lambda p: dsh_file(p, schema.VERSION, "DROP TABLE events"),
        f"is damaged: schema version {schema.VERSION}, but table events is missing"),
    "a column dropped": (
        lambda p: dsh_file(p, schema.VERSION, "DROP INDEX sessions_by_workspace",
                           "ALTER TABLE sessions DROP COLUMN workspace"),
        f"is damaged: schema version {schema.VERSION}, but table sessions lacks column "
        "workspace"),
    "an older file missing a table": (  # refused, not migrated half-way
        lambda p: dsh_file(p, 2, "DROP TABLE goals"),
        "is damaged: schema version 2, but table goals is missing"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wrong_sessions_db_is_refused_at_start_in_one_line_and_left_alone(
        case: str, run_dsh: Any, dsh_home: Path) -> None:
    make, words = CASES[case]
    db = dsh_home / "sessions.db"
    make(db)
    before = db.read_bytes()
    runs = [("sessions", "list"),
            ("--profile", "headless", "--patch", str(OFFLINE_PATCH), "hello")]
    for argv in runs:
        done = run_dsh(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (argv, done.stderr)
        assert str(db) in lines[0] and words in lines[0], (argv, lines[0])
        assert "Traceback" not in done.stderr
        assert done.stdout == ""
    # the SDK runtime refuses before it reads a request, the same way
    done = run_dsh("--profile", "sdk", "--patch", str(OFFLINE_PATCH), input=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "cwd": str(Path.cwd())}}) + "\n")
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert db.read_bytes() == before
    assert sorted(p.name for p in dsh_home.iterdir() if p.name.startswith("sessions.db")) \
        == ["sessions.db"]


def test_a_file_dsh_made_at_any_older_version_is_still_migrated(tmp_path: Path) -> None:
    """The check reads each version's shape from its own steps: every older file passes."""
    from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

    for version in range(1, schema.VERSION + 1):
        path = tmp_path / f"v{version}.db"
        dsh_file(path, version)
        SqliteSessionStore(path, profile="sdk").close()
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        finally:
            conn.close()


# -- PostgreSQL ------------------------------------------------------------------------


def pg_run(run_dsh: Any, tmp_path: Path, dsn: str, name: str) -> Any:
    patch = tmp_path / f"{name}.yml"
    patch.write_text(json.dumps([{"id": "sessions", "merge": {"config": {"schema": name}}}]))
    return run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch",
                   str(POSTGRES_PATCH), "--patch", str(patch), "hello",
                   env={"DSH_POSTGRES_DSN": dsn}, timeout=120)


def tables(cluster: pgcluster.Cluster, name: str) -> list[str]:
    return cluster.psql(f"SELECT tablename FROM pg_tables WHERE schemaname = '{name}' "
                        "ORDER BY tablename", database=pgcluster.DATABASE).split()


def test_a_wrong_postgresql_schema_is_refused_at_start_and_left_alone(
        run_dsh: Any, tmp_path: Path, pg_cluster: pgcluster.Cluster, pg_schema: str) -> None:
    pytest.importorskip("psycopg")
    dsn = pg_cluster.dsn()
    theirs = f"{pg_schema}_theirs"
    pg_cluster.psql(f"CREATE SCHEMA {theirs} AUTHORIZATION {pgcluster.ROLE}; "
                    f"CREATE TABLE {theirs}.sessions (id int); "
                    f"CREATE TABLE {theirs}.orders (id int)", database=pgcluster.DATABASE)
    done = pg_run(run_dsh, tmp_path, dsn, theirs)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert (f"PostgreSQL schema '{theirs}' at postgresql://127.0.0.1:{pg_cluster.port}/dsh "
            "as dsh is not dsh's: it has no dsh version and holds tables dsh did not create "
            "(orders, sessions)") in line, line
    assert tables(pg_cluster, theirs) == ["orders", "sessions"]  # no dsh_schema added
    doctor = run_dsh("doctor", "--live", "--json", "--profile", "headless", "--patch",
                     str(POSTGRES_PATCH), "--patch", str(tmp_path / f"{theirs}.yml"),
                     env={"DSH_POSTGRES_DSN": dsn}, timeout=120)
    [found] = [c for c in json.loads(doctor.stdout)["data"]["checks"]
               if c["id"] == "plugin.sessions.schema"]
    assert found["status"] == "fail" and "is not dsh's" in found["message"], found

    made = pg_run(run_dsh, tmp_path, dsn, pg_schema)  # a good one, then damaged
    assert made.returncode == 0, made.stderr
    pg_cluster.psql(f"DROP TABLE {pg_schema}.events", database=pgcluster.DATABASE)
    left = tables(pg_cluster, pg_schema)
    done = pg_run(run_dsh, tmp_path, dsn, pg_schema)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"PostgreSQL schema '{pg_schema}'" in line
    assert "is damaged: version 2, but table events is missing" in line, line
    assert pgcluster.PASSWORD not in done.stderr
    assert tables(pg_cluster, pg_schema) == left
