"""Where sessions persist: a two-method interface, and the in-memory store behind it.

The agent saves a :class:`~dsh_runtime.agent.session.SessionRecord` after every turn and
when it closes, appends every event as it is emitted (before any client sees it), and
loads a record on ``resume`` of a session it does not hold live; ``summaries`` lists what
is stored, for ``session/list``. The ``sessions`` service (``sessions-sqlite``, backed by
``$DSH_HOME/sessions.db``) implements the same interface; the agent uses it when it is
published and :class:`MemorySessionStore` otherwise.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

from dsh_runtime.agent.session import SessionRecord


class SessionStore(Protocol):
    """Persistence for session records, keyed by session id."""

    def save(self, record: SessionRecord) -> None:
        """Store ``record``, replacing any earlier version of the same session."""
        ...

    def load(self, session_id: str) -> SessionRecord | None:
        """The stored record of ``session_id``, or None when there is none."""
        ...

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Store one event of ``session_id`` now (a crash must not lose it)."""
        ...

    def summaries(self) -> list[dict[str, Any]]:
        """``{sessionId, cwd, title, ...}`` of every stored session, sorted by id."""
        ...


class MemorySessionStore:
    """Records kept in this process; copies in and out, as a real store would serialize."""

    def __init__(self) -> None:
        self._records: dict[str, SessionRecord] = {}

    def save(self, record: SessionRecord) -> None:
        """Keep a snapshot of ``record``."""
        self._records[record.session_id] = copy.deepcopy(record)

    def load(self, session_id: str) -> SessionRecord | None:
        """A fresh copy of the stored record, or None."""
        record = self._records.get(session_id)
        return None if record is None else copy.deepcopy(record)

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Nothing to do: in-memory records die with the process, so ``save`` suffices."""

    def summaries(self) -> list[dict[str, Any]]:
        """The stored sessions, sorted by id."""
        return [{"sessionId": r.session_id, "cwd": r.cwd, "title": r.title}
                for _, r in sorted(self._records.items())]
