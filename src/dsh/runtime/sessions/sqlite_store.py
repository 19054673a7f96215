"""The session store behind the ``sessions`` service: ``$DSH_HOME/sessions.db``.

It implements the agent's :class:`~dsh.runtime.agent.store.SessionStore` (the contract,
leases included, is written there) and, beyond ``save``/``load``, ``append``: the agent
calls it for every event *before* a client sees the event, each append its own
transaction, so a crash loses at most the event being written and every event a client
received is on disk. ``save`` refreshes the session row and writes any event an append
missed (an append that failed, say on a full disk, is retried there), so the log never
has gaps once a save succeeds.

Leases live in ``session_leases``; the algorithm over them (a conditional UPSERT, a
compare-and-set to take over a stale lease, the heartbeat, watched sessions) is
:class:`~dsh.runtime.sessions.tracking.Tracking`'s, shared with the PostgreSQL store:
this module only writes its SQL port. Appends are fenced by the lease in the same
statement (``INSERT ... SELECT ... WHERE EXISTS`` the lease), and the log's key
``(session_id, seq)`` refuses a second event with a seq: nothing is overwritten or
silently dropped. An event that changes the session's summary (:mod:`.summaries`) is
appended in one transaction with the ``UPDATE`` of its row; the others (a model's
streamed deltas, most of a log) stay one ``INSERT``.

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

from dsh.core.errors import EXIT_USAGE, DuplicateEventError, PluginError
from dsh.runtime.agent import events, summary
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.agent.store import HistoryPage, Lease, LeaseHolder, Version
from dsh.runtime.sessions import records, schema, summaries, workspaces
from dsh.runtime.sessions.goals import SqliteGoals
from dsh.runtime.sessions.tracking import DEFAULT_LEASE_EXPIRY_MS, Tracking
from dsh.runtime.sessions.transfer import SessionInfo

logger = logging.getLogger("dsh.sessions")

OPEN, CLOSED, INTERRUPTED = "open", "closed", "interrupted"
"""``sessions.status``: held by a live runtime, closed by it, or left by one that died."""

_UPDATE_SUMMARY = summaries.update_sql("sessions", greatest="max", mark="?")
_LEASE = "SELECT holder_id, host, pid, acquired_at, heartbeat_at, session_id FROM session_leases"
_LAST_TURN_MARK = (f"SELECT seq, type FROM events WHERE session_id = ? AND type IN "
                   f"('{events.TURN_START}', '{events.TURN_END}') ORDER BY seq DESC LIMIT 1")
"""The last ``turn/start`` or ``turn/end`` of a log (read back from its end on the key)."""
_MANY = 500
"""Session ids per ``IN (...)`` list: well under SQLite's bound parameters."""


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
        self.pid = os.getpid() if pid is None else pid
        super().__init__(LeaseHolder(holder_id or os.urandom(16).hex(),
                                     socket.gethostname() if host is None else host, self.pid),
                         lease_expiry_ms=lease_expiry_ms, clock=clock or _now, alive=alive)
        self.path = Path(path)
        self.home = self.path.parent
        self.profile = profile
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
            # checked (and migrated) first: a file refused is left as it was, its
            # journal mode included
            schema.migrate(self._conn, str(self.path))
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
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
                "updated_at, owner_pid, state, workspace, revision) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) "
                "ON CONFLICT (id) DO UPDATE SET cwd = excluded.cwd, status = excluded.status, "
                "title = excluded.title, updated_at = excluded.updated_at, "
                "owner_pid = excluded.owner_pid, state = excluded.state, "
                "revision = sessions.revision + 1",
                (session_id, self.profile, record.cwd, OPEN, record.title, now, now,
                 self.pid, state, record.root))
            self._write_all(session_id, [record.events[seq] for seq in self._pending(
                session_id, len(record.events))])
        self._saved(session_id, len(record.events))

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Write one event now, in its own transaction (autocommit: one INSERT).

        Fenced by the lease in the same statement: a session this holder does not lease
        is ``SessionHeldError`` (lost) and nothing is written. A seq already stored is
        :class:`DuplicateEventError`. A failed write (a full disk) is remembered, and the
        next ``save`` writes it: later appends succeeding must not hide it (a gap).
        """
        seq = int(event["seq"])
        change = summary.delta(event)
        try:
            if change is None:
                count = self._fenced_insert(session_id, event)
            else:
                with workspaces.transaction(self._conn):
                    count = self._fenced_insert(session_id, event)
                    if count == 1:
                        self._conn.execute(_UPDATE_SUMMARY,
                                           summaries.update_params(session_id, change))
        except sqlite3.IntegrityError:
            raise DuplicateEventError(session_id, seq) from None
        except sqlite3.Error:
            self._unstored(session_id, seq)
            raise
        if count != 1:
            raise self._lost(session_id)
        self._stored(session_id, seq)

    def _fenced_insert(self, session_id: str, event: dict[str, Any]) -> int:
        """Store ``event`` if this holder leases the session (one statement); 1 if it did."""
        return self._conn.execute(
            "INSERT INTO events (session_id, seq, type, time, body) "
            "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM session_leases "
            "WHERE session_id = ? AND holder_id = ?)",
            (*self._row(session_id, event), session_id, self.holder.holder_id)).rowcount

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
        return SessionInfo._make((*row[:7], json.loads(row[7] or "{}")))

    def put_info(self, info: SessionInfo) -> None:
        """Store a session row brought from another store (leased), not held live; a
        stored row changed later than ``info`` is kept."""
        with workspaces.transaction(self._conn):
            self._check_held(info.session_id)
            state = json.dumps(info.state)
            self._conn.execute(
                "INSERT INTO sessions (id, profile, cwd, status, title, created_at, "
                "updated_at, owner_pid, state, workspace, revision) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, 1) "
                "ON CONFLICT (id) DO UPDATE SET profile = excluded.profile, cwd = excluded.cwd, "
                "status = excluded.status, title = excluded.title, "
                "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "owner_pid = NULL, state = excluded.state, workspace = excluded.workspace, "
                "revision = sessions.revision + 1 "
                "WHERE sessions.updated_at <= excluded.updated_at",
                (info.session_id, info.profile, info.cwd, info.status, info.title,
                 info.created_at, info.updated_at, state,
                 summaries.workspace_of(info.cwd, state)))

    def append_many(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        """Write ``batch`` (leased) in one transaction: an event already stored as it is
        is skipped, another event at its seq is :class:`DuplicateEventError` and nothing
        of the batch is written."""
        with workspaces.transaction(self._conn):
            self._check_held(session_id)
            self._write_all(session_id, batch)
        for event in batch:
            self._stored(session_id, int(event["seq"]))

    def delete(self, session_id: str) -> bool:
        """Remove a session (its row, log, goals and lease; its workspace once no other
        session holds it) under its lease, taken first: a session a live runtime holds is
        :class:`~dsh.core.errors.SessionHeldError` and nothing is removed. False when
        there was no such session (its lease is given back either way)."""
        self.acquire(session_id)
        try:
            with workspaces.transaction(self._conn):
                self._check_held(session_id)
                found = self._conn.execute("DELETE FROM sessions WHERE id = ?",
                                           (session_id,)).rowcount == 1
                self._conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
                self._conn.execute("DELETE FROM goals WHERE session_id = ?", (session_id,))
        finally:
            self.release(session_id)
        self.release_workspaces_of(session_id)
        return found

    def release_workspaces_of(self, session_id: str) -> None:
        """Drop every workspace hold of ``session_id`` (a removed session's); a workspace
        left at zero is cleaned."""
        held = self._conn.execute("SELECT workspace_id FROM workspace_refs WHERE "
                                  "session_id = ?", (session_id,)).fetchall()
        for (workspace_id,) in held:
            workspaces.release(self._conn, self.home, workspace_id, session_id)

    def goals(self) -> SqliteGoals:
        """The goals of this store's sessions (the ``goals`` table, same connection)."""
        return SqliteGoals(self._conn)

    # -- the lease port (tracking.Tracking runs the algorithm) ---------------------------

    def _take(self, session_id: str, now: int) -> bool:
        me = self.holder
        return self._conn.execute(
            "INSERT INTO session_leases (session_id, holder_id, host, pid, acquired_at, "
            "heartbeat_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
            "SET heartbeat_at = excluded.heartbeat_at "
            "WHERE session_leases.holder_id = excluded.holder_id",
            (session_id, me.holder_id, me.host, me.pid, now, now)).rowcount == 1

    def _take_over(self, seen: Lease, now: int) -> bool:
        me = self.holder
        return self._conn.execute(
            "UPDATE session_leases SET holder_id = ?, host = ?, pid = ?, acquired_at = ?, "
            "heartbeat_at = ? WHERE session_id = ? AND holder_id = ? AND heartbeat_at = ?",
            (me.holder_id, me.host, me.pid, now, now, seen.session_id,
             seen.holder.holder_id, seen.heartbeat_at)).rowcount == 1

    def _read_lease(self, session_id: str) -> Lease | None:
        row = self._conn.execute(f"{_LEASE} WHERE session_id = ?", (session_id,)).fetchone()
        return None if row is None else _lease(row)

    def _drop(self, session_id: str) -> None:
        self._conn.execute("DELETE FROM session_leases WHERE session_id = ? AND "
                           "holder_id = ?", (session_id, self.holder.holder_id))

    def _beat(self, now: int) -> set[str]:
        me = self.holder.holder_id
        self._conn.execute("UPDATE session_leases SET heartbeat_at = ? WHERE holder_id = ?",
                           (now, me))
        return {row[0] for row in self._conn.execute(
            "SELECT session_id FROM session_leases WHERE holder_id = ?", (me,))}

    def _leases(self, session_ids: list[str]) -> dict[str, Lease]:
        found: dict[str, Lease] = {}
        if len(session_ids) > _MANY:  # a listing's: the lease table (held ones only) is small
            wanted = set(session_ids)
            return {row[5]: _lease(row) for row in self._conn.execute(_LEASE)
                    if row[5] in wanted}
        for chunk in _chunks(session_ids):
            marks = ", ".join("?" * len(chunk))
            for row in self._conn.execute(f"{_LEASE} WHERE session_id IN ({marks})", chunk):
                found[row[5]] = _lease(row)
        return found

    def _versions(self, session_ids: list[str]) -> dict[str, Version]:
        found: dict[str, Version] = {}
        for chunk in _chunks(session_ids):
            marks = ", ".join("?" * len(chunk))
            for session_id, revision, top in self._conn.execute(
                    "SELECT id, revision, (SELECT max(seq) FROM events WHERE session_id = "
                    f"sessions.id) FROM sessions WHERE id IN ({marks})", chunk):
                found[session_id] = (int(revision), 0 if top is None else int(top) + 1)
        return found

    # -- listing, closing, workspaces ---------------------------------------------------------

    def summaries(self, *, workspace: str | None = None, newest_first: bool = False,
                  limit: int | None = None) -> list[dict[str, Any]]:
        """The listing entries of the stored sessions (the summary columns: no log is
        read), sorted by id or newest updated first, of one workspace root or all, at most
        ``limit``; each entry also has the stored ``status`` and ``profile``."""
        sql = f"SELECT {summaries.LISTED} FROM sessions"
        args: list[Any] = []
        if workspace is not None:
            sql += " WHERE workspace = ?"
            args.append(workspace)
        # (updated_at, id) is the updated index's own order: no sort step
        sql += " ORDER BY updated_at DESC, id DESC" if newest_first else " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [summaries.entry_of(row) for row in self._conn.execute(sql, args)]

    def summary(self, session_id: str) -> dict[str, Any] | None:
        """The listing entry of one stored session, or None."""
        row = self._conn.execute(f"SELECT {summaries.LISTED} FROM sessions WHERE id = ?",
                                 (session_id,)).fetchone()
        return None if row is None else summaries.entry_of(row)

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
            self._watched.clear()
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

    def _write_all(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        """Inside a write transaction: store each event of ``batch`` unless that very event
        is stored already (an append whose failure came after its commit; another event
        at its seq is :class:`DuplicateEventError`), and the summary change of those
        written, in one ``UPDATE``."""
        written = []
        for event in batch:
            row = self._row(session_id, event)
            cursor = self._conn.execute(
                "INSERT INTO events (session_id, seq, type, time, body) VALUES "
                "(?, ?, ?, ?, ?) ON CONFLICT (session_id, seq) DO NOTHING", row)
            if cursor.rowcount == 1:
                written.append(event)
                continue
            stored = self._conn.execute("SELECT body FROM events WHERE session_id = ? AND "
                                        "seq = ?", (session_id, row[1])).fetchone()
            if stored is None or stored[0] != row[4]:
                raise DuplicateEventError(session_id, row[1])
        change = summary.combine(written)
        if change is not None:
            self._conn.execute(_UPDATE_SUMMARY, summaries.update_params(session_id, change))

    def _stored_top(self, session_id: str) -> int | None:
        top = self._conn.execute("SELECT max(seq) FROM events WHERE session_id = ?",
                                 (session_id,)).fetchone()[0]
        return None if top is None else int(top)

    def _turn_tail(self, session_id: str) -> list[dict[str, Any]] | None:
        mark = self._conn.execute(_LAST_TURN_MARK, (session_id,)).fetchone()
        if mark is None or mark[1] != events.TURN_START:
            return None
        return records.decode([body for (body,) in self._conn.execute(
            "SELECT body FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
            (session_id, mark[0]))])

    @staticmethod
    def _row(session_id: str, event: dict[str, Any]) -> tuple[Any, ...]:
        return (session_id, int(event["seq"]), str(event["type"]), int(event.get("time", 0)),
                records.encode(event))



def _lease(row: tuple[Any, ...]) -> Lease:
    return Lease(row[5], LeaseHolder(row[0], row[1], int(row[2])), int(row[3]), int(row[4]))


def _chunks(ids: list[str]) -> list[list[str]]:
    return [ids[i:i + _MANY] for i in range(0, len(ids), _MANY)]
