"""Where sessions persist: a two-method interface, and the in-memory store behind it.

The agent saves a :class:`~dsh_runtime.agent.session.SessionRecord` after every turn and
when it closes, and loads one on ``resume`` of a session it does not hold live. That is the
whole contract, so the SQLite service (``$DSH_HOME/sessions.db``) can replace
:class:`MemorySessionStore` without the agent changing.
"""

from __future__ import annotations

import copy
from typing import Protocol

from dsh_runtime.agent.session import SessionRecord


class SessionStore(Protocol):
    """Persistence for session records, keyed by session id."""

    def save(self, record: SessionRecord) -> None:
        """Store ``record``, replacing any earlier version of the same session."""
        ...

    def load(self, session_id: str) -> SessionRecord | None:
        """The stored record of ``session_id``, or None when there is none."""
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
