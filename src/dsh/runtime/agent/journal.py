"""Where a session's events go: into the store first, then to every listener.

Each event is appended to the session store before any client sees it, so what a client
received survives a crash. A store that refuses the event because another runtime holds
the session lets the session go (nothing more of it is stored or sent, its clients are
told it was lost: :mod:`.leasing`); one whose
database is away keeps the event in its spool and ends the running turn
(:mod:`.leasing`). Saving a whole record (after a turn, at close) never raises: the next
save that succeeds writes every event still missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from dsh.core.errors import DuplicateEventError, SessionHeldError, StoreUnavailableError
from dsh.runtime.agent.leasing import Holdings
from dsh.runtime.agent.session import SessionRecord
from dsh.runtime.agent.store import SessionStore

Listener = Callable[[str, dict[str, Any]], None]
logger = logging.getLogger("dsh.agent")


class Journal:
    """The persistence and delivery of one agent's sessions over ``store``."""

    def __init__(self, store: SessionStore, holdings: Holdings) -> None:
        self.store = store
        self._holdings = holdings
        self._listeners: list[Listener] = []

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Deliver every notification to ``fn(method, params)``; returns the unsubscribe."""
        self._listeners.append(fn)

        def remove() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)

        return remove

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        """A session's notification: a ``session.event`` is stored, then every one is
        delivered (what :class:`~.session.Session` calls)."""
        if method == "session.event":
            # Stored before any client sees it: what a client received survives a crash.
            session_id = params["sessionId"]
            try:
                self.store.append(session_id, params["event"])
            except SessionHeldError as exc:
                # Another runtime runs this session now: neither store nor send its events.
                self._holdings.let_go(session_id, str(exc), exc.holder)
                return
            except DuplicateEventError as exc:  # another runtime wrote at this seq
                self._holdings.let_go(session_id, str(exc),
                                      self._holdings.holder_of(session_id))
                return
            except StoreUnavailableError as exc:
                # Kept on this host (the store's spool) and stored once the database is
                # back, so the client may see it; the running turn ends with an error.
                self._holdings.store_away(session_id, exc)
            except Exception:
                # The next save writes what is missing; the session carries on.
                logger.exception("could not store an event of session %s", session_id)
        self.deliver(method, params)

    def deliver(self, method: str, params: Mapping[str, Any]) -> None:
        """Hand a notification to every listener; one that fails is logged, not raised."""
        for listener in tuple(self._listeners):
            try:
                listener(method, dict(params))
            except Exception:
                logger.exception("agent listener failed on %s", method)

    def save(self, record: SessionRecord) -> None:
        """Save after a turn or at close. A failure (a full disk) is logged, not raised:
        raised, it would end the session's runner, dropping its queued prompts, or stop
        ``close`` before the other sessions are saved; the next save that succeeds writes
        every event still missing."""
        if not self.store.holds(record.session_id):
            return  # let go (another runtime took it): the log is that one's now
        try:
            self.store.save(record)
        except (SessionHeldError, StoreUnavailableError) as exc:
            logger.warning("did not save session %s: %s", record.session_id, exc)
        except Exception:
            logger.exception("could not save session %s", record.session_id)
