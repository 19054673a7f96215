"""The sessions in this runtime's memory, by id: held under its lease, or parked.

A session becomes live by being created (a new id, in a directory) or restored from the
store (leased first, then loaded, so no other runtime can add to its log after it is
read); either way it is saved at once and its ``session_start`` hooks fire. Whether a
session is still this runtime's, when its lease is given back and how a parked one is
taken back is the leases' business (:mod:`.leasing`): every lookup goes through them.
"""

from __future__ import annotations

import os
from typing import Any

from dsh.core.errors import InvalidArgumentError, SessionNotFoundError
from dsh.runtime.agent import recovery
from dsh.runtime.agent.journal import Journal
from dsh.runtime.agent.leasing import Holdings
from dsh.runtime.agent.lifecycle import Lifecycle
from dsh.runtime.agent.session import Session, SessionRecord, Status


class SessionTable:
    """``sessions`` (shared with ``holdings``) opened over ``journal``'s store; a session
    created without a directory works in ``default_cwd``."""

    def __init__(self, sessions: dict[str, Session], holdings: Holdings, journal: Journal,
                 lifecycle: Lifecycle, *, default_cwd: str) -> None:
        self._sessions = sessions
        self.holdings = holdings
        self._journal = journal
        self._lifecycle = lifecycle
        self._default_cwd = default_cwd

    def live(self, session_id: str) -> Session | None:
        """The session in memory here (see :meth:`.leasing.Holdings.live`), or None."""
        return self.holdings.live(session_id)

    def get(self, session_id: str) -> Session:
        """The session in memory here (held or parked: to read it); SessionNotFoundError
        otherwise."""
        session = self.holdings.live(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        return session

    def find(self, session_id: str) -> Session | None:
        """The session in the table, its lease unchecked (to report on it, not to run it)."""
        return self._sessions.get(session_id)

    def all(self) -> list[Session]:
        """Every session in the table."""
        return list(self._sessions.values())

    async def confirmed(self, session_id: str) -> Session | None:
        """The session, held here under a lease just confirmed, taken back from parked,
        or restored from the store; None when the store does not know it (before work
        that writes)."""
        parked = self._sessions.get(session_id)
        if parked is not None and parked.parked is not None:
            if await self.holdings.take_back(parked):
                self.holdings.settle(parked)
                return parked
            return await self.restore(session_id)
        return self.holdings.live(session_id, confirm=True) or await self.restore(session_id)

    async def create(self, session_id: str, cwd: str | None) -> Session:
        """A new session in ``cwd`` (absolute, existing; default the launch's)."""
        path = os.path.abspath(cwd or self._default_cwd)
        if not os.path.isdir(path):
            raise InvalidArgumentError(f"not a directory: {path}")
        self._journal.store.acquire(session_id)  # a runtime racing to create it: busy
        return await self._open(SessionRecord(session_id, path), resumed=False)

    async def restore(self, session_id: str) -> Session | None:
        """Lease, then load (so no other runtime can add to the log after it is read);
        None when the store does not know the session."""
        store = self._journal.store
        store.acquire(session_id)
        record = store.load(session_id)
        if record is None:
            self.holdings.release(session_id)
            return None
        session = await self._open(record, resumed=True)
        if recovery.close_interrupted(session):
            store.save(session.record)
        return session

    def listing(self, *, session_id: str | None = None, workspace: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        """The listing entries (:func:`.summary.entry`) of live and stored sessions, sorted
        by id, from the store's summaries: no log is read.

        ``status`` is ``running`` for a session running here, else ``idle`` (a stored
        session, or one another runtime runs: a prompt or ``resume`` restores it or
        answers busy); a live session's ``cwd`` is its current one.

        Narrowed (each filter the store's own query): ``session_id`` that session only,
        ``workspace`` the sessions of that workspace root (a real path), ``limit`` the
        ``limit`` updated last, newest first (a picker's page, ``--continue``'s one).
        """
        store = self._journal.store
        if session_id is not None:
            one = store.summary(session_id)
            stored = [] if one is None or workspace not in (None, one["workspace"]) else [one]
        else:
            stored = store.summaries(workspace=workspace, newest_first=limit is not None,
                                     limit=limit)
        found: dict[str, dict[str, Any]] = {}
        for entry in stored:
            entry.pop("profile", None)
            entry["status"] = Status.IDLE.value
            found[entry["sessionId"]] = entry
        for live_id, session in self._sessions.items():
            live = found.get(live_id)
            if live is not None:
                live["status"], live["cwd"] = session.status.value, session.cwd
            elif limit is None and session_id in (None, live_id) and workspace in (
                    None, session.root):  # not stored (yet): folded from its log
                found[live_id] = session.summary()
        if limit is not None:
            return list(found.values())  # the store's order: newest first
        return [found[k] for k in sorted(found)]

    def known(self, session_id: str) -> bool:
        """Whether ``session_id`` is live here or stored (one lookup, not a listing)."""
        return session_id in self._sessions or self._journal.store.version(
            session_id) is not None

    async def _open(self, record: SessionRecord, *, resumed: bool) -> Session:
        session = Session(record, self._journal.notify, self.holdings.settle)
        self._sessions[session.id] = session
        try:
            self._journal.store.save(record)
        except BaseException:
            del self._sessions[session.id]
            self.holdings.release(session.id)
            raise
        await self._lifecycle.fire(session, "session_start", payload={
            "cwd": record.cwd, "root": record.root, "resumed": resumed})
        self.holdings.settle(session)
        return session
