"""Goals in PostgreSQL: the ``goals`` table of ``sessions-postgres``.

The same table and rules as :class:`~dsh.runtime.sessions.goals.SqliteGoals` (the
state machine, :func:`~dsh.runtime.planning.goalstore.change`, is shared and pure): a
change is an ``UPDATE ... WHERE revision = %s``, so two runtimes on two hosts cannot both
win; creating takes a transaction-level advisory lock on the session, so the check for an
open goal and the insert are one step even when the session has no goal row to lock yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dsh.runtime.planning.goalstore import ACTIVE, OPEN, Goal, open_goal_error

_COLUMNS = ("session_id, id, number, revision, objective, status, max_rounds, rounds_used, "
            "blocked_reason")


def _now() -> int:
    return int(time.time() * 1000)


class PostgresGoals:
    """Goals over the store's connection; ``run(fn)`` is the store's guarded call."""

    persistent = True

    def __init__(self, run: Callable[[Callable[[Any], Any]], Any], quoted_schema: str) -> None:
        self._run = run
        self._table = f"{quoted_schema}.goals"

    def latest(self, session_id: str) -> Goal | None:
        """The session's newest goal."""
        row = self._run(lambda c: c.execute(
            f"SELECT {_COLUMNS} FROM {self._table} WHERE session_id = %s ORDER BY number "
            "DESC LIMIT 1", (session_id,)).fetchone())
        return None if row is None else Goal(*row)

    def find(self, session_id: str, goal_id: str) -> Goal | None:
        """The session's goal ``goal_id``."""
        row = self._run(lambda c: c.execute(
            f"SELECT {_COLUMNS} FROM {self._table} WHERE session_id = %s AND id = %s",
            (session_id, goal_id)).fetchone())
        return None if row is None else Goal(*row)

    def create(self, session_id: str, objective: str, max_rounds: int) -> Goal:
        """A new active goal, unless one is open (checked under the session's lock)."""
        def create(c: Any) -> Goal:
            with c.transaction():
                c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                          (f"dsh.goals:{session_id}",))
                row = c.execute(f"SELECT {_COLUMNS} FROM {self._table} WHERE session_id = %s "
                                "ORDER BY number DESC LIMIT 1", (session_id,)).fetchone()
                last = None if row is None else Goal(*row)
                if last is not None and last.status in OPEN:
                    raise open_goal_error(last)
                number = 1 if last is None else last.number + 1
                goal = Goal(session_id, f"g-{number}", number, 1, objective, ACTIVE,
                            max_rounds)
                now = _now()
                c.execute(f"INSERT INTO {self._table} ({_COLUMNS}, created_at, updated_at) "
                          "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                          (*goal, now, now))
                return goal

        return self._run(create)

    def replace(self, old: Goal, new: Goal) -> bool:
        """Compare-and-set on the revision; the round count is the runtime's, left alone."""
        return self._run(lambda c: c.execute(
            f"UPDATE {self._table} SET revision = %s, objective = %s, status = %s, "
            "max_rounds = %s, blocked_reason = %s, updated_at = %s WHERE session_id = %s "
            "AND id = %s AND revision = %s",
            (new.revision, new.objective, new.status, new.max_rounds, new.blocked_reason,
             _now(), old.session_id, old.id, old.revision)).rowcount) == 1

    def bump_round(self, goal: Goal) -> Goal:
        """One more round, if the goal is active with rounds left (one UPDATE)."""
        row = self._run(lambda c: c.execute(
            f"UPDATE {self._table} SET rounds_used = rounds_used + 1, updated_at = %s WHERE "
            "session_id = %s AND id = %s AND status = %s AND rounds_used < max_rounds "
            f"RETURNING {_COLUMNS}", (_now(), goal.session_id, goal.id, ACTIVE)).fetchone())
        if row is not None:
            return Goal(*row)
        return self.find(goal.session_id, goal.id) or goal

    def history(self, session_id: str) -> list[Goal]:
        """Every goal of the session, oldest first (``dsh sessions export``)."""
        rows = self._run(lambda c: c.execute(
            f"SELECT {_COLUMNS} FROM {self._table} WHERE session_id = %s ORDER BY number",
            (session_id,)).fetchall())
        return [Goal(*row) for row in rows]

    def put(self, goal: Goal) -> None:
        """Store ``goal`` as it is, replacing the same id (``dsh sessions import``)."""
        now = _now()
        self._run(lambda c: c.execute(
            f"INSERT INTO {self._table} ({_COLUMNS}, created_at, updated_at) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (session_id, id) DO "
            "UPDATE SET number = excluded.number, revision = excluded.revision, "
            "objective = excluded.objective, status = excluded.status, "
            "max_rounds = excluded.max_rounds, rounds_used = excluded.rounds_used, "
            "blocked_reason = excluded.blocked_reason, updated_at = excluded.updated_at",
            (*goal, now, now)))
