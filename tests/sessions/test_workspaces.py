"""Workspace reference counting on a real ``sessions.db``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.sessions import workspaces
from dsh.runtime.sessions.sqlite_store import SqliteSessionStore


@pytest.fixture
def store(dsh_home: Path) -> SqliteSessionStore:
    store = SqliteSessionStore(dsh_home / "sessions.db", profile="sdk")
    yield store
    store.close()


def test_shared_by_parent_and_sub_agent_cleaned_at_zero(store: SqliteSessionStore,
                                                         dsh_home: Path) -> None:
    conn = store.connection
    path = store.acquire_workspace("parent")
    assert path == dsh_home / "workspaces" / "parent" and path.is_dir()
    (path / "notes.txt").write_text("kept while shared")
    assert store.acquire_workspace("child", "parent") == path
    store.acquire_workspace("child", "parent")  # a second acquire counts once
    assert workspaces.refs(conn, "parent") == 2
    assert store.release_workspace("parent") is False
    assert (path / "notes.txt").exists() and workspaces.refs(conn, "parent") == 1
    assert store.release_workspace("child", "parent") is True
    assert not path.exists() and workspaces.refs(conn, "parent") == 0


def test_forced_release_cleans_a_shared_workspace(store: SqliteSessionStore) -> None:
    path = store.acquire_workspace("a")
    store.acquire_workspace("b", "a")
    assert store.release_workspace("b", "a", force=True) is True
    assert not path.exists() and workspaces.refs(store.connection, "a") == 0


def test_the_session_row_names_its_workspace(store: SqliteSessionStore, tmp_path: Path) -> None:
    store.acquire("child")
    store.save(SessionRecord("child", str(tmp_path)))
    store.acquire_workspace("child", "shared")
    row = store.connection.execute("SELECT workspace_id FROM sessions WHERE id = 'child'")
    assert row.fetchone()[0] == "shared"


def test_reconcile_drops_holders_of_dead_processes(dsh_home: Path) -> None:
    conn_store = SqliteSessionStore(dsh_home / "sessions.db", profile="sdk", pid=4242)
    conn = conn_store.connection
    try:
        dead = workspaces.acquire(conn, dsh_home, "w1", "dead-session", pid=4242)
        live = workspaces.acquire(conn, dsh_home, "w2", "live-session", pid=7)
        workspaces.acquire(conn, dsh_home, "w2", "dead-child", pid=4242)
        cleaned = workspaces.reconcile(conn, dsh_home, alive=lambda pid: pid == 7)
        assert cleaned == ["w1"] and not dead.exists()
        assert live.exists() and workspaces.refs(conn, "w2") == 1
    finally:
        conn.close()
        conn_store._conn = None  # type: ignore[assignment]


def test_close_releases_only_this_runtimes_holds(dsh_home: Path) -> None:
    other = SqliteSessionStore(dsh_home / "sessions.db", profile="sdk", pid=1)
    mine = SqliteSessionStore(dsh_home / "sessions.db", profile="sdk")
    try:
        shared = other.acquire_workspace("parent")
        mine.acquire_workspace("child", "parent")
        own = mine.acquire_workspace("solo")
        mine.close()
        assert shared.exists() and not own.exists()
        assert workspaces.refs(other.connection, "parent") == 1
    finally:
        mine.close()
        other.close()


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "..\\x"])
def test_workspace_ids_cannot_escape(store: SqliteSessionStore, dsh_home: Path,
                                     bad: str) -> None:
    with pytest.raises(ValueError, match="invalid workspace id"):
        workspaces.acquire(store.connection, dsh_home, bad, "s")


def test_pid_alive() -> None:
    import os

    assert workspaces.pid_alive(os.getpid())
    assert not workspaces.pid_alive(0)
    assert not workspaces.pid_alive(999_999_999)
