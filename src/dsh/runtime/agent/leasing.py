"""The agent's side of the session leases: a session is this runtime's only while it works.

The store (:mod:`.store`) keeps the leases; this keeps the agent's sessions in step with
them. A session here is in one of three states:

* **Held**: this runtime leases it and may run its turns. A session is held from when it
  is created, restored or taken back until it has had no work (no turn, queued prompt,
  approval, job or sub-agent: :meth:`.session.Session.has_work`) for the store's
  ``idle_release_s``.
* **Parked**: saved, its lease given back, but kept in memory at the store
  :data:`~.store.Version` it was left at. Another runtime (a terminal, another host) can
  continue it at once; the next use here takes it back with one lease statement and one
  version check, and reloads it only when another runtime wrote meanwhile. At most
  ``max_idle_sessions`` are parked; past that the one parked longest is unloaded, so a
  long-lived web or SDK runtime stays bounded however many sessions it served.
* **Gone**: not in memory; its next use restores it from the store.

The store's heartbeat watches parked sessions: one that another runtime leased or wrote
has *moved*: it is dropped here (``session_end`` fires) and clients are told with a
``session/moved`` event, which is not stored and carries no ``seq`` (it is about this
runtime, not part of the session's log).

A held session whose lease is found lost (a heartbeat's ``on_lost``, a fenced write
refused, or a check before work that writes) is *let go*: its queue is dropped, its turn
cancelled, ``session_end`` fired in the background, and it is forgotten, so a later use
restores it through the store, which answers busy naming the new holder (or, once that
one gave it back or died, takes the lease back and reloads the log, which may have grown
there). Its clients are told, outside the log (nothing more of the session is stored
here, since the log is the new holder's): an ``error`` with code ``lease-lost`` naming
the new holder when the session had work here, the running turn's ``turn/end`` (error,
``lease-lost``), and ``session/moved`` as for a parked session. What the running turn
emits after that is neither stored nor sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dsh.core.errors import SessionHeldError
from dsh.runtime.agent import events
from dsh.runtime.agent.session import Session
from dsh.runtime.agent.store import LeaseHolder, SessionStore

logger = logging.getLogger("dsh.agent")

TAKEN = "its lease was taken over by another runtime"
STALLED = "another runtime took its lease over while this one stalled"
STORE_UNAVAILABLE = "store-unavailable"
"""``turn/end`` error code of a turn ended because the session store went away."""

Tell = Callable[[str, dict[str, Any]], None]


class Holdings:
    """The agent's sessions (its own dict, shared) under ``store``'s leases; ``end(session)``
    fires ``session_end`` for a session dropped, ``tell(method, params)`` reaches the
    clients, ``cap()`` is how many parked sessions stay in memory."""

    def __init__(self, store: SessionStore, sessions: dict[str, Session],
                 end: Callable[[Session], Awaitable[None]], tell: Tell,
                 cap: Callable[[], int]) -> None:
        self._store = store
        self._sessions = sessions
        self._end = end
        self._tell = tell
        self._cap = cap
        self._parked: dict[str, None] = {}  # parked session ids, oldest first
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._unwatch = (store.on_lost(self._lost), store.on_moved(self._moved))

    # -- which sessions are this runtime's ------------------------------------------------

    def live(self, session_id: str, *, confirm: bool = False) -> Session | None:
        """The session in memory here, held or parked, unless its lease was lost (then it
        is let go first).

        ``confirm`` (before work that writes: a prompt, a resume, a compaction) asks for
        a held session only, and reads its lease in the store rather than trusting this
        runtime's view, which learns of a loss only at the next heartbeat. A store that
        cannot be read (a full disk) leaves the view as it was: the heartbeat and the
        fenced writes still tell.
        """
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.parked is not None:
            return None if confirm else session
        if not self._store.holds(session_id):
            self.let_go(session_id, TAKEN, self.holder_of(session_id))
            return None
        if confirm:
            try:
                lease = self._store.lease(session_id)
            except Exception as exc:
                logger.warning("could not read the lease of session %s: %s", session_id, exc)
                return session
            if lease is None or lease.holder.holder_id != self._store.holder.holder_id:
                self.let_go(session_id, TAKEN, None if lease is None else lease.holder.public())
                return None
        return session

    async def take_back(self, session: Session) -> bool:
        """Lease the parked ``session`` again: True when the copy here is still what the
        store has (it is held again), False when another runtime wrote meanwhile (the
        stale copy is dropped, ``session_end`` awaited, and the lease kept for the reload).

        Held by another runtime: the copy is dropped as moved and ``SessionHeldError``
        raised (busy, naming the holder). A store that fails leaves it parked.
        """
        store, session_id, seen = self._store, session.id, session.parked
        store.unwatch(session_id)
        try:
            store.acquire(session_id)
        except SessionHeldError as exc:
            self._moved(session_id, None, exc.holder)
            raise
        except BaseException:
            store.watch(session_id, seen)  # type: ignore[arg-type]
            raise
        try:
            current = store.version(session_id)
        except BaseException:
            self.release(session_id)
            store.watch(session_id, seen)  # type: ignore[arg-type]
            raise
        self._parked.pop(session_id, None)
        if current == seen:
            session.parked = None
            return True
        logger.info("session %s was written by another runtime since this one released "
                    "it: reloading it", session_id)
        if self._sessions.get(session_id) is session:
            del self._sessions[session_id]
        await self._end(session)
        return False

    # -- giving leases back ---------------------------------------------------------------

    def settle(self, session: Session) -> None:
        """Arm (again) the release of a held ``session``'s lease ``idle_release_s`` from
        now, if it has no work; whoever gives it work later finds the timer moot."""
        if session.release_timer is not None:
            session.release_timer.cancel()
            session.release_timer = None
        if (self._closed or session.parked is not None or session.has_work()
                or self._sessions.get(session.id) is not session):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs (the runtime is going): close releases it
            return
        session.release_timer = loop.call_later(
            max(0.0, float(self._store.idle_release_s)), self._park, session)

    def _park(self, session: Session) -> None:
        """Save ``session``, give its lease back, keep it in memory, watch for a move."""
        session.release_timer = None
        if (self._closed or session.parked is not None or session.has_work()
                or self._sessions.get(session.id) is not session):
            return
        store, session_id = self._store, session.id
        try:
            store.save(session.record)
            version = store.version(session_id)
        except SessionHeldError as exc:
            if exc.lost:
                self.let_go(session_id, str(exc), exc.holder)
            return
        except Exception as exc:  # the store is away: keep the lease, try again later
            logger.warning("session %s keeps its lease for now: %s", session_id, exc)
            self.settle(session)
            return
        if version is None:
            return
        self.release(session_id)
        store.watch(session_id, version)
        session.parked = version
        self._parked[session_id] = None
        while len(self._parked) > max(0, self._cap()):
            self.unload(next(iter(self._parked)))

    def unload(self, session_id: str) -> None:
        """Drop a parked session from memory (its ``session_end`` fires in background)."""
        session = self._sessions.get(session_id)
        self._parked.pop(session_id, None)
        self._store.unwatch(session_id)
        if session is None or session.parked is None:
            return
        del self._sessions[session_id]
        self._end_later(session)

    def _moved(self, session_id: str, holder: LeaseHolder | None,
               public: dict[str, Any] | None = None) -> None:
        """A parked session another runtime leased or wrote: drop it, tell the clients."""
        session = self._sessions.get(session_id)
        if session is None or session.parked is None:
            return
        self.unload(session_id)
        shown = holder.public() if holder is not None else public
        logger.info("session %s moved to another runtime (%s)", session_id, shown)
        self._tell("session.event", {"sessionId": session_id,
                                     "event": events.moved(shown)})

    # -- losing leases --------------------------------------------------------------------

    def _lost(self, session_id: str) -> None:
        """A heartbeat found the lease of ``session_id`` taken while this runtime stalled."""
        self.let_go(session_id, STALLED, self.holder_of(session_id))

    def let_go(self, session_id: str, why: str,
               holder: Mapping[str, Any] | None = None) -> None:
        """Drop a live session another runtime now runs (``holder``: ``{host, pid}`` of
        that one, None when unknown or when it gave the session back already), and tell
        its clients (see the module docstring)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        self._parked.pop(session_id, None)
        if session.release_timer is not None:
            session.release_timer.cancel()
            session.release_timer = None
        if session.parked is not None:
            self._store.unwatch(session_id)
            self._end_later(session)
            return
        logger.warning("session %s: %s; this runtime no longer runs it", session_id, why)
        self.release(session_id)  # nothing to delete, but the store forgets what it knew
        had_work, turn = session.has_work(), session.turn
        message = (f"{SessionHeldError(session_id, holder, lost=True).message}; this "
                   "runtime stopped its work on it and takes it back only once it is free")
        session.inbox.clear()
        session.cancel_requested = True
        if turn is not None:
            session.failure = {"message": message, "code": events.LEASE_LOST}
            turn.cancelled.set()
        if session.turn_task is not None:
            session.turn_task.cancel()
        told: list[dict[str, Any]] = []
        if had_work:
            told.append(events.lease_lost(message, holder))
        if turn is not None:
            told.append(events.turn_lost(session.record.turns, message))
        told.append(events.moved(holder))
        for event in told:
            self._tell("session.event", {"sessionId": session_id, "event": event})
        self._end_later(session)

    def holder_of(self, session_id: str) -> dict[str, Any] | None:
        """``{host, pid}`` of whoever leases ``session_id`` now (None: nobody, or the
        store cannot say)."""
        try:
            lease = self._store.lease(session_id)
        except Exception as exc:
            logger.warning("could not read the lease of session %s: %s", session_id, exc)
            return None
        return None if lease is None else lease.holder.public()

    def store_away(self, session_id: str, error: Exception) -> None:
        """The store could not take an event (its database is away; the event was kept on
        this host): end the session's running turn with an error (``turn/end`` code
        ``store-unavailable``) rather than run on with nothing stored. The session stays
        live here; its next turn runs once the store answers again."""
        session = self._sessions.get(session_id)
        if session is None or session.turn is None or session.failure is not None:
            return
        logger.warning("session %s: %s; ending its turn", session_id, error)
        session.failure = {"message": str(error), "code": STORE_UNAVAILABLE}
        session.turn.cancelled.set()
        if session.turn_task is not None:
            session.turn_task.cancel()

    def release(self, session_id: str) -> None:
        """Give the session's lease back; a failure is logged (the lease then expires)."""
        try:
            self._store.release(session_id)
        except Exception:
            logger.exception("could not release the lease of session %s", session_id)

    def close(self) -> None:
        """Stop giving leases back and watching for lost or moved ones (the agent closes:
        it saves and releases what it holds itself)."""
        self._closed = True
        for session in self._sessions.values():
            if session.release_timer is not None:
                session.release_timer.cancel()
                session.release_timer = None
            if session.parked is not None:
                self._store.unwatch(session.id)
        for unwatch in self._unwatch:
            unwatch()

    def _end_later(self, session: Session) -> None:
        task = asyncio.ensure_future(self._end(session))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
