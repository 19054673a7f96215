"""Goals in SQLite: the ``goals`` table of ``sessions.db``, for ``sessions-sqlite``.

The model and its rules (:class:`~dsh.runtime.planning.goalstore.Goal`, the state machine
:func:`~dsh.runtime.planning.goalstore.change`) are the planning layer's; this table only
stores them, on the store's own connection, as
:mod:`dsh.runtime.sessions.postgres.goals` does for PostgreSQL.
"""

from __future__ import annotations

import sqlite3
import time

from dsh.runtime.planning.goalstore import ACTIVE, OPEN, Goal, open_goal_error
from dsh.runtime.sessions.workspaces import transaction

_COLUMNS = ("session_id, id, number, revision, objective, status, max_rounds, rounds_used, "
            "blocked_reason")


def _now() -> int:
    return int(time.time() * 1000)


class SqliteGoals:
    """Goals in the ``goals`` table of ``sessions.db``, on the sessions store's connection.

    Used from the runtime's loop thread, like the store. Creating checks for an open goal
    and inserts in one immediate transaction, and ``replace`` is an ``UPDATE ... WHERE
    revision = ?``, so two runtimes on one home cannot both win.
    """

    persistent = True

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def latest(self, session_id: str) -> Goal | None:
        """The session's newest goal."""
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM goals WHERE session_id = ? "
                                 "ORDER BY number DESC LIMIT 1", (session_id,)).fetchone()
        return None if row is None else Goal(*row)

    def find(self, session_id: str, goal_id: str) -> Goal | None:
        """The session's goal ``goal_id``."""
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM goals WHERE session_id = ? AND "
                                 "id = ?", (session_id, goal_id)).fetchone()
        return None if row is None else Goal(*row)

    def create(self, session_id: str, objective: str, max_rounds: int) -> Goal:
        """A new active goal, unless one is open (checked inside the transaction)."""
        with transaction(self._conn):
            last = self.latest(session_id)
            if last is not None and last.status in OPEN:
                raise open_goal_error(last)
            number = 1 if last is None else last.number + 1
            goal = Goal(session_id, f"g-{number}", number, 1, objective, ACTIVE, max_rounds)
            now = _now()
            self._conn.execute(
                f"INSERT INTO goals ({_COLUMNS}, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*goal, now, now))
        return goal

    def replace(self, old: Goal, new: Goal) -> bool:
        """Compare-and-set on the revision; the round count is the runtime's, left alone."""
        cursor = self._conn.execute(
            "UPDATE goals SET revision = ?, objective = ?, status = ?, max_rounds = ?, "
            "blocked_reason = ?, updated_at = ? WHERE session_id = ? AND id = ? AND "
            "revision = ?",
            (new.revision, new.objective, new.status, new.max_rounds, new.blocked_reason,
             _now(), old.session_id, old.id, old.revision))
        return cursor.rowcount == 1

    def history(self, session_id: str) -> list[Goal]:
        """Every goal of the session, oldest first (``dsh sessions export``)."""
        return [Goal(*row) for row in self._conn.execute(
            f"SELECT {_COLUMNS} FROM goals WHERE session_id = ? ORDER BY number",
            (session_id,))]

    def put(self, goal: Goal) -> None:
        """Store ``goal`` as it is, replacing the same id (``dsh sessions import``)."""
        now = _now()
        self._conn.execute(
            f"INSERT INTO goals ({_COLUMNS}, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, id) DO UPDATE "
            "SET number = excluded.number, revision = excluded.revision, "
            "objective = excluded.objective, status = excluded.status, "
            "max_rounds = excluded.max_rounds, rounds_used = excluded.rounds_used, "
            "blocked_reason = excluded.blocked_reason, updated_at = excluded.updated_at",
            (*goal, now, now))

    def bump_round(self, goal: Goal) -> Goal:
        """One more round, if the goal is active with rounds left (one UPDATE)."""
        self._conn.execute(
            "UPDATE goals SET rounds_used = rounds_used + 1, updated_at = ? WHERE "
            "session_id = ? AND id = ? AND status = ? AND rounds_used < max_rounds",
            (_now(), goal.session_id, goal.id, ACTIVE))
        return self.find(goal.session_id, goal.id) or goal
