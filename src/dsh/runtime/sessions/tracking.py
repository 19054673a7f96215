"""What a session store remembers between calls: its leases as it knows them, and which
seqs of each log are written.

Every store (``sessions-sqlite``, ``sessions-postgres``) keeps the same bookkeeping on top
of its own SQL, so it is written once here as a base class:

* **Leases held.** ``holds`` answers from memory (the agent asks before every use); a
  lease is forgotten when released, when a heartbeat finds it taken over (each
  ``on_lost`` listener is told), or when a fenced write is refused. Forgetting a session
  drops what was known of its log too: another holder may have written meanwhile.
* **Seqs written.** ``_next`` is the first seq not yet written (asked of the database
  once per session, through ``_stored_top``); ``_missing`` the seqs below it whose append
  failed. ``save`` writes both (:meth:`_pending`), so one failed append never leaves a
  gap once a later save succeeds, and later appends cannot hide it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

logger = logging.getLogger("dsh.sessions")


class Tracking:
    """The bookkeeping base of a store; subclasses implement :meth:`_stored_top`."""

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._lost_listeners: list[Callable[[str], None]] = []
        self._next_seq: dict[str, int] = {}
        self._missing: dict[str, set[int]] = {}

    def _stored_top(self, session_id: str) -> int | None:
        """The highest stored seq of ``session_id`` (None for an empty log)."""
        raise NotImplementedError

    # -- leases ---------------------------------------------------------------------------

    def on_lost(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(session_id)`` when a heartbeat finds a lease taken over (the
        agent lets the session go at once); returns the unsubscribe."""
        self._lost_listeners.append(listener)

        def remove() -> None:
            if listener in self._lost_listeners:
                self._lost_listeners.remove(listener)

        return remove

    def holds(self, session_id: str) -> bool:
        """Whether this holder's lease on ``session_id`` is unbroken, as far as it knows
        (a loss shows at the next heartbeat or fenced write)."""
        return session_id in self._held

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
