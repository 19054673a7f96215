"""``dsh sessions export/import``: a home's SQLite history moved to PostgreSQL and back,
through the real ``dsh`` command, byte for byte; re-importing changes nothing; a session
held by a runtime or whose stored log differs is refused (exit 1); a malformed or cut file
is exit 2 naming the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pgcluster
import pytest
from runtimeproc import REPO

from dsh.runtime.agent import events
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

psycopg = pytest.importorskip("psycopg")

POSTGRES_PATCH = REPO / "examples" / "postgres" / "patch.yml"


def event(seq: int, text: str) -> dict[str, Any]:
    return events.event(events.ERROR, seq, {"message": text}, {})


def fill_sqlite(home: Path) -> None:
    store = SqliteSessionStore(home / "sessions.db", profile="sdk")
    try:
        for name, count in (("alpha", 3), ("beta", 5)):
            store.acquire(name)
            record = SessionRecord(name, f"/work/{name}", title=f"{name} ü")
            record.events = [event(seq, f"{name} {seq} ✓") for seq in range(count)]
            store.save(record)
            store.release(name)
        goals = store.goals()
        goals.create("beta", "finish beta", 4)
    finally:
        store.close()


@pytest.fixture
def pg_patch(tmp_path: Path, pg_schema: str) -> Path:
    patch = tmp_path / "schema.yml"
    patch.write_text(json.dumps([{"id": "sessions", "merge": {"config": {"schema": pg_schema}}}]))
    return patch


def test_sqlite_to_postgres_and_back_is_byte_for_byte(
        run_dsh: Any, dsh_home: Path, tmp_path: Path, pg_cluster: pgcluster.Cluster,
        pg_patch: Path) -> None:
    fill_sqlite(dsh_home)
    pg = ["--patch", str(POSTGRES_PATCH), "--patch", str(pg_patch)]
    env = {"DSH_POSTGRES_DSN": pg_cluster.dsn()}
    out = tmp_path / "out.jsonl"
    done = run_dsh("sessions", "export", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ("exported 2 sessions (8 events, 1 goal) from row 'sessions' "
                           "(sessions-sqlite)\n")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"format": "dsh-sessions", "version": 1}
    assert json.loads(lines[-1]) == {"type": "end", "sessions": 2, "events": 8}
    done = run_dsh("sessions", "import", *pg, str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("imported 2 sessions (8 events, 1 goal) into row 'sessions' "
                           "(sessions-postgres)\n")
    again = run_dsh("sessions", "import", *pg, str(out), env=env)  # idempotent
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr
    back = run_dsh("sessions", "export", *pg, env=env)
    assert back.returncode == 0, back.stderr
    assert back.stdout == out.read_text(encoding="utf-8")
    assert pgcluster.PASSWORD not in back.stdout + back.stderr + done.stdout + done.stderr
    one = run_dsh("sessions", "export", *pg, "--session", "beta", env=env)
    assert [json.loads(line)["type"] for line in one.stdout.splitlines()[1:]] == \
        ["session"] + ["event"] * 5 + ["goal", "end"]


def test_a_differing_log_or_a_held_session_is_refused(
        run_dsh: Any, dsh_home: Path, tmp_path: Path, pg_cluster: pgcluster.Cluster,
        pg_patch: Path, pg_schema: str) -> None:
    fill_sqlite(dsh_home)
    out = tmp_path / "out.jsonl"
    assert run_dsh("sessions", "export", "-o", str(out)).returncode == 0
    from dsh.runtime.sessions.postgres.link import Link
    from dsh.runtime.sessions.postgres.store import PostgresSessionStore

    link = Link(pg_cluster.dsn())
    link.adopt(link.connect())
    store = PostgresSessionStore(link, schema_name=pg_schema, home=tmp_path / "other",
                                 profile="sdk", host="elsewhere")
    try:
        store.acquire("alpha")
        store.save(SessionRecord("alpha", "/w", events=[event(0, "another history")]))
        store.release("alpha")
        store.acquire("beta")  # a runtime on another host runs beta right now
        done = run_dsh("sessions", "import", "--patch", str(POSTGRES_PATCH), "--patch",
                       str(pg_patch), str(out), env={"DSH_POSTGRES_DSN": pg_cluster.dsn()})
    finally:
        store.close()
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("imported 0 sessions")
    assert lines[1] == ("refused alpha: the stored log differs from the file at seq 0; "
                        "nothing more of it was imported")
    assert lines[2].startswith("refused beta: session busy: 'beta' is held by another "
                               "runtime") and "host elsewhere" in lines[2]


@pytest.mark.parametrize(("text", "message"), [
    ("", "in.jsonl:1: not a dsh sessions export"),
    ('{"format": "dsh-sessions", "version": 9}\n', "in.jsonl:1: export format version 9"),
    ('{"format": "dsh-sessions", "version": 1}\nnot json\n', "in.jsonl:2: not JSON"),
    ('{"format": "dsh-sessions", "version": 1}\n{"type": "session", "id": "a", "cwd": "/"}\n'
     '{"type": "event", "session": "a", "event": {"seq": 1}}\n',
     "in.jsonl:3: session a: expected the event with seq 0"),
    ('{"format": "dsh-sessions", "version": 1}\n{"type": "session", "id": "a", "cwd": "/"}\n',
     "in.jsonl:2: the file ends without its trailer line"),
    # After a trailer only another export may follow (two files joined), never stray lines.
    ('{"format": "dsh-sessions", "version": 1}\n{"type": "end", "sessions": 0}\n'
     '{"type": "session", "id": "a", "cwd": "/"}\n',
     "in.jsonl:3: not a dsh sessions export (a line after a trailer must be"),
    ('{"format": "dsh-sessions", "version": 1}\n{"type": "end", "sessions": 0}\n'
     '{"format": "dsh-sessions", "version": 1}\n{"type": "end", "sessions": 1}\n',
     "in.jsonl:4: the trailer counts 1 session, the export before it holds 0"),
])
def test_a_malformed_or_cut_file_is_refused_naming_the_line(
        run_dsh: Any, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(text, encoding="utf-8")
    done = run_dsh("sessions", "import", "in.jsonl", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"dsh: error: {message}"), done.stderr


def test_export_of_an_unknown_session_writes_nothing(run_dsh: Any, dsh_home: Path,
                                                     tmp_path: Path) -> None:
    fill_sqlite(dsh_home)
    out = tmp_path / "out.jsonl"
    done = run_dsh("sessions", "export", "--session", "ghost", "-o", str(out))
    assert done.returncode == 2
    assert done.stderr == "dsh: error: no session 'ghost' in this store\n"
    assert list(tmp_path.glob("*.jsonl")) == [] and list(tmp_path.glob(".out*")) == []
