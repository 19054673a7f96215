"""What every session store does the same way: the lease algorithm over a small SQL port,
and what a store remembers between calls.

Every store (``sessions-sqlite``, ``sessions-postgres``) keeps the contract of
:mod:`dsh.runtime.agent.store` with its own SQL; the algorithm on top of it is written
once, here, as the base class :class:`Tracking`. A store implements the *port*: a handful
of methods, each one statement (or one short transaction) of its dialect:

* ``_take(session_id, now)``: the conditional UPSERT: a free lease, or this holder's own
  refreshed; True when this holder has it now.
* ``_take_over(seen, now)``: the compare-and-set of a stale lease, on the holder and
  heartbeat that were judged; True when this holder won it.
* ``_read_lease(session_id)``, ``_drop(session_id)`` (this holder's lease, if it has it),
  ``_beat(now)`` (refresh every lease of this holder; the ids it still has),
  ``_leases(ids)`` (the stored leases of those sessions), ``_versions(ids)`` (their
  :data:`~dsh.runtime.agent.store.Version`), ``_stored_top(session_id)`` and
  ``_turn_tail(session_id)`` (the log from its last ``turn/start``, when no ``turn/end``
  follows it: two statements, the first reading back from the log's end to its last
  turn mark); and ``append_many`` (a leased batch in one transaction).

On that port this class decides:

* **Acquire.** Take the lease in one statement; if another holder has it, read it, judge
  it (:func:`~dsh.runtime.agent.store.stale`) and, when stale, take it by compare-and-set,
  so of runtimes racing for a dead holder's session exactly one wins. A lease released or
  re-taken between the steps is looked at again (three times at most).
* **Leases held.** ``holds`` answers from memory (the agent asks before every use); a
  lease is forgotten when released, when a heartbeat finds it taken over (each
  ``on_lost`` listener is told), or when a fenced write is refused. Forgetting a session
  drops what was known of its log too: another holder may have written meanwhile.
* **Watched sessions.** A session the agent released but keeps in memory is watched at the
  version it was left at; each heartbeat reads the watched sessions' leases and versions
  (two statements, however many) and tells every ``on_moved`` listener of one another
  holder leases or wrote, once.
* **Turns left open.** A runtime killed mid-turn leaves its log inside the turn; the
  next runtime to restore the session closes it (:mod:`dsh.runtime.agent.recovery`), but
  a reader (a history page, ``dsh sessions show``) would see it open for good.
  :meth:`close_abandoned` closes it in the store, once its holder is known dead (the
  lease as ``acquire`` judges it: gone from this host, or expired), under the lease it
  takes for that, with the events a restore would append; then gives the lease back.
* **Seqs written.** ``_next`` is the first seq not yet written (asked of the database
  once per session, through ``_stored_top``); ``_missing`` the seqs below it whose append
  failed. ``save`` writes both (:meth:`_pending`), so one failed append never leaves a
  gap once a later save succeeds, and later appends cannot hide it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from dsh.core.errors import SessionHeldError
from dsh.runtime.agent import recovery
from dsh.runtime.agent.store import (
    DEFAULT_IDLE_RELEASE_S,
    Lease,
    LeaseHolder,
    Moved,
    PidAlive,
    Version,
    stale,
)

logger = logging.getLogger("dsh.sessions")

DEFAULT_LEASE_EXPIRY_MS = 30_000
"""A lease whose heartbeat is older than this may be taken over by any runtime."""


class Tracking:
    """The shared half of a store: ``holder`` leases sessions; another holder's lease is
    stale after ``lease_expiry_ms`` by ``clock`` (epoch ms), or at once when it ran on
    this host and ``alive`` says its pid is gone. Subclasses implement the port."""

    idle_release_s: float = DEFAULT_IDLE_RELEASE_S

    def __init__(self, holder: LeaseHolder, *, lease_expiry_ms: int,
                 clock: Callable[[], int], alive: PidAlive) -> None:
        self.holder = holder
        self.lease_expiry_ms = lease_expiry_ms
        self._clock = clock
        self._alive = alive
        self._held: set[str] = set()
        self._lost_listeners: list[Callable[[str], None]] = []
        self._moved_listeners: list[Moved] = []
        self._watched: dict[str, Version] = {}
        self._next_seq: dict[str, int] = {}
        self._missing: dict[str, set[int]] = {}

    # -- the port (each store's SQL) ----------------------------------------------------

    def _take(self, session_id: str, now: int) -> bool:
        raise NotImplementedError

    def _take_over(self, seen: Lease, now: int) -> bool:
        raise NotImplementedError

    def _read_lease(self, session_id: str) -> Lease | None:
        raise NotImplementedError

    def _drop(self, session_id: str) -> None:
        raise NotImplementedError

    def _beat(self, now: int) -> set[str]:
        raise NotImplementedError

    def _leases(self, session_ids: list[str]) -> dict[str, Lease]:
        raise NotImplementedError

    def _versions(self, session_ids: list[str]) -> dict[str, Version]:
        raise NotImplementedError

    def _stored_top(self, session_id: str) -> int | None:
        """The highest stored seq of ``session_id`` (None for an empty log)."""
        raise NotImplementedError

    def _turn_tail(self, session_id: str) -> list[dict[str, Any]] | None:
        """The stored events from the log's last ``turn/start`` on, when no ``turn/end``
        follows it; None when the log ends outside a turn."""
        raise NotImplementedError

    def append_many(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        """Write ``batch`` of a leased session in one transaction."""
        raise NotImplementedError

    # -- leases ---------------------------------------------------------------------------

    def acquire(self, session_id: str) -> Lease | None:
        """Take or refresh this holder's lease on ``session_id``; returns the stale lease
        taken over, if any. Held by a live holder: :class:`SessionHeldError` naming it."""
        me = self.holder
        for _ in range(3):  # a lease released or re-taken between the steps: look again
            now = self._clock()
            if self._take(session_id, now):
                self._now_held(session_id)
                return None
            self._forget(session_id)  # whatever this store thought, the lease is not its own
            current = self._read_lease(session_id)
            if current is None:
                continue
            if not stale(current, host=me.host, now_ms=now, expiry_ms=self.lease_expiry_ms,
                         alive=self._alive):
                raise SessionHeldError(session_id, current.holder.public())
            if self._take_over(current, now):
                logger.info("session %s: took over the lease of pid %d on host %s (%s)",
                            session_id, current.holder.pid, current.holder.host,
                            "expired" if now - current.heartbeat_at > self.lease_expiry_ms
                            else "process gone")
                self._now_held(session_id)
                return current
        current = self._read_lease(session_id)
        raise SessionHeldError(session_id, None if current is None else current.holder.public())

    def release(self, session_id: str) -> None:
        """Drop this holder's lease on ``session_id`` (nothing when another holds it)."""
        self._forget(session_id)
        self._drop(session_id)

    def lease(self, session_id: str) -> Lease | None:
        """The stored lease on ``session_id``, or None when nobody holds it."""
        return self._read_lease(session_id)

    def live_leases(self, session_ids: list[str]) -> dict[str, Lease]:
        """The leases of those sessions that a live runtime holds (not stale), by id: what
        ``dsh sessions`` shows, and why ``rm`` refuses."""
        if not session_ids:
            return {}
        now = self._clock()
        return {session_id: lease for session_id, lease in self._leases(session_ids).items()
                if not stale(lease, host=self.holder.host, now_ms=now,
                             expiry_ms=self.lease_expiry_ms, alive=self._alive)}

    def heartbeat(self) -> list[str]:
        """Refresh this holder's leases; returns (and forgets) the ones another took, after
        telling each lost-listener. Then checks the watched sessions (:meth:`watch`)."""
        lost: list[str] = []
        if self._held:
            lost = self._tell_lost(self._held - self._beat(self._clock()))
        if self._watched:
            self._check_watched()
        return lost

    def on_lost(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(session_id)`` when a heartbeat finds a lease taken over (the
        agent lets the session go at once); returns the unsubscribe."""
        return _subscribe(self._lost_listeners, listener)

    def holds(self, session_id: str) -> bool:
        """Whether this holder's lease on ``session_id`` is unbroken, as far as it knows
        (a loss shows at the next heartbeat or fenced write)."""
        return session_id in self._held

    def close_abandoned(self, session_id: str) -> bool:
        """End the turn a dead holder left ``session_id``'s log inside (see "Turns left
        open" above); True when this call closed one.

        Nothing is done while a live runtime leases the session (its turn may be
        running), nor for a log that ends outside a turn. Otherwise the lease is taken as
        ``acquire`` takes it (of readers racing, one wins; the others, busy, leave it to
        the winner), the tail read again under it, the closing events appended in one
        transaction, and the lease given back. A store that cannot write (read-only,
        unreachable) leaves the log as it is: a warning, never an error for the reader.
        """
        try:
            lease = self._read_lease(session_id)
            if lease is not None and (lease.holder.holder_id == self.holder.holder_id
                                      or not self._stale(lease)):
                return False
            if self._turn_tail(session_id) is None:
                return False
            self.acquire(session_id)
        except SessionHeldError:
            return False
        except Exception as exc:
            logger.warning("could not close the interrupted turn of session %s: %s",
                           session_id, exc)
            return False
        try:
            tail = self._turn_tail(session_id)
            if tail is None:
                return False
            self.append_many(session_id, recovery.closing_events(tail))
        except Exception as exc:
            logger.warning("could not close the interrupted turn of session %s: %s",
                           session_id, exc)
            return False
        finally:
            try:
                self.release(session_id)
            except Exception as exc:
                logger.warning("could not release the lease of session %s: %s", session_id,
                               exc)
        logger.info("session %s: closed the turn its dead runtime left open", session_id)
        return True

    def _stale(self, lease: Lease) -> bool:
        """Whether another holder's ``lease`` may be taken over now (``acquire``'s test)."""
        return stale(lease, host=self.holder.host, now_ms=self._clock(),
                     expiry_ms=self.lease_expiry_ms, alive=self._alive)

    # -- sessions released but kept in memory ---------------------------------------------

    def version(self, session_id: str) -> Version | None:
        """The stored session's ``(revision, next seq)``, or None when it is unknown."""
        return self._versions([session_id]).get(session_id)

    def watch(self, session_id: str, version: Version) -> None:
        """Check ``session_id`` (last seen at ``version``) at every heartbeat."""
        self._watched[session_id] = version

    def unwatch(self, session_id: str) -> None:
        """Stop checking ``session_id``."""
        self._watched.pop(session_id, None)

    def on_moved(self, listener: Moved) -> Callable[[], None]:
        """Call ``listener(session_id, holder)`` for each watched session a heartbeat finds
        leased by another holder or written since; returns the unsubscribe."""
        return _subscribe(self._moved_listeners, listener)

    def _check_watched(self) -> None:
        """Tell the moved-listeners of each watched session that moved, and stop watching
        it (each is told once)."""
        ids = sorted(self._watched)
        leases = self._leases(ids)
        versions = self._versions(ids)
        for session_id in ids:
            seen = self._watched.get(session_id)
            lease = leases.get(session_id)
            taken = lease is not None and lease.holder.holder_id != self.holder.holder_id
            if seen is None or not (taken or versions.get(session_id) != seen):
                continue
            del self._watched[session_id]
            holder = lease.holder if taken and lease is not None else None
            for listener in tuple(self._moved_listeners):
                try:
                    listener(session_id, holder)
                except Exception:
                    logger.exception("a moved-session listener failed on session %s",
                                     session_id)

    # -- what this store knows of its leases ----------------------------------------------

    def _tell_lost(self, lost: Iterable[str]) -> list[str]:
        """Forget each lost session and tell every listener; returns them sorted."""
        found = sorted(lost)
        for session_id in found:
            self._forget(session_id)
            for listener in tuple(self._lost_listeners):
                try:
                    listener(session_id)
                except Exception:
                    logger.exception("a lost-lease listener failed on session %s", session_id)
        return found

    def _now_held(self, session_id: str) -> None:
        """A lease just taken (not refreshed): what this store knew of the log may be
        stale, since another holder may have written meanwhile."""
        if session_id not in self._held:
            self._forget(session_id)
            self._held.add(session_id)

    def _forget(self, session_id: str) -> None:
        self._held.discard(session_id)
        self._next_seq.pop(session_id, None)
        self._missing.pop(session_id, None)

    def _lost(self, session_id: str) -> SessionHeldError:
        """The error for a write to a session this holder does not lease (now forgotten)."""
        was_held = session_id in self._held
        self._forget(session_id)
        current = self._read_lease(session_id)
        holder = None if current is None else current.holder.public()
        return SessionHeldError(session_id, holder, lost=was_held)

    # -- seqs -----------------------------------------------------------------------------

    def _next(self, session_id: str) -> int:
        """The first seq not yet stored for ``session_id`` (asked of the database once)."""
        known = self._next_seq.get(session_id)
        if known is None:
            top = self._stored_top(session_id)
            known = 0 if top is None else top + 1
            self._next_seq[session_id] = known
        return known

    def _stored(self, session_id: str, seq: int) -> None:
        """Track that ``seq`` is stored: the first unstored seq moves past it, and seqs it
        skipped (never appended) are left for ``save``."""
        start = self._next(session_id)
        missing = self._missing.get(session_id)
        if missing:
            missing.discard(seq)
        if seq >= start:
            self._note_missing(session_id, range(start, seq))
            self._next_seq[session_id] = seq + 1

    def _unstored(self, session_id: str, seq: int) -> None:
        """Track a failed append: ``seq`` (and any it skipped) wait for ``save``."""
        start = self._next(session_id)
        self._note_missing(session_id, range(start, seq + 1) if seq >= start else (seq,))
        self._next_seq[session_id] = max(start, seq + 1)

    def _note_missing(self, session_id: str, seqs: Iterable[int]) -> None:
        seqs = list(seqs)
        if seqs:
            self._missing.setdefault(session_id, set()).update(seqs)

    def _pending(self, session_id: str, count: int) -> list[int]:
        """Seqs below ``count`` (the record's log length) that ``save`` must write: the
        failed appends, then everything past the first unstored seq."""
        start = self._next(session_id)
        missing = sorted(self._missing.get(session_id, ()))
        return [seq for seq in [*missing, *range(start, count)] if seq < count]

    def _saved(self, session_id: str, count: int) -> None:
        """A save wrote every pending seq of a log of ``count`` events."""
        self._missing.pop(session_id, None)
        self._next_seq[session_id] = max(self._next_seq.get(session_id, 0), count)


def _subscribe(listeners: list, listener: object) -> Callable[[], None]:
    listeners.append(listener)

    def remove() -> None:
        if listener in listeners:
            listeners.remove(listener)

    return remove
