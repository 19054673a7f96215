"""What only the PostgreSQL store has: migrations from many hosts at once, a schema from a
newer dsh, goals in the shared database, the DSN kept secret, racing hosts, and the spool
that keeps what a client was sent while the database is away.

Everything runs against the session's real PostgreSQL (``pg_cluster``); "the database
going away" is a real fault: the server ends the store's connection
(``pg_terminate_backend``), or the server is stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from dsh.core.errors import (
    EXIT_FAILURE,
    EXIT_USAGE,
    ConfigError,
    DuplicateEventError,
    PluginError,
    SessionHeldError,
    StoreUnavailableError,
)
from dsh.runtime.agent import events
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.servers.errors import code_of

psycopg = pytest.importorskip("psycopg")

import pgcluster  # noqa: E402

from dsh.runtime.planning.goalstore import GoalError, change  # noqa: E402
from dsh.runtime.sessions.postgres import schema  # noqa: E402
from dsh.runtime.sessions.postgres.link import Link  # noqa: E402
from dsh.runtime.sessions.postgres.store import PostgresSessionStore  # noqa: E402


def event(seq: int, text: str = "x") -> dict[str, Any]:
    return events.event(events.ERROR, seq, {"message": text}, {})


def open_store(dsn: str, schema_name: str, home: Path, **kwargs: Any) -> PostgresSessionStore:
    link = Link(dsn)
    link.adopt(link.connect())
    return PostgresSessionStore(link, schema_name=schema_name, home=home, profile="sdk",
                                **kwargs)


def stored_seqs(cluster: pgcluster.Cluster, schema_name: str, session_id: str) -> list[int]:
    out = cluster.psql(f"SELECT seq FROM {schema_name}.events WHERE session_id = "
                       f"'{session_id}' ORDER BY seq", database=pgcluster.DATABASE)
    return [int(line) for line in out.split()]


def kill_connection(cluster: pgcluster.Cluster, store: PostgresSessionStore) -> None:
    """The server ends the store's connection (what a restart or failover does to it)."""
    pid = store.link._conn.info.backend_pid
    cluster.psql(f"SELECT pg_terminate_backend({pid})")


@pytest.fixture
def dsn(pg_cluster: pgcluster.Cluster) -> str:
    return pg_cluster.dsn()


