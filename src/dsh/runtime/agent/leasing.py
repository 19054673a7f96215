"""The agent's side of the session leases: which live sessions this runtime may still run.

The store (:mod:`.store`) keeps the leases; this keeps the agent's live sessions in step
with them. A session stays live here only while this runtime's lease on it is unbroken.
Once the lease is found lost (a heartbeat's ``on_lost``, a fenced write refused, or a
check before work that writes), the session is *let go*: its queue is dropped, its turn
cancelled, ``session_end`` fired in the background, and it is forgotten, so a later use
restores it through the store, which answers busy naming the new holder (or, if that one
died meanwhile, takes the lease back and reloads the log, which may have grown there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from dsh.runtime.agent.session import Session
from dsh.runtime.agent.store import SessionStore

logger = logging.getLogger("dsh.agent")

TAKEN = "its lease was taken over by another runtime"
STALLED = "another runtime took its lease over while this one stalled"
STORE_UNAVAILABLE = "store-unavailable"
"""``turn/end`` error code of a turn ended because the session store went away."""


class Holdings:
    """The live ``sessions`` (the agent's own dict, shared) under ``store``'s leases;
    ``end(session)`` fires ``session_end`` for a session let go."""

    def __init__(self, store: SessionStore, sessions: dict[str, Session],
                 end: Callable[[Session], Awaitable[None]]) -> None:
        self._store = store
        self._sessions = sessions
        self._end = end
        self._background: set[asyncio.Task[Any]] = set()
        self._unwatch = store.on_lost(lambda session_id: self.let_go(session_id, STALLED))

    def live(self, session_id: str, *, confirm: bool = False) -> Session | None:
        """The session live here, unless its lease was lost (then it is let go first).

        ``confirm`` (before work that writes: a prompt, a resume, a compaction) reads the
        lease in the store rather than trusting this runtime's view, which learns of a
        loss only at the next heartbeat. A store that cannot be read (a full disk) leaves
        the view as it was: the heartbeat and the fenced writes still tell.
        """
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if not self._store.holds(session_id):
            self.let_go(session_id, TAKEN)
            return None
        if confirm:
            try:
                lease = self._store.lease(session_id)
            except Exception as exc:
                logger.warning("could not read the lease of session %s: %s", session_id, exc)
                return session
            if lease is None or lease.holder.holder_id != self._store.holder.holder_id:
                self.let_go(session_id, TAKEN)
                return None
        return session

    def let_go(self, session_id: str, why: str) -> None:
        """Drop a live session another runtime now runs (see the module docstring)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        logger.warning("session %s: %s; this runtime no longer runs it", session_id, why)
        self.release(session_id)  # nothing to delete, but the store forgets what it knew
        session.inbox.clear()
        session.cancel_requested = True
        if session.turn is not None:
            session.turn.cancelled.set()
        if session.turn_task is not None:
            session.turn_task.cancel()
        task = asyncio.ensure_future(self._end(session))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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
        """Stop listening for lost leases."""
        self._unwatch()
