"""Workspaces: ``$DSH_HOME/workspaces/<id>/`` shared by a session and its sub-agents.

A workspace is reference-counted in ``sessions.db``: each holder is a ``(workspace,
session, pid)`` row, and ``workspaces.refs`` is kept equal to the number of holders in the
same transaction. The directory is removed only when the count reaches zero (or when
forced), so a sub-agent finishing never pulls files from under its parent. A runtime that
dies cannot release what it held; :func:`reconcile` drops holders whose process is gone
and cleans what that leaves at zero, which the sessions service runs at start.

Every function takes an autocommit connection (``isolation_level=None``) and runs one
``BEGIN IMMEDIATE`` transaction; directories are touched only after the commit decides.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dsh.core.process import pid_alive

PidAlive = Callable[[int], bool]
"""Whether a holder's process still runs (:func:`dsh.core.process.pid_alive` by default)."""


def root(home: str | os.PathLike[str]) -> Path:
    """Where workspaces live under a home."""
    return Path(home) / "workspaces"


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One immediate (write-locking) transaction, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _check_id(workspace_id: str) -> None:
    # The id becomes a directory name: refuse anything that could leave workspaces/.
    if (not workspace_id or workspace_id in (".", "..") or "/" in workspace_id
            or "\\" in workspace_id or "\0" in workspace_id):
        raise ValueError(f"invalid workspace id: {workspace_id!r}")


def _recount(conn: sqlite3.Connection, workspace_id: str) -> int:
    refs = conn.execute("SELECT count(*) FROM workspace_refs WHERE workspace_id = ?",
                        (workspace_id,)).fetchone()[0]
    conn.execute("UPDATE workspaces SET refs = ?, updated_at = ? WHERE id = ?",
                 (refs, int(time.time() * 1000), workspace_id))
    return int(refs)


def acquire(conn: sqlite3.Connection, home: str | os.PathLike[str], workspace_id: str,
            session_id: str, *, pid: int | None = None) -> Path:
    """Hold ``workspace_id`` for ``session_id`` (created on first use); returns its path.

    Idempotent per session: a session holds a workspace once however often it asks.
    """
    _check_id(workspace_id)
    path = root(home) / workspace_id
    now = int(time.time() * 1000)
    with transaction(conn):
        conn.execute("INSERT OR IGNORE INTO workspaces (id, path, refs, created_at, "
                     "updated_at) VALUES (?, ?, 0, ?, ?)", (workspace_id, str(path), now, now))
        conn.execute("INSERT OR REPLACE INTO workspace_refs (workspace_id, session_id, pid) "
                     "VALUES (?, ?, ?)", (workspace_id, session_id,
                                          os.getpid() if pid is None else pid))
        _recount(conn, workspace_id)
        conn.execute("UPDATE sessions SET workspace_id = ? WHERE id = ?",
                     (workspace_id, session_id))
    os.makedirs(root(home), mode=0o700, exist_ok=True)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def release(conn: sqlite3.Connection, home: str | os.PathLike[str], workspace_id: str,
            session_id: str, *, force: bool = False) -> bool:
    """Drop ``session_id``'s hold; True when the workspace was cleaned.

    It is cleaned at count zero, or at once with ``force`` (every holder dropped).
    """
    _check_id(workspace_id)
    with transaction(conn):
        if force:
            conn.execute("DELETE FROM workspace_refs WHERE workspace_id = ?", (workspace_id,))
        else:
            conn.execute("DELETE FROM workspace_refs WHERE workspace_id = ? AND "
                         "session_id = ?", (workspace_id, session_id))
        exists = conn.execute("SELECT 1 FROM workspaces WHERE id = ?",
                              (workspace_id,)).fetchone() is not None
        clean = exists and _recount(conn, workspace_id) == 0
        if clean:
            conn.execute("DELETE FROM workspaces WHERE id = ?", (workspace_id,))
    if clean:
        shutil.rmtree(root(home) / workspace_id, ignore_errors=True)
    return clean


def refs(conn: sqlite3.Connection, workspace_id: str) -> int:
    """The workspace's reference count (0 when it does not exist)."""
    row = conn.execute("SELECT refs FROM workspaces WHERE id = ?", (workspace_id,)).fetchone()
    return 0 if row is None else int(row[0])


def reconcile(conn: sqlite3.Connection, home: str | os.PathLike[str], *,
              alive: PidAlive = pid_alive) -> list[str]:
    """Drop holders whose process is gone, recount, clean every workspace left at zero.

    Returns the cleaned ids. Directories without a row are left alone: they are not
    ours to delete.
    """
    with transaction(conn):
        pids = [row[0] for row in conn.execute("SELECT DISTINCT pid FROM workspace_refs")]
        for pid in pids:
            if not alive(pid):
                conn.execute("DELETE FROM workspace_refs WHERE pid = ?", (pid,))
        ids = [row[0] for row in conn.execute("SELECT id FROM workspaces")]
        cleaned = [wid for wid in ids if _recount(conn, wid) == 0]
        for wid in cleaned:
            conn.execute("DELETE FROM workspaces WHERE id = ?", (wid,))
    for wid in cleaned:
        shutil.rmtree(root(home) / wid, ignore_errors=True)
    return cleaned