def test_many_hosts_migrating_a_fresh_schema_at_once_create_it_once(
        pg_cluster: pgcluster.Cluster, pg_schema: str, tmp_path: Path) -> None:
    """Eight processes open the store on a schema nobody created, released together."""
    gate = tmp_path / "go"
    opener = textwrap.dedent(f"""
        import os, sys, time
        from dsh.runtime.sessions.postgres.link import Link
        from dsh.runtime.sessions.postgres.store import PostgresSessionStore
        link = Link({pg_cluster.dsn()!r}); link.adopt(link.connect())
        print("ready", flush=True)
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.001)
        store = PostgresSessionStore(link, schema_name={pg_schema!r},
                                     home=sys.argv[1], profile="sdk")
        print("from", store.migrated_from, flush=True)
        store.close()
    """)
    procs = [subprocess.Popen([sys.executable, "-c", opener, str(tmp_path / f"h{n}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(8)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        gate.touch()
        outs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in outs]
    froms = sorted(out.split()[1] for out, _ in outs)
    assert froms == ["0"] + [str(schema.VERSION)] * 7  # one created it, the rest found it
    tables = pg_cluster.psql(f"SELECT tablename FROM pg_tables WHERE schemaname = "
                             f"'{pg_schema}' ORDER BY tablename", database=pgcluster.DATABASE)
    assert tables.split() == sorted([*schema.TABLES, "dsh_schema"])


def test_a_schema_from_a_newer_dsh_is_refused_naming_both_versions(
        pg_cluster: pgcluster.Cluster, pg_schema: str, dsn: str, tmp_path: Path) -> None:
    open_store(dsn, pg_schema, tmp_path / "a").close()
    newer = schema.VERSION + 3
    pg_cluster.psql(f"UPDATE {pg_schema}.dsh_schema SET version = {newer}",
                    database=pgcluster.DATABASE)
    with pytest.raises(PluginError) as caught:
        open_store(dsn, pg_schema, tmp_path / "b")
    message = str(caught.value)
    assert f"version {newer}, newer than this dsh supports ({schema.VERSION})" in message
    assert pg_schema in message and pgcluster.PASSWORD not in message


def test_goals_live_in_the_shared_database(dsn: str, pg_schema: str, tmp_path: Path) -> None:
    first = open_store(dsn, pg_schema, tmp_path / "a", host="host-a")
    second = open_store(dsn, pg_schema, tmp_path / "b", host="host-b")
    try:
        goal = first.goals().create("s", "ship it", 3)
        assert (goal.id, goal.revision) == ("g-1", 1)
        with pytest.raises(GoalError, match="already has goal g-1"):
            second.goals().create("s", "another", 3)
        seen = second.goals().latest("s")
        assert seen == goal
        moved = change(seen, "update", revision=1, objective="ship it well")
        assert second.goals().replace(seen, moved)
        stale = change(goal, "complete", revision=1)
        assert not first.goals().replace(goal, stale)  # compare-and-set across hosts
        assert first.goals().bump_round(moved).rounds_used == 1
        done = change(first.goals().latest("s"), "complete", revision=2)
        assert first.goals().replace(moved, done)
        assert second.goals().create("s", "next", 2).id == "g-2"
        assert [g.id for g in first.goals().history("s")] == ["g-1", "g-2"]
    finally:
        first.close()
        second.close()


def test_concurrent_goal_creation_makes_one_goal(dsn: str, pg_schema: str,
                                                 tmp_path: Path) -> None:
    stores = [open_store(dsn, pg_schema, tmp_path / f"h{n}", host=f"host-{n}")
              for n in range(6)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(stores))

    def create(store: PostgresSessionStore) -> None:
        barrier.wait()
        try:
            outcomes.append(store.goals().create("race", "one of us", 5).id)
        except GoalError:
            outcomes.append("refused")

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for store in stores:
            store.close()
    assert sorted(outcomes) == ["g-1"] + ["refused"] * 5


def test_connect_errors_are_clear_and_never_show_the_password(
        pg_cluster: pgcluster.Cluster) -> None:
    cases = [
        (pg_cluster.dsn(password=None), ConfigError, "asks user 'dsh' for a password"),
        (pg_cluster.dsn(password="wrong-" + pgcluster.PASSWORD), ConfigError,
         "password authentication failed"),
        (pg_cluster.dsn(database="nope"), ConfigError, "does not exist"),
        (f"postgresql://dsh:{pgcluster.PASSWORD}@127.0.0.1:1/dsh", PluginError,
         "cannot reach PostgreSQL at postgresql://127.0.0.1:1/dsh as dsh"),
        (f"host=127.0.0.1 port=zz password={pgcluster.PASSWORD}", ConfigError,
         "not a usable PostgreSQL DSN"),
        (f"postgresql://dsh:{pgcluster.PASSWORD}@127.0.0.1:99999/dsh", ConfigError,
         "not a usable PostgreSQL DSN"),
    ]
    for dsn, kind, words in cases:
        with pytest.raises(kind) as caught:
            Link(dsn, connect_timeout_s=2).connect()
        error = caught.value
        assert type(error) is kind, (dsn, error)
        assert words in str(error), str(error)
        assert pgcluster.PASSWORD not in str(error)
        assert error.__cause__ is None and error.__suppress_context__
        assert error.exit_code == (EXIT_USAGE if kind is ConfigError else EXIT_FAILURE)


def test_a_lost_connection_spools_what_a_client_was_sent_and_recovery_stores_it(
        pg_cluster: pgcluster.Cluster, dsn: str, pg_schema: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = open_store(dsn, pg_schema, home)
    try:
        store.acquire("s")
        record = SessionRecord("s", "/w")
        store.save(record)
        for seq in range(3):
            record.events.append(event(seq))
            store.append("s", record.events[-1])
        kill_connection(pg_cluster, store)
        for seq in range(3, 6):
            record.events.append(event(seq, f"kept {seq}"))
            with pytest.raises(StoreUnavailableError) as caught:
                store.append("s", record.events[-1])
            assert caught.value.spooled and code_of(caught.value) == -32001
            assert pgcluster.PASSWORD not in str(caught.value)
        assert not store.link.up
        with pytest.raises(StoreUnavailableError):
            store.save(record)
        with pytest.raises(StoreUnavailableError):
            store.summaries()
        spooled = [json.loads(line) for line in store.spool.path.read_text().splitlines()]
        assert [e["event"]["seq"] for e in spooled if "event" in e] == [3, 4, 5]
        assert spooled[-1] == {"session": "s", "row": {"cwd": "/w", "title": "", "state": {
            "turns": 0, "context_cwd": None, "root": record.root, "granted": []}}}
        assert stored_seqs(pg_cluster, pg_schema, "s") == [0, 1, 2]
        store.recover(store.link.connect())
        assert stored_seqs(pg_cluster, pg_schema, "s") == [0, 1, 2, 3, 4, 5]
        assert not store.spool.path.exists()
        record.events.append(event(6))
        store.append("s", record.events[-1])
        assert store.load("s").events == record.events
    finally:
        store.close()


def test_a_dead_runtimes_spool_is_written_by_the_next_one_on_its_home(
        pg_cluster: pgcluster.Cluster, dsn: str, pg_schema: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    dead_pid = 2 ** 22 + 7
    first = open_store(dsn, pg_schema, home, pid=dead_pid)
    first.acquire("s")
    first.save(SessionRecord("s", "/w"))
    first.append("s", event(0))
    kill_connection(pg_cluster, first)
    with pytest.raises(StoreUnavailableError):
        first.append("s", event(1, "spooled"))
    with pytest.raises(StoreUnavailableError):
        first.save(SessionRecord("s", "/w", events=[event(0), event(1, "spooled")]))
    # the runtime dies here: no close, its lease and its spool stay behind
    heir = open_store(dsn, pg_schema, home, alive=lambda pid: pid != dead_pid)
    try:
        assert heir.claim_orphans() == 1
        assert stored_seqs(pg_cluster, pg_schema, "s") == [0, 1]
        assert heir.lease("s") is None  # taken over, written, given back
        assert list((home / "spool").glob("*.jsonl")) == []
        assert heir.acquire("s") is None
        assert [e["data"]["message"] for e in heir.load("s").events] == ["x", "spooled"]
    finally:
        heir.close()


def test_spooled_events_of_a_session_taken_over_meanwhile_are_set_aside(
        pg_cluster: pgcluster.Cluster, dsn: str, pg_schema: str, tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    first = open_store(dsn, pg_schema, tmp_path / "a", host="host-a", lease_expiry_ms=1000,
                       clock=lambda: now[0])
    other = open_store(dsn, pg_schema, tmp_path / "b", host="host-b", lease_expiry_ms=1000,
                       clock=lambda: now[0])
    lost: list[str] = []
    first.on_lost(lost.append)
    try:
        first.acquire("s")
        first.save(SessionRecord("s", "/w"))
        first.append("s", event(0))
        kill_connection(pg_cluster, first)
        with pytest.raises(StoreUnavailableError):
            first.append("s", event(1, "mine, spooled"))
        now[0] += 5000  # first's lease expires while it cannot reach the database
        assert other.acquire("s") is not None
        other.append("s", event(1, "theirs"))
        first.recover(first.link.connect())
        assert lost == ["s"] and not first.holds("s")
        assert [e["data"]["message"] for e in other.load("s").events] == ["x", "theirs"]
        kept = list((tmp_path / "a" / "spool" / "conflicts").glob("*.jsonl"))
        assert len(kept) == 1 and "mine, spooled" in kept[0].read_text()
        with pytest.raises(SessionHeldError):
            first.append("s", event(2))
    finally:
        first.close()
        other.close()


def test_two_runtimes_racing_to_append_never_overwrite_or_skip(
        dsn: str, pg_schema: str, tmp_path: Path) -> None:
    """The old holder keeps appending in a thread while another host takes the lease over
    and appends from where the log stood: every seq is written once, by one of them."""
    now = [1_700_000_000_000]
    old = open_store(dsn, pg_schema, tmp_path / "a", host="host-a", lease_expiry_ms=1000,
                     clock=lambda: now[0])
    new = open_store(dsn, pg_schema, tmp_path / "b", host="host-b", lease_expiry_ms=1000,
                     clock=lambda: now[0])
    stop = threading.Event()
    written: list[int] = []
    try:
        old.acquire("s")
        old.save(SessionRecord("s", "/w"))

        def keep_appending() -> None:
            seq = 0
            while not stop.is_set():
                try:
                    old.append("s", event(seq, "old"))
                except SessionHeldError:
                    return
                written.append(seq)
                seq += 1

        thread = threading.Thread(target=keep_appending)
        thread.start()
        while len(written) < 20 and thread.is_alive():
            stop.wait(0.001)
        now[0] += 5000
        new.acquire("s")
        loaded = new.load("s")
        base = len(loaded.events)
        for seq in range(base, base + 20):
            new.append("s", event(seq, "new"))
        stop.set()
        thread.join(30)
        final = new.load("s").events
        assert [e["seq"] for e in final] == list(range(len(final)))
        assert [e["data"]["message"] for e in final] == ["old"] * base + ["new"] * 20
        assert written == list(range(base))  # nothing the old holder thought written is lost
        with pytest.raises((SessionHeldError, DuplicateEventError)):
            old.append("s", event(len(final), "late"))
    finally:
        stop.set()
        old.close()
        new.close()


@pytest.mark.parametrize("dsn", [
    "postgresql://dsh:p%40ss%2Fw0rd@db:5432/dsh?sslmode=require",
    "postgres://dsh:p@ss/w0rd@db/dsh",
    "host=db user=dsh password='p@ss w0rd' dbname=dsh",
    "host=db password=p@ssw0rd port=zz",
    "postgresql:/dsh:p@ssw0rd@db/dsh oops",
    "postgresql:///dsh?host=/run/pg&password=p%40ssw0rd",
])
def test_the_dsn_is_described_and_scrubbed_in_every_spelling(dsn: str) -> None:
    from urllib.parse import unquote

    from dsh.runtime.sessions.postgres import dsn as dsn_mod

    found = dsn_mod.fields(dsn).get("password") or ""
    texts = [f'missing "=" after "{token}" in connection info string' for token in dsn.split()]
    texts += [f"could not connect with {dsn}: {found} {unquote(found)}"]
    for text in texts:
        scrubbed = dsn_mod.redact(text, dsn)
        for secret in ("p@ss", "p%40ss", "w0rd"):
            assert secret not in scrubbed, (dsn, scrubbed)
    assert "w0rd" not in dsn_mod.describe(dsn)


def test_leases_are_judged_on_the_servers_clock_whatever_each_hosts_says(
        dsn: str, pg_schema: str, tmp_path: Path) -> None:
    """A host whose clock runs two minutes fast (four expiries) neither takes a live lease
    over nor has its own live lease taken: both write and judge server time."""
    import time as time_mod

    def fast() -> int:
        return int(time_mod.time() * 1000) + 120_000

    slow = open_store(dsn, pg_schema, tmp_path / "a", host="host-slow")
    quick = open_store(dsn, pg_schema, tmp_path / "b", host="host-fast", host_clock=fast)
    try:
        slow.acquire("held-by-slow")
        quick.acquire("held-by-fast")
        with pytest.raises(SessionHeldError):
            quick.acquire("held-by-slow")
        with pytest.raises(SessionHeldError):
            slow.acquire("held-by-fast")
        beats = {lease.holder.host: lease.heartbeat_at for lease in
                 (slow.lease("held-by-slow"), slow.lease("held-by-fast"))}
        assert abs(beats["host-slow"] - beats["host-fast"]) < 30_000
    finally:
        quick.close()
        slow.close()
