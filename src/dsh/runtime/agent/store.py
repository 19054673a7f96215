"""Where sessions persist: the store contract, and the in-memory store behind it.

The agent saves a :class:`~dsh.runtime.agent.session.SessionRecord` after every turn and
when it lets a session go, appends every event as it is emitted (before any client sees
it), and loads a record on ``resume`` of a session it does not hold live; ``summaries``
lists what is stored (each session's summary, :mod:`.summary`, kept current with every
append, so a listing reads no log); ``history_page`` reads a stored log a page at a time.
The ``sessions`` service (``sessions-sqlite``, backed by ``$DSH_HOME/sessions.db``, or
``sessions-postgres``) implements the same contract; the agent uses it when it is
published and :class:`MemorySessionStore` otherwise.

**Leases: one runtime per session at a time.** A store is opened by one runtime process,
which it names with a :class:`LeaseHolder` (a holder id unique to the process, its host
and pid). The agent ``acquire``\\ s a session's lease before it creates, restores, loads
or takes back a session, and ``release``\\ s it once the session has had no work for
``idle_release_s`` (or when it closes); the store's owner calls ``heartbeat`` every few
seconds while the runtime lives. The rules every store keeps:

* ``acquire`` is atomic across processes (and hosts, for a shared store): it takes a free
  lease, refreshes one this holder has, and takes over a *stale* one (:func:`stale`: the
  heartbeat is older than the expiry, or the holder ran on this host and its pid is
  gone); otherwise it raises :class:`~dsh.core.errors.SessionHeldError` naming the holder.
* ``append`` and ``save`` write only a session this holder leases; a lease lost to
  another runtime makes them raise ``SessionHeldError(lost=True)`` and write nothing.
  ``append`` never replaces a stored seq: a duplicate is
  :class:`~dsh.core.errors.DuplicateEventError`. Each append updates the session's
  summary in the same transaction.
* A session's :data:`Version` (a revision every save bumps, and the next seq of its
  log) tells whether anything was written since it was last seen: a session the agent
  released and kept in memory is ``watch``\\ ed, and a heartbeat that finds it changed or
  leased by another holder tells every ``on_moved`` listener (the agent then drops its
  copy and tells clients ``session/moved``).
* Reading (``load``, ``summaries``, ``history_page``, ``lease``, ``version``) needs no
  lease.
* A log a killed runtime left inside a turn is closed by the next runtime that restores
  the session (:mod:`.recovery`), and, for a reader that only reads it,
  ``close_abandoned`` closes it in the store once its holder is known dead, under the
  lease it takes and gives back for that: every reader then sees the turn ended as
  ``interrupted``, with the events a restore would have appended.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from dsh.core import idprefix
from dsh.core.errors import DuplicateEventError
from dsh.runtime.agent import events
from dsh.runtime.agent import summary as summaries
from dsh.runtime.agent.session import SessionRecord

PidAlive = Callable[[int], bool]
Version = tuple[int, int]
"""``(revision, next seq)`` of a stored session: the revision every save bumps, and the
seq its log's next event gets. Equal versions mean nothing was written in between."""
Moved = Callable[[str, "LeaseHolder | None"], None]
"""``moved(session_id, holder)``: a watched session was written or leased by another
runtime (``holder``: the one leasing it now, or None when it already let it go)."""

DEFAULT_IDLE_RELEASE_S = 2.0
"""How long a session with no work keeps its lease (the sessions rows' ``idle_release_s``):
long enough that a client's next prompt right after a turn does not pay to take it back,
short enough that another face (a terminal, another host) can continue it at once."""


class LeaseHolder(NamedTuple):
    """A runtime process as a lease holder: ``holder_id`` is unique per process (it tells
    two runtimes apart even when a pid is reused); ``host`` and ``pid`` name it to people
    and let a runtime on the same host see that the holder died."""

    holder_id: str
    host: str
    pid: int

    def public(self) -> dict[str, Any]:
        """What errors show of a holder: ``{host, pid}``."""
        return {"host": self.host, "pid": self.pid}


class Lease(NamedTuple):
    """A session's lease as stored: who holds it, since when, last heartbeat (epoch ms)."""

    session_id: str
    holder: LeaseHolder
    acquired_at: int
    heartbeat_at: int


class HistoryPage(NamedTuple):
    """A page of a session's log: ``events`` in seq order and the seq the next page starts
    at, or None when this page reached the end of the log."""

    events: list[dict[str, Any]]
    next_seq: int | None


def stale(lease: Lease, *, host: str, now_ms: int, expiry_ms: int,
          alive: PidAlive) -> bool:
    """Whether ``lease`` may be taken over: its heartbeat is older than ``expiry_ms``, or
    its holder ran on ``host`` (this one) and its process is gone.

    A pid reused by another process reads as alive (the safe mistake); the expiry still
    frees such a lease, since the dead holder no longer heartbeats it.
    """
    if now_ms - lease.heartbeat_at > expiry_ms:
        return True
    return lease.holder.host == host and not alive(lease.holder.pid)


