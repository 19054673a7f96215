"""The session store behind the ``sessions`` service: ``$DSH_HOME/sessions.db``.

It implements the agent's :class:`~dsh.runtime.agent.store.SessionStore` (the contract,
leases included, is written there) and, beyond ``save``/``load``, ``append``: the agent
calls it for every event *before* a client sees the event, each append its own
transaction, so a crash loses at most the event being written and every event a client
received is on disk. ``save`` refreshes the session row and writes any event an append
missed (an append that failed, say on a full disk, is retried there), so the log never
has gaps once a save succeeds.

Leases live in ``session_leases``. Taking one is a single conditional UPSERT (a fresh
lease, or this holder's own); only when another holder has it is the row read, judged
(:func:`~dsh.runtime.agent.store.stale`) and, if stale, taken by a compare-and-set on the
holder and heartbeat read, so two runtimes racing for a dead holder's session cannot both
win. Appends are fenced by the lease in the same statement (``INSERT ... SELECT ...
WHERE EXISTS`` the lease), and the log's key ``(session_id, seq)`` refuses a second event
with a seq: nothing is overwritten or silently dropped.

``load`` rebuilds the record from the log itself (the conversation is the message events
in order), not from a snapshot that a crash could leave stale. WAL mode with
``synchronous=NORMAL`` keeps a commit to a write of the log without an fsync: a power
cut may lose the last commits, but never corrupts the file.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsh.core.errors import EXIT_USAGE, DuplicateEventError, PluginError, SessionHeldError
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.agent.store import HistoryPage, Lease, LeaseHolder, stale
from dsh.runtime.sessions import records, schema, workspaces
from dsh.runtime.sessions.goals import SqliteGoals
from dsh.runtime.sessions.tracking import Tracking
from dsh.runtime.sessions.transfer import SessionInfo

logger = logging.getLogger("dsh.sessions")

OPEN, CLOSED, INTERRUPTED = "open", "closed", "interrupted"
"""``sessions.status``: held by a live runtime, closed by it, or left by one that died."""

DEFAULT_LEASE_EXPIRY_MS = 30_000
"""A lease whose heartbeat is older than this may be taken over by any runtime."""


def _now() -> int:
    return int(time.time() * 1000)


def _create_private(path: Path) -> None:
    """Create the database file 0600 (and its home 0700) before SQLite opens it."""
    if not path.parent.exists():
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


class SqliteSessionStore(Tracking):
    """Sessions and their event logs in one SQLite file, used from the runtime's loop thread.

    ``profile`` is recorded on sessions this runtime creates; ``pid`` marks the ones it
    holds live, so a later runtime can tell a crashed holder from a running one. The lease
    holder is this process (``pid`` on ``host``, a fresh ``holder_id``); ``lease_expiry_ms``,
    ``clock`` (epoch ms) and ``alive`` (the pid probe) decide when another holder's lease
    is stale. Tests pass them to act as a runtime on another host or later in time.
    """

    def __init__(self, path: str | os.PathLike[str], *, profile: str,
                 pid: int | None = None, busy_timeout_ms: int = 5000,
                 host: str | None = None, holder_id: str | None = None,
                 lease_expiry_ms: int = DEFAULT_LEASE_EXPIRY_MS,
                 clock: Callable[[], int] | None = None,
                 alive: workspaces.PidAlive = workspaces.pid_alive) -> None:
        super().__init__()
        self.path = Path(path)
        self.home = self.path.parent
        self.profile = profile
        self.pid = os.getpid() if pid is None else pid
        self.holder = LeaseHolder(holder_id or os.urandom(16).hex(),
                                  socket.gethostname() if host is None else host, self.pid)
        self.lease_expiry_ms = lease_expiry_ms
        self._clock = clock or _now
        self._alive = alive
        try:
            _create_private(self.path)
            self._conn = sqlite3.connect(self.path, isolation_level=None,
                                         timeout=busy_timeout_ms / 1000)
        except (OSError, sqlite3.Error) as exc:
            # the home cannot hold the file (read-only, full, not ours): bad setup, exit 2
            raise PluginError(f"cannot open {self.path}: {exc}",
                              exit_code=EXIT_USAGE) from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            schema.migrate(self._conn, str(self.path))
        except sqlite3.Error as exc:
            self._conn.close()
            raise PluginError(f"cannot use {self.path}: {exc}", exit_code=EXIT_USAGE) from exc
        except BaseException:
            self._conn.close()
            raise

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection (for the workspace functions and tests)."""
        return self._conn

    def set_busy_timeout(self, busy_timeout_ms: int) -> None:
        """How long a write waits for another runtime's lock before failing."""
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")

    # -- the agent's store interface --------------------------------------------------------

    def save(self, record: SessionRecord) -> None:
        """Upsert the session row (held by this runtime) and write any missing events.

        Only while this holder leases the session: otherwise ``SessionHeldError`` (lost),
        and nothing is written.
        """
        state = json.dumps(records.state_of(record))
        now = _now()
        session_id = record.session_id
        with workspaces.transaction(self._conn):
            self._check_held(session_id)
            self._conn.execute(
                "INSERT INTO sessions (id, profile, cwd, status, title, created_at, "
                "updated_at, owner_pid, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET cwd = excluded.cwd, status = excluded.status, "
                "title = excluded.title, updated_at = excluded.updated_at, "
                "owner_pid = excluded.owner_pid, state = excluded.state",
                (session_id, self.profile, record.cwd, OPEN, record.title, now, now,
                 self.pid, state))
            for seq in self._pending(session_id, len(record.events)):
                self._write_missing(session_id, record.events[seq])
        self._saved(session_id, len(record.events))

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Write one event now, in its own transaction (autocommit: one INSERT).

        Fenced by the lease in the same statement: a session this holder does not lease
        is ``SessionHeldError`` (lost) and nothing is written. A seq already stored is
        :class:`DuplicateEventError`. A failed write (a full disk) is remembered, and the
        next ``save`` writes it: later appends succeeding must not hide it (a gap).
        """
        seq = int(event["seq"])
        try:
            cursor = self._conn.execute(
                "INSERT INTO events (session_id, seq, type, time, body) "
                "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM session_leases "
                "WHERE session_id = ? AND holder_id = ?)",
                (*self._row(session_id, event), session_id, self.holder.holder_id))
        except sqlite3.IntegrityError:
            raise DuplicateEventError(session_id, seq) from None
        except sqlite3.Error:
            self._unstored(session_id, seq)
            raise
        if cursor.rowcount != 1:
            raise self._lost(session_id)
        self._stored(session_id, seq)

    def load(self, session_id: str) -> SessionRecord | None:
        """Rebuild the record from the session row and its event log; None if unknown."""
        row = self._conn.execute("SELECT cwd, title, state FROM sessions WHERE id = ?",
                                 (session_id,)).fetchone()
        if row is None:
            return None
        cwd, title, state_text = row
        state = json.loads(state_text or "{}")
        log = records.decode([body for (body,) in self._conn.execute(
            "SELECT body FROM events WHERE session_id = ? ORDER BY seq", (session_id,))])
        self._next_seq[session_id] = len(log)
        return records.rebuild(session_id, cwd, title, log, state)

    def history_page(self, session_id: str, *, start_seq: int, limit: int,
                     max_bytes: int) -> HistoryPage | None:
        """Stored events of ``session_id`` from ``start_seq``: at most ``limit`` and
        ``max_bytes`` of their JSON, the first always; None when the session is unknown.

        One range scan on the log's key, stopping at the first row that does not fit, so
        a page costs what it returns whatever the log's length.
        """
        if self._conn.execute("SELECT 1 FROM sessions WHERE id = ?",
                              (session_id,)).fetchone() is None:
            return None
        rows = self._conn.execute(
            "SELECT seq, body FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq "
            "LIMIT ?", (session_id, start_seq, limit + 1))
        out: list[dict[str, Any]] = []
        size = 0
        for seq, body in rows:
            cost = len(body.encode("utf-8", "surrogatepass"))
            if len(out) == limit or (out and size + cost > max_bytes):
                return HistoryPage(out, int(seq))
            out.append(json.loads(body))
            size += cost
        return HistoryPage(out, None)

    # -- moving sessions between stores (dsh sessions export/import) -------------------------

    def info(self, session_id: str) -> SessionInfo | None:
        """The stored session row of ``session_id``, or None."""
        row = self._conn.execute("SELECT id, profile, cwd, title, status, created_at, "
                                 "updated_at, state FROM sessions WHERE id = ?",
                                 (session_id,)).fetchone()
        if row is None:
            return None
        return SessionInfo(*row[:7], json.loads(row[7] or "{}"))

    def put_info(self, info: SessionInfo) -> None:
        """Store a session row brought from another store (leased), not held live; a
        stored row changed later than ``info`` is kept."""
        with workspaces.transaction(self._conn):
            self._check_held(info.session_id)
            self._conn.execute(
                "INSERT INTO sessions (id, profile, cwd, status, title, created_at, "
                "updated_at, owner_pid, state) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?) "
                "ON CONFLICT (id) DO UPDATE SET profile = excluded.profile, cwd = excluded.cwd, "
                "status = excluded.status, title = excluded.title, "
                "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "owner_pid = NULL, state = excluded.state "
                "WHERE sessions.updated_at <= excluded.updated_at",
                (info.session_id, info.profile, info.cwd, info.status, info.title,
                 info.created_at, info.updated_at, json.dumps(info.state)))

    def append_many(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        """Write ``batch`` (leased) in one transaction: an event already stored as it is
        is skipped, another event at its seq is :class:`DuplicateEventError` and nothing
        of the batch is written."""
        with workspaces.transaction(self._conn):
            self._check_held(session_id)
            for event in batch:
                self._write_missing(session_id, event)
        for event in batch:
            self._stored(session_id, int(event["seq"]))

    def goals(self) -> SqliteGoals:
        """The goals of this store's sessions (the ``goals`` table, same connection)."""
        return SqliteGoals(self._conn)

    # -- leases ---------------------------------------------------------------------------

    def acquire(self, session_id: str) -> Lease | None:
        """Take or refresh this holder's lease on ``session_id``; returns the stale lease
        taken over, if any. Held by a live holder: :class:`SessionHeldError` naming it."""
        me = self.holder
        for _ in range(3):  # a lease released or re-taken between the steps: look again
            now = self._clock()
            cursor = self._conn.execute(
                "INSERT INTO session_leases (session_id, holder_id, host, pid, acquired_at, "
                "heartbeat_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
                "SET heartbeat_at = excluded.heartbeat_at "
                "WHERE session_leases.holder_id = excluded.holder_id",
                (session_id, me.holder_id, me.host, me.pid, now, now))
            if cursor.rowcount == 1:
                self._now_held(session_id)
                return None
            self._forget(session_id)  # whatever this store thought, the lease is not its own
            current = self.lease(session_id)
            if current is None:
                continue
            if not stale(current, host=me.host, now_ms=now, expiry_ms=self.lease_expiry_ms,
                         alive=self._alive):
                raise SessionHeldError(session_id, current.holder.public())
            cursor = self._conn.execute(
                "UPDATE session_leases SET holder_id = ?, host = ?, pid = ?, "
                "acquired_at = ?, heartbeat_at = ? WHERE session_id = ? AND holder_id = ? "
                "AND heartbeat_at = ?",
                (me.holder_id, me.host, me.pid, now, now, session_id,
                 current.holder.holder_id, current.heartbeat_at))
            if cursor.rowcount == 1:
                logger.info("session %s: took over the lease of pid %d on host %s (%s)",
                            session_id, current.holder.pid, current.holder.host,
                            "expired" if now - current.heartbeat_at > self.lease_expiry_ms
                            else "process gone")
                self._now_held(session_id)
                return current
        current = self.lease(session_id)
        raise SessionHeldError(session_id, None if current is None else current.holder.public())

    def release(self, session_id: str) -> None:
        """Drop this holder's lease on ``session_id`` (nothing when another holds it)."""
        self._conn.execute("DELETE FROM session_leases WHERE session_id = ? AND "
                           "holder_id = ?", (session_id, self.holder.holder_id))
        self._forget(session_id)

    def heartbeat(self) -> list[str]:
        """Refresh this holder's leases; returns (and forgets) the ones another took, after
        telling each lost-listener."""
        if not self._held:
            return []
        me = self.holder.holder_id
        self._conn.execute("UPDATE session_leases SET heartbeat_at = ? WHERE holder_id = ?",
                           (self._clock(), me))
        still = {row[0] for row in self._conn.execute(
            "SELECT session_id FROM session_leases WHERE holder_id = ?", (me,))}
        return self._tell_lost(self._held - still)

    def lease(self, session_id: str) -> Lease | None:
        """The stored lease on ``session_id``, or None when nobody holds it."""
        row = self._conn.execute(
            "SELECT holder_id, host, pid, acquired_at, heartbeat_at FROM session_leases "
            "WHERE session_id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        return Lease(session_id, LeaseHolder(row[0], row[1], int(row[2])), int(row[3]),
                     int(row[4]))

    # -- listing, closing, workspaces ---------------------------------------------------------

    def summaries(self) -> list[dict[str, Any]]:
        """``{sessionId, cwd, title, status, profile, createdAt, updatedAt}`` of every stored
        session, sorted by id."""
        rows = self._conn.execute("SELECT id, cwd, title, status, profile, created_at, "
                                  "updated_at FROM sessions ORDER BY id")
        return [{"sessionId": r[0], "cwd": r[1], "title": r[2], "status": r[3],
                 "profile": r[4], "createdAt": r[5], "updatedAt": r[6]} for r in rows]

    def status(self, session_id: str) -> str | None:
        """The stored status of ``session_id`` (open, closed, interrupted), or None."""
        row = self._conn.execute("SELECT status FROM sessions WHERE id = ?",
                                 (session_id,)).fetchone()
        return None if row is None else str(row[0])

    def reconcile(self, *, alive: workspaces.PidAlive = workspaces.pid_alive) -> list[str]:
        """At start: sessions held by dead runtimes become ``interrupted``, their workspace
        holds are dropped, and workspaces left at zero are cleaned (ids returned)."""
        with workspaces.transaction(self._conn):
            owners = [r[0] for r in self._conn.execute(
                "SELECT DISTINCT owner_pid FROM sessions WHERE owner_pid IS NOT NULL")]
            for pid in owners:
                if pid != self.pid and not alive(pid):
                    self._conn.execute("UPDATE sessions SET status = ?, owner_pid = NULL "
                                       "WHERE owner_pid = ?", (INTERRUPTED, pid))
        return workspaces.reconcile(self._conn, self.home,
                                    alive=lambda pid: pid == self.pid or alive(pid))

    def acquire_workspace(self, session_id: str, workspace_id: str | None = None) -> Path:
        """Hold a workspace for ``session_id`` (its own id unless shared); returns the path."""
        return workspaces.acquire(self._conn, self.home, workspace_id or session_id,
                                  session_id, pid=self.pid)

    def release_workspace(self, session_id: str, workspace_id: str | None = None, *,
                          force: bool = False) -> bool:
        """Drop ``session_id``'s hold; True when the workspace was cleaned (count zero)."""
        return workspaces.release(self._conn, self.home, workspace_id or session_id,
                                  session_id, force=force)

    def close(self) -> None:
        """Mark this runtime's sessions closed, release its leases and workspace holds,
        close the file.

        Idempotent. Workspaces this runtime's sessions held are released one by one, so
        ones still shared with another live runtime survive.
        """
        conn = self._conn
        if conn is None:
            return
        try:
            conn.execute("DELETE FROM session_leases WHERE holder_id = ?",
                         (self.holder.holder_id,))
            self._held.clear()
            held = conn.execute("SELECT workspace_id, session_id FROM workspace_refs "
                                "WHERE pid = ?", (self.pid,)).fetchall()
            for workspace_id, session_id in held:
                workspaces.release(conn, self.home, workspace_id, session_id)
            conn.execute("UPDATE sessions SET status = ?, owner_pid = NULL, updated_at = ? "
                         "WHERE owner_pid = ?", (CLOSED, _now(), self.pid))
        except sqlite3.Error:
            logger.exception("closing %s", self.path)
        finally:
            conn.close()
            self._conn = None  # type: ignore[assignment]

    # -- internals ------------------------------------------------------------------------

    def _check_held(self, session_id: str) -> None:
        """Inside a write transaction: this holder leases ``session_id``, or it is lost."""
        row = self._conn.execute("SELECT holder_id FROM session_leases WHERE session_id = ?",
                                 (session_id,)).fetchone()
        if row is None or row[0] != self.holder.holder_id:
            raise self._lost(session_id)

    def _lost(self, session_id: str) -> SessionHeldError:
        """The error for a write to a session this holder does not lease (now forgotten)."""
        was_held = session_id in self._held
        self._forget(session_id)
        current = self.lease(session_id)
        holder = None if current is None else current.holder.public()
        return SessionHeldError(session_id, holder, lost=was_held)

    def _write_missing(self, session_id: str, event: dict[str, Any]) -> None:
        """Inside ``save``'s transaction: store ``event`` unless that very event is stored
        already (an append whose failure came after its commit); another event at its
        seq is :class:`DuplicateEventError`."""
        row = self._row(session_id, event)
        cursor = self._conn.execute(
            "INSERT INTO events (session_id, seq, type, time, body) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (session_id, seq) DO NOTHING", row)
        if cursor.rowcount == 1:
            return
        stored = self._conn.execute("SELECT body FROM events WHERE session_id = ? AND "
                                    "seq = ?", (session_id, row[1])).fetchone()
        if stored is None or stored[0] != row[4]:
            raise DuplicateEventError(session_id, row[1])

    def _stored_top(self, session_id: str) -> int | None:
        top = self._conn.execute("SELECT max(seq) FROM events WHERE session_id = ?",
                                 (session_id,)).fetchone()[0]
        return None if top is None else int(top)

    @staticmethod
    def _row(session_id: str, event: dict[str, Any]) -> tuple[Any, ...]:
        return (session_id, int(event["seq"]), str(event["type"]), int(event.get("time", 0)),
                records.encode(event))

