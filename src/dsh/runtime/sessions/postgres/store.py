"""The ``sessions`` service on PostgreSQL: one database shared by runtimes on many hosts.

It implements the agent's :class:`~dsh.runtime.agent.store.SessionStore` contract exactly
as the SQLite store does (the rules are written in :mod:`dsh.runtime.agent.store`); what
differs is how each rule holds across hosts:

* **Leases** live in ``session_leases``; the algorithm is
  :class:`~dsh.runtime.sessions.tracking.Tracking`'s, this module its SQL port: a
  conditional UPSERT takes a free lease, a compare-and-set ``UPDATE`` a stale one. Under
  READ COMMITTED a second ``UPDATE`` of the row waits for the first to commit and then
  re-checks its ``WHERE`` against the new row, so of racing hosts one wins.
* **Appends are fenced** in the same statement: ``INSERT ... SELECT ... WHERE EXISTS``
  this holder's lease row, read ``FOR SHARE``. The share lock makes a takeover's
  ``UPDATE`` wait for an append in flight, and an append after a takeover re-reads the
  lease and stores nothing, so the new holder's log read always has every event the old
  holder stored. Each append is its own transaction (one event, the batch a client is
  sent); ``save``, an import and a spool replay write their batch in one transaction.
  The key ``(session_id, seq)`` refuses a second event at a seq
  (:class:`~dsh.core.errors.DuplicateEventError`). An event that changes the session's
  summary is stored with the ``UPDATE`` of its row in one statement (a data-modifying
  ``WITH``), so it is still one round trip.
* **The database going away** (:mod:`.link`): an event that cannot be stored is written
  to the home's spool (:mod:`.spool`) before it is sent, and the append raises
  :class:`~dsh.core.errors.StoreUnavailableError` (``spooled``), on which the agent ends the
  running turn with an error. Once the plugin has a connection again, :meth:`recover`
  writes the spool under this runtime's leases.
* **Workspaces** are paths on one host, so their reference counts stay in the home's
  ``sessions.db`` (:class:`~dsh.runtime.sessions.sqlite_store.SqliteSessionStore`, whose
  other tables stay empty here).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from dsh.core.errors import DuplicateEventError, SessionHeldError, StoreUnavailableError
from dsh.runtime.agent import summary
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.agent.store import HistoryPage, Lease, LeaseHolder, Version, stale
from dsh.runtime.sessions import records, summaries, workspaces
from dsh.runtime.sessions.postgres import schema
from dsh.runtime.sessions.postgres.link import Link
from dsh.runtime.sessions.postgres.spool import Entry, Spool, by_session, read, rewrite
from dsh.runtime.sessions.postgres.statements import statements
from dsh.runtime.sessions.sqlite_store import CLOSED, INTERRUPTED, OPEN, SqliteSessionStore
from dsh.runtime.sessions.tracking import DEFAULT_LEASE_EXPIRY_MS, Tracking
from dsh.runtime.sessions.transfer import SessionInfo

logger = logging.getLogger("dsh.sessions")


def _now() -> int:
    return int(time.time() * 1000)


class PostgresSessionStore(Tracking):
    """Sessions, logs, leases and goals in PostgreSQL schema ``schema_name`` over ``link``
    (connected; the store closes it); workspace counts and the spool in ``home``.

    ``pid``, ``host``, ``holder_id``, ``lease_expiry_ms``, ``clock`` and ``alive`` are the
    SQLite store's: tests pass them to act as a runtime on another host or later in time.
    Without ``clock``, lease times are the database server's (``host_clock``, this host's
    clock, plus an offset measured at each connect), so hosts whose clocks disagree judge
    leases alike.
    """

    def __init__(self, link: Link, *, schema_name: str, home: str | os.PathLike[str],
                 profile: str, pid: int | None = None, host: str | None = None,
                 holder_id: str | None = None,
                 lease_expiry_ms: int = DEFAULT_LEASE_EXPIRY_MS,
                 clock: Callable[[], int] | None = None,
                 alive: workspaces.PidAlive = workspaces.pid_alive,
                 host_clock: Callable[[], int] = _now) -> None:
        self.pid = os.getpid() if pid is None else pid
        self._host_clock = host_clock
        self._offset_ms = 0
        super().__init__(LeaseHolder(holder_id or os.urandom(16).hex(),
                                     socket.gethostname() if host is None else host, self.pid),
                         lease_expiry_ms=lease_expiry_ms, clock=clock or self._server_clock,
                         alive=alive)
        self._link = link
        self.schema_name = schema_name
        self.home = Path(home)
        self.profile = profile
        self.spool = Spool(self.home / "spool", pid=self.pid, holder_id=self.holder.holder_id)
        try:  # the store owns the link from here: a failed open closes it
            self._sql = statements(schema.quoted(schema_name))
            self.migrated_from = self._run(lambda c: schema.migrate(c, self.schema_name,
                                                                    link.where))
            self._measure_offset()
            self._local = SqliteSessionStore(self.home / "sessions.db", profile=profile,
                                             pid=self.pid, host=self.holder.host)
        except BaseException:
            link.close()
            raise

    @property
    def link(self) -> Link:
        """The connection (its state: ``link.up``)."""
        return self._link

    # -- the agent's store interface --------------------------------------------------------

    def save(self, record: SessionRecord) -> None:
        """Upsert the session row (held by this runtime) and write any missing events, in
        one transaction fenced by the lease. The database away: both go to the spool and
        StoreUnavailableError (spooled) is raised."""
        session_id = record.session_id
        state = records.state_of(record)
        try:
            pending = self._pending(session_id, len(record.events))
            self._run(lambda c: self._save_tx(c, record, state, pending))
        except StoreUnavailableError:
            self._spool_save(record, state)
            raise self._link.unavailable(spooled=True) from None
        self._saved(session_id, len(record.events))

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Write one event now, fenced by this holder's lease in the same statement; the
        database away, it is spooled first (StoreUnavailableError, spooled)."""
        seq = int(event["seq"])
        row = self._row(session_id, event)
        fence = (*row, session_id, self.holder.holder_id)
        change = summary.delta(event)
        try:
            if change is None:
                count = self._link.run(lambda c: c.execute(self._sql["append"], fence).rowcount)
            else:
                params = (*fence, *summaries.update_params(session_id, change))
                count = self._link.run(lambda c: c.execute(
                    self._sql["append_summary"], params).fetchone()[0])
        except StoreUnavailableError:
            self._spool_event(session_id, event)
            raise self._link.unavailable(spooled=True) from None
        except psycopg.errors.UniqueViolation:
            raise DuplicateEventError(session_id, seq) from None
        except psycopg.Error as exc:
            self._unstored(session_id, seq)
            raise self._link.error(exc) from None
        if count != 1:
            raise self._lost(session_id)
        self._stored(session_id, seq)

    def load(self, session_id: str) -> SessionRecord | None:
        """Rebuild the record from the session row and its event log; None if unknown."""
        def read_all(c: Any) -> tuple[Any, list[str]] | None:
            row = c.execute(self._sql["row"], (session_id,)).fetchone()
            if row is None:
                return None
            return row, [b for (b,) in c.execute(self._sql["log"], (session_id,))]

        found = self._run(read_all)
        if found is None:
            return None
        (cwd, title, state_text), bodies = found
        state = json.loads(state_text or "{}")
        log = records.decode(bodies)
        self._next_seq[session_id] = len(log)
        return records.rebuild(session_id, cwd, title, log, state)

    def history_page(self, session_id: str, *, start_seq: int, limit: int,
                     max_bytes: int) -> HistoryPage | None:
        """Stored events from ``start_seq`` (see the SQLite store: same bounds, one range
        scan on the key); None when the session is unknown."""
        def page(c: Any) -> HistoryPage | None:
            if c.execute(self._sql["exists"], (session_id,)).fetchone() is None:
                return None
            rows = c.execute(self._sql["page"], (session_id, start_seq, limit + 1))
            out: list[dict[str, Any]] = []
            size = 0
            for seq, body in rows:
                cost = len(body.encode("utf-8", "surrogatepass"))
                if len(out) == limit or (out and size + cost > max_bytes):
                    return HistoryPage(out, int(seq))
                out.append(json.loads(body))
                size += cost
            return HistoryPage(out, None)

        return self._run(page)

    def summaries(self, *, workspace: str | None = None, newest_first: bool = False,
                  limit: int | None = None) -> list[dict[str, Any]]:
        """The listing entries of the stored sessions from their summary columns (see the
        SQLite store: same order, filter and bound)."""
        order = "newest" if newest_first else "by_id"
        args: tuple[str | int | None, ...]
        if workspace is None:
            sql, args = self._sql[f"list_{order}"], (limit,)
        else:
            sql, args = self._sql[f"list_workspace_{order}"], (workspace, limit)
        rows = self._run(lambda c: c.execute(sql, args).fetchall())
        return [summaries.entry_of(row) for row in rows]

    def summary(self, session_id: str) -> dict[str, Any] | None:
        """The listing entry of one stored session, or None."""
        row = self._run(lambda c: c.execute(self._sql["summary"], (session_id,)).fetchone())
        return None if row is None else summaries.entry_of(row)

    def status(self, session_id: str) -> str | None:
        """The stored status of ``session_id`` (open, closed, interrupted), or None."""
        row = self._run(lambda c: c.execute(self._sql["status"], (session_id,)).fetchone())
        return None if row is None else str(row[0])

    # -- the lease port (tracking.Tracking runs the algorithm) ---------------------------

    def _take(self, session_id: str, now: int) -> bool:
        me = self.holder
        return self._run(lambda c: c.execute(self._sql["take"], (
            session_id, me.holder_id, me.host, me.pid, now, now)).rowcount) == 1

    def _take_over(self, seen: Lease, now: int) -> bool:
        me = self.holder
        return self._run(lambda c: c.execute(self._sql["takeover"], (
            me.holder_id, me.host, me.pid, now, now, seen.session_id,
            seen.holder.holder_id, seen.heartbeat_at)).rowcount) == 1

    def _read_lease(self, session_id: str) -> Lease | None:
        row = self._run(lambda c: c.execute(self._sql["lease"], (session_id,)).fetchone())
        return None if row is None else _lease(row)

    def _drop(self, session_id: str) -> None:
        self._run(lambda c: c.execute(self._sql["release"],
                                      (session_id, self.holder.holder_id)))

    def _beat(self, now: int) -> set[str]:
        rows = self._run(lambda c: c.execute(self._sql["heartbeat"], (
            now, self.holder.holder_id)).fetchall())
        return {r[0] for r in rows}

    def _leases(self, session_ids: list[str]) -> dict[str, Lease]:
        rows = self._run(lambda c: c.execute(self._sql["leases"], (session_ids,)).fetchall())
        return {row[5]: _lease(row) for row in rows}

    def _versions(self, session_ids: list[str]) -> dict[str, Version]:
        rows = self._run(lambda c: c.execute(self._sql["versions"], (session_ids,)).fetchall())
        return {sid: (int(rev), 0 if top is None else int(top) + 1) for sid, rev, top in rows}

    def release(self, session_id: str) -> None:
        """Drop this holder's lease on ``session_id`` (nothing when another holds it).
        With the database away the lease is only forgotten here: it expires there (and a
        runtime on this host takes it over at once, this process being gone)."""
        self._forget(session_id)
        if self._link.up:
            self._drop(session_id)

    def heartbeat(self) -> list[str]:
        """Refresh this holder's leases and check the watched sessions
        (:meth:`Tracking.heartbeat`); first, retry spool files claimed from dead runtimes
        that could not be written yet."""
        if self.spool.claimed():
            self._replay_claimed()
        return super().heartbeat()

    # -- the database coming back -----------------------------------------------------------

    def recover(self, conn: Any) -> None:
        """Use the new connection ``conn``: write this runtime's spool under its leases,
        then what it claimed from dead runtimes of this home. Sessions whose lease was
        taken over meanwhile are let go (each ``on_lost`` listener is told) and their
        spooled events set aside in ``spool/conflicts/``."""
        self._link.adopt(conn)
        self._measure_offset()
        entries = self.spool.entries()
        if entries:
            left: list[Entry] = []
            for session_id, group in by_session(entries).items():
                if left:  # the link went down again: keep the rest, in order
                    left += group
                    continue
                left += self._replay(session_id, group, own=True)
            self.spool.keep(left)
            if not left:
                logger.info("wrote the spooled events to PostgreSQL at %s", self._link.where)
        self._replay_claimed()

    def claim_orphans(self) -> int:
        """At start: take over the spool files of dead runtimes of this home and write
        them; returns how many files were claimed."""
        claimed = self.spool.claim_orphans(self._alive)
        if claimed:
            self._replay_claimed()
        return len(claimed)

    def _replay_claimed(self) -> None:
        for path in self.spool.claimed():
            left: list[Entry] = []
            for session_id, group in by_session(read(path)).items():
                if left and not self._link.up:
                    left += group
                    continue
                left += self._replay(session_id, group, own=False)
            rewrite(path, left)

    def _replay(self, session_id: str, group: list[Entry], *, own: bool) -> list[Entry]:
        """Write one session's spooled entries; returns those still waiting (the link went
        down again, or another live runtime holds the session)."""
        took = False
        try:
            if not own:
                self.acquire(session_id)
                took = True
            self._run(lambda c: self._replay_tx(c, session_id, group, own=own))
        except StoreUnavailableError:
            return group
        except SessionHeldError as exc:
            if not own and not exc.lost:
                return group  # a live runtime runs it now: try again later
            self.spool.set_aside(session_id, group, "its lease was taken over meanwhile")
            if own:
                self._tell_lost([session_id])
            return []
        except DuplicateEventError as exc:
            self.spool.set_aside(session_id, group, f"seq {exc.seq} holds another event")
            if own:
                self._tell_lost([session_id])
            return []
        finally:
            if took:
                with contextlib.suppress(StoreUnavailableError):
                    self.release(session_id)
        if not own:
            logger.info("session %s: wrote %d spooled entries of a runtime that died",
                        session_id, len(group))
        return []

    def _replay_tx(self, c: Any, session_id: str, group: list[Entry], *, own: bool) -> None:
        with c.transaction():
            self._check_held(c, session_id)
            batch = [e["event"] for e in group if isinstance(e.get("event"), dict)]
            written = [int(event["seq"]) for event in batch]
            rows = [e["row"] for e in group if isinstance(e.get("row"), dict)]
            if rows:
                row = rows[-1]
                state = row.get("state") or {}
                c.execute(self._sql["upsert"], (
                    session_id, self.profile, row["cwd"], OPEN if own else INTERRUPTED,
                    row.get("title", ""), _now(), _now(),
                    self.holder.holder_id if own else None,
                    self.holder.host if own else None, self.pid if own else None,
                    json.dumps(state), state.get("root") or row["cwd"]))
            self._write_all(c, session_id, batch)
        for seq in written:
            self._stored(session_id, seq)

    def _spool_event(self, session_id: str, event: dict[str, Any]) -> None:
        """Keep ``event`` in the spool (the database is away); a session this runtime no
        longer holds is refused as a write would be."""
        if session_id not in self._held:
            raise self._lost_unreadable(session_id)
        self.spool.add({"session": session_id, "event": event})
        # What is stored is unknown until the spool is written: the next save asks.
        with contextlib.suppress(StoreUnavailableError):
            self._stored(session_id, int(event["seq"]))

    def _spool_save(self, record: SessionRecord, state: dict[str, Any]) -> None:
        """Keep what ``save`` would have written: the events it would write (all of them
        when what is stored is unknown; a replay skips the stored ones) and the row."""
        session_id = record.session_id
        if session_id not in self._held:
            raise self._lost_unreadable(session_id)
        try:
            pending = self._pending(session_id, len(record.events))
        except StoreUnavailableError:
            pending = list(range(len(record.events)))
        for seq in pending:
            self.spool.add({"session": session_id, "event": record.events[seq]})
        self.spool.add({"session": session_id, "row": {
            "cwd": record.cwd, "title": record.title, "state": state}})
        self._saved(session_id, len(record.events))

    # -- listing, closing, workspaces, goals, transfer ---------------------------------------

    def reconcile(self, *, alive: workspaces.PidAlive | None = None) -> list[str]:
        """At start: this host's workspace counts are reconciled (dead holders dropped),
        and open sessions whose runtime is gone (no lease of theirs left, or a stale one)
        become ``interrupted``."""
        judge = alive or self._alive
        now = self._clock()
        rows = self._run(lambda c: c.execute(self._sql["open_sessions"]).fetchall())
        gone = []
        for session_id, _owner, holder_id, host, pid, acquired, beat in rows:
            if holder_id is not None and not stale(
                    Lease(session_id, LeaseHolder(holder_id, host, int(pid)), int(acquired),
                          int(beat)),
                    host=self.holder.host, now_ms=now, expiry_ms=self.lease_expiry_ms,
                    alive=judge):
                continue
            gone.append(session_id)
        if gone:
            self._run(lambda c: c.execute(self._sql["interrupt"], (INTERRUPTED, gone)))
        return self._local.reconcile(alive=judge)

    def acquire_workspace(self, session_id: str, workspace_id: str | None = None) -> Path:
        """Hold a workspace of this host for ``session_id`` (counted in ``sessions.db``)."""
        return self._local.acquire_workspace(session_id, workspace_id)

    def release_workspace(self, session_id: str, workspace_id: str | None = None, *,
                          force: bool = False) -> bool:
        """Drop ``session_id``'s hold on a workspace of this host."""
        return self._local.release_workspace(session_id, workspace_id, force=force)

    def goals(self) -> Any:
        """The goals of this store's sessions (table ``goals``, this connection)."""
        from dsh.runtime.sessions.postgres.goals import PostgresGoals

        return PostgresGoals(self._run, schema.quoted(self.schema_name))

    def info(self, session_id: str) -> SessionInfo | None:
        """The stored session row of ``session_id``, or None."""
        row = self._run(lambda c: c.execute(self._sql["info"], (session_id,)).fetchone())
        if row is None:
            return None
        return SessionInfo(row[0], row[1], row[2], row[3], row[4], int(row[5]), int(row[6]),
                           json.loads(row[7] or "{}"))

    def put_info(self, info: SessionInfo) -> None:
        """Store a session row brought from another store (leased), not held live; a
        stored row changed later than ``info`` is kept."""
        def put(c: Any) -> None:
            with c.transaction():
                self._check_held(c, info.session_id)
                state = json.dumps(info.state)
                c.execute(self._sql["put_info"], (
                    info.session_id, info.profile, info.cwd, info.status, info.title,
                    info.created_at, info.updated_at, state,
                    summaries.workspace_of(info.cwd, state)))

        self._run(put)

    def append_many(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        """Write ``batch`` (leased) in one transaction: an event already stored as it is
        is skipped, another event at its seq is DuplicateEventError and nothing of the
        batch is written."""
        def write(c: Any) -> None:
            with c.transaction():
                self._check_held(c, session_id)
                self._write_all(c, session_id, batch)

        self._run(write)
        for event in batch:
            self._stored(session_id, int(event["seq"]))

    def delete(self, session_id: str) -> bool:
        """Remove a session (row, log, goals, lease; this host's workspace holds) under its
        lease, taken first: one a live runtime holds is SessionHeldError and nothing is
        removed. False when there was no such session."""
        self.acquire(session_id)

        def remove(c: Any) -> bool:
            with c.transaction():
                self._check_held(c, session_id)
                found = c.execute(self._sql["delete_session"], (session_id,)).rowcount == 1
                c.execute(self._sql["delete_events"], (session_id,))
                c.execute(self._sql["delete_goals"], (session_id,))
            return found

        try:
            found = self._run(remove)
        finally:
            self.release(session_id)
        self._local.release_workspaces_of(session_id)
        return found

    def close(self) -> None:
        """Mark this runtime's sessions closed, release its leases and this host's
        workspace holds, close the connection. Idempotent; the database away, the leases
        expire and the spool waits for the next runtime on this home."""
        if self._local is None:
            return
        try:
            if self._link.up:
                def finish(c: Any) -> None:
                    with c.transaction():
                        c.execute(self._sql["release_all"], (self.holder.holder_id,))
                        c.execute(self._sql["close_all"], (CLOSED, _now(),
                                                           self.holder.holder_id))

                self._run(finish)
        except Exception as exc:
            logger.warning("closing the PostgreSQL session store: %s", exc)
        finally:
            self._held.clear()
            self._watched.clear()
            self._local.close()
            self._local = None  # type: ignore[assignment]
            self._link.close()

    # -- internals ------------------------------------------------------------------------

    def _server_clock(self) -> int:
        """Now on the database server's clock (epoch ms), the one every host's lease
        timestamps are written and judged by: hosts' clocks may disagree by more than the
        expiry, which would let a fast clock take a live session over."""
        return self._host_clock() + self._offset_ms

    def _measure_offset(self) -> None:
        """The server's clock minus this host's, taken at each (re)connect."""
        before = self._host_clock()
        server = self._run(lambda c: c.execute(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()[0])
        after = self._host_clock()
        self._offset_ms = int(server) - (before + after) // 2

    def _run(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(connection)`` through the link; other driver errors become PluginError."""
        try:
            return self._link.run(fn)
        except psycopg.errors.UniqueViolation:
            raise
        except psycopg.Error as exc:
            raise self._link.error(exc) from None

    def _save_tx(self, c: Any, record: SessionRecord, state: dict[str, Any],
                 pending: list[int]) -> None:
        session_id = record.session_id
        now = _now()
        with c.transaction():
            self._check_held(c, session_id)
            c.execute(self._sql["upsert"], (
                session_id, self.profile, record.cwd, OPEN, record.title, now, now,
                self.holder.holder_id, self.holder.host, self.pid, json.dumps(state),
                record.root))
            self._write_all(c, session_id, [record.events[seq] for seq in pending])

    def _check_held(self, c: Any, session_id: str) -> None:
        """Inside a transaction: this holder leases ``session_id`` (the row locked FOR
        SHARE until the commit, so no takeover lands in between), or it is lost."""
        row = c.execute(self._sql["held"], (session_id,)).fetchone()
        if row is None or row[0] != self.holder.holder_id:
            raise self._lost(session_id)

    def _lost_unreadable(self, session_id: str) -> SessionHeldError:
        """As :meth:`_lost`, when the database cannot be asked who holds it now."""
        return SessionHeldError(session_id, None, lost=False)

    def _write_all(self, c: Any, session_id: str, batch: list[dict[str, Any]]) -> None:
        """Inside a transaction: store each event of ``batch`` unless that very event is
        stored already (an append whose answer was lost after its commit; another event
        at its seq is :class:`DuplicateEventError`), and the summary change of those
        written, in one ``UPDATE``."""
        written = []
        for event in batch:
            row = self._row(session_id, event)
            if c.execute(self._sql["insert_missing"], row).rowcount == 1:
                written.append(event)
                continue
            stored = c.execute(self._sql["event_body"], (session_id, row[1])).fetchone()
            if stored is None or stored[0] != row[4]:
                raise DuplicateEventError(session_id, row[1])
        change = summary.combine(written)
        if change is not None:
            c.execute(self._sql["update_summary"], summaries.update_params(session_id, change))

    def _stored_top(self, session_id: str) -> int | None:
        top = self._run(lambda c: c.execute(self._sql["top"], (session_id,)).fetchone()[0])
        return None if top is None else int(top)

    def _turn_tail(self, session_id: str) -> list[dict[str, Any]] | None:
        def tail(c: Any) -> list[str] | None:
            mark = c.execute(self._sql["last_turn_mark"], (session_id,)).fetchone()
            if mark is None or mark[1] != "turn/start":
                return None
            return [body for (body,) in c.execute(self._sql["tail"], (session_id, mark[0]))]

        bodies = self._run(tail)
        return None if bodies is None else records.decode(bodies)

    @staticmethod
    def _row(session_id: str, event: dict[str, Any]) -> tuple[Any, ...]:
        return (session_id, int(event["seq"]), str(event["type"]), int(event.get("time", 0)),
                records.encode(event))



def _lease(row: Any) -> Lease:
    return Lease(row[5], LeaseHolder(row[0], row[1], int(row[2])), int(row[3]), int(row[4]))