def page_of(events: list[dict[str, Any]], start_seq: int, limit: int,
            max_bytes: int) -> HistoryPage:
    """The page of an in-memory log (seq = index) starting at ``start_seq``.

    At most ``limit`` events and ``max_bytes`` of their compact JSON (as stored and sent),
    except that a page always holds its first event, so paging always moves on.
    """
    out: list[dict[str, Any]] = []
    size = 0
    seq = start_seq
    while seq < len(events) and len(out) < limit:
        event = events[seq]
        cost = event_bytes(event)
        if out and size + cost > max_bytes:
            break
        out.append(event)
        size += cost
        seq += 1
    return HistoryPage(out, seq if seq < len(events) else None)


def event_bytes(event: dict[str, Any]) -> int:
    """The size of ``event`` as compact UTF-8 JSON, the form stored and framed."""
    return len(json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"))


def summaries_named(store: SessionStore, given: str) -> list[dict[str, Any]]:
    """The listing entries of the stored sessions ``given`` names, whole or by its start
    (:func:`dsh.core.idprefix.named`), newest first. The listing (no log read) is read
    only when ``given`` is no stored id itself."""
    entry = store.summary(given)
    if entry is not None:
        return [entry]
    entries = {e["sessionId"]: e for e in store.summaries(newest_first=True)}
    return [entries[i] for i in idprefix.named(given, entries)]


class SessionStore(Protocol):
    """Persistence for session records and their logs, with one lease per session."""

    holder: LeaseHolder
    idle_release_s: float
    """Seconds a session with no work keeps its lease before the agent releases it."""

    def acquire(self, session_id: str) -> Lease | None:
        """Take (or refresh) this holder's lease on ``session_id``; returns the stale lease
        it took over, if any. Held by a live other holder: ``SessionHeldError``."""
        ...

    def release(self, session_id: str) -> None:
        """Give up this holder's lease on ``session_id`` (nothing when not held)."""
        ...

    def heartbeat(self) -> list[str]:
        """Refresh every lease this holder has; returns the sessions it lost (taken over
        by another holder after this one stalled past the expiry), now forgotten, after
        calling every ``on_lost`` listener with each."""
        ...

    def on_lost(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Have ``heartbeat`` call ``listener(session_id)`` for each lease it finds lost;
        returns the unsubscribe."""
        ...

    def holds(self, session_id: str) -> bool:
        """Whether this holder's lease on ``session_id`` is unbroken as far as it knows:
        false after ``release``, or once a heartbeat or a fenced write found it lost."""
        ...

    def lease(self, session_id: str) -> Lease | None:
        """The lease on ``session_id`` as stored, or None when nobody holds it."""
        ...

    def save(self, record: SessionRecord) -> None:
        """Store ``record`` (leased), replacing any earlier version of the same session."""
        ...

    def load(self, session_id: str) -> SessionRecord | None:
        """The stored record of ``session_id``, or None when there is none."""
        ...

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Store one event of a leased session now (a crash must not lose it)."""
        ...

    def summaries(self, *, workspace: str | None = None, newest_first: bool = False,
                  limit: int | None = None) -> list[dict[str, Any]]:
        """The listing entries (:func:`.summary.entry`, plus the stored ``status`` and
        ``profile``) of the stored sessions, sorted by id, or newest updated first; only
        those whose workspace root is ``workspace``; at most ``limit``."""
        ...

    def summary(self, session_id: str) -> dict[str, Any] | None:
        """The listing entry of one stored session (as :meth:`summaries` has it), or None
        when the store does not know it."""
        ...

    def version(self, session_id: str) -> Version | None:
        """The stored session's :data:`Version`, or None when it is unknown."""
        ...

    def watch(self, session_id: str, version: Version) -> None:
        """Have each ``heartbeat`` check the released session ``session_id``, last seen
        at ``version``: changed or leased by another holder, it is reported (once)."""
        ...

    def unwatch(self, session_id: str) -> None:
        """Stop checking ``session_id`` (taken back, or dropped from memory)."""
        ...

    def on_moved(self, listener: Moved) -> Callable[[], None]:
        """Have ``heartbeat`` call ``listener(session_id, holder)`` for each watched
        session it finds moved; returns the unsubscribe."""
        ...

    def history_page(self, session_id: str, *, start_seq: int, limit: int,
                     max_bytes: int) -> HistoryPage | None:
        """Stored events from ``start_seq`` (see :func:`page_of` for the bounds); None
        when the session is unknown."""
        ...

    def close_abandoned(self, session_id: str) -> bool:
        """End the turn a dead holder left the stored log inside (``turn/end``
        ``interrupted``, as a restore would), under the lease taken for it; True when
        this call did. Nothing while a live runtime holds the session."""
        ...


class MemorySessionStore:
    """Records kept in this process; copies in and out, as a real store would serialize.

    Leases are kept too, so the agent runs one code path; they bind nothing beyond this
    process, whose one holder every lease belongs to, so no session ever moves.
    """

    idle_release_s = DEFAULT_IDLE_RELEASE_S

    def __init__(self) -> None:
        self._records: dict[str, SessionRecord] = {}
        self._rows: dict[str, tuple[int, int, summaries.Summary]] = {}  # created, rev, sum
        self._next: dict[str, int] = {}
        self._leased: set[str] = set()
        self.holder = LeaseHolder(f"memory-{os.getpid()}-{id(self):x}", "", os.getpid())

    def acquire(self, session_id: str) -> Lease | None:
        """Hold ``session_id`` (always granted: this process is the only holder)."""
        self._leased.add(session_id)
        return None

    def release(self, session_id: str) -> None:
        """Let ``session_id`` go."""
        self._leased.discard(session_id)

    def heartbeat(self) -> list[str]:
        """Nothing expires in memory."""
        return []

    def on_lost(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """No lease is ever lost in memory: nothing to tell."""
        return lambda: None

    def on_moved(self, listener: Moved) -> Callable[[], None]:
        """No session ever moves away from the one process: nothing to tell."""
        return lambda: None

    def watch(self, session_id: str, version: Version) -> None:
        """Nothing to watch for (see :meth:`on_moved`)."""

    def unwatch(self, session_id: str) -> None:
        """Nothing was watched."""

    def holds(self, session_id: str) -> bool:
        """Whether ``session_id`` is leased (acquired and not released)."""
        return session_id in self._leased

    def lease(self, session_id: str) -> Lease | None:
        """This process's lease on ``session_id``, if held."""
        return Lease(session_id, self.holder, 0, 0) if session_id in self._leased else None

    def save(self, record: SessionRecord) -> None:
        """Keep a snapshot of ``record``."""
        session_id = record.session_id
        self._records[session_id] = copy.deepcopy(record)
        created, revision, summary = self._rows.get(session_id, (
            events.now_ms(), 0, summaries.Summary()))
        self._rows[session_id] = (created, revision + 1, summary)
        self._next[session_id] = max(self._next.get(session_id, 0), len(record.events))

    def load(self, session_id: str) -> SessionRecord | None:
        """A fresh copy of the stored record, or None."""
        record = self._records.get(session_id)
        return None if record is None else copy.deepcopy(record)

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Check the seq is new (a snapshot is kept at ``save``, so nothing to store but
        the summary)."""
        record = self._records.get(session_id)
        seq = int(event["seq"])
        if (record is not None and seq < len(record.events)) or seq < self._next.get(
                session_id, 0):
            raise DuplicateEventError(session_id, seq)
        self._next[session_id] = seq + 1
        change = summaries.delta(event)
        row = self._rows.get(session_id)
        if change is not None and row is not None:
            self._rows[session_id] = (row[0], row[1], row[2].plus(change))

    def version(self, session_id: str) -> Version | None:
        """The saved session's revision and next seq, or None."""
        row = self._rows.get(session_id)
        return None if row is None else (row[1], self._next.get(session_id, 0))

    def summary(self, session_id: str) -> dict[str, Any] | None:
        """One stored session's listing entry, or None."""
        record = self._records.get(session_id)
        if record is None:
            return None
        created, _, summary = self._rows[session_id]
        return summaries.entry(session_id, record.cwd, record.root,
                               record.title or summary.title, created, summary.updated,
                               summary.turns, summary.usage, summary.cost, status="open",
                               profile="")

    def summaries(self, *, workspace: str | None = None, newest_first: bool = False,
                  limit: int | None = None) -> list[dict[str, Any]]:
        """The stored sessions' listing entries (see :class:`SessionStore`)."""
        found = []
        for session_id, record in sorted(self._records.items()):
            if workspace is not None and record.root != workspace:
                continue
            created, _, summary = self._rows[session_id]
            found.append(summaries.entry(session_id, record.cwd, record.root,
                                         record.title or summary.title, created,
                                         summary.updated, summary.turns, summary.usage,
                                         summary.cost, status="open", profile=""))
        if newest_first:
            found.sort(key=lambda e: (e["updatedAt"], e["sessionId"]), reverse=True)
        return found if limit is None else found[:limit]

    def close_abandoned(self, session_id: str) -> bool:
        """Nothing: a session kept in memory dies with its only runtime."""
        return False

    def history_page(self, session_id: str, *, start_seq: int, limit: int,
                     max_bytes: int) -> HistoryPage | None:
        """A page of the saved snapshot's log."""
        record = self._records.get(session_id)
        if record is None:
            return None
        return page_of(record.events, start_seq, limit, max_bytes)
