"""Goals: one persistent objective per session, changed by compare-and-set.

A session has at most one *open* goal (``active`` or ``blocked``); finished ones
(``completed``, ``abandoned``) stay as history, and ``create_goal`` then starts the next
(``g-1``, ``g-2`` ... per session). Every change the model makes names the ``revision``
it read and bumps it, so a change based on a stale read is refused instead of silently
overwriting another (a second client, or another runtime on the same home).

:func:`change` is the whole state machine, pure; the tables only store. This module
holds the one for a tree without a ``sessions`` service, :class:`MemoryGoals`, where goals
end with the runtime; every session store offers its own table through ``goals()``
(``sessions-sqlite``: :mod:`dsh.runtime.sessions.goals`, ``sessions-postgres``:
:mod:`dsh.runtime.sessions.postgres.goals`), so goals live where their tables are, and
the stores import this model, never the other way round.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from dsh.core.errors import InvalidArgumentError

ACTIVE, BLOCKED, COMPLETED, ABANDONED = "active", "blocked", "completed", "abandoned"
OPEN = frozenset({ACTIVE, BLOCKED})
ACTIONS = ("update", "complete", "block", "resume", "abandon")
MAX_OBJECTIVE_CHARS = 4000
MAX_REASON_CHARS = 2000


class GoalError(InvalidArgumentError):
    """A goal request the model must fix; the message is written for the model."""


class Goal(NamedTuple):
    """One goal of one session, as stored."""

    session_id: str
    id: str
    number: int
    revision: int
    objective: str
    status: str
    max_rounds: int
    rounds_used: int = 0
    blocked_reason: str | None = None

    def view(self) -> dict[str, Any]:
        """What the tools answer and ``goal/update`` events carry (the tools' spelling)."""
        return {"goal_id": self.id, "revision": self.revision, "status": self.status,
                "objective": self.objective, "max_goal_rounds": self.max_rounds,
                "rounds_used": self.rounds_used, "blocked_reason": self.blocked_reason}


def text_field(value: Any, name: str, limit: int) -> str:
    """A required, non-blank text argument within ``limit`` characters."""
    if not isinstance(value, str) or not value.strip():
        raise GoalError(f"{name} must be a non-empty string")
    if len(value) > limit:
        raise GoalError(f"{name} is {len(value)} characters; keep it under {limit}")
    return value.strip()


def change(goal: Goal, action: str, *, revision: int, objective: str | None = None,
           max_rounds: int | None = None, blocked_reason: str | None = None) -> Goal:
    """``goal`` after the model's ``action``; GoalError saying why it cannot be done.

    ``update`` takes ``objective`` and/or ``max_rounds``; ``block`` needs
    ``blocked_reason``; ``resume`` unblocks; ``complete`` and ``abandon`` finish the goal.
    An argument the action does not use is refused rather than ignored.
    """
    if action not in ACTIONS:
        raise GoalError(f"unknown action {action!r} (actions: {', '.join(ACTIONS)})")
    if goal.status not in OPEN:
        raise GoalError(f"goal {goal.id} is {goal.status} and cannot change; "
                        "create_goal starts a new one")
    if revision != goal.revision:
        raise GoalError(f"goal {goal.id} is at revision {goal.revision}, not {revision}: it "
                        "changed since you read it; call get_goal and decide again")
    if action != "update" and (objective is not None or max_rounds is not None):
        raise GoalError(f"objective and max_goal_rounds go with action 'update', not "
                        f"'{action}'")
    if action != "block" and blocked_reason is not None:
        raise GoalError(f"blocked_reason goes with action 'block', not '{action}'")
    fields: dict[str, Any] = {}
    if action == "update":
        if objective is None and max_rounds is None:
            raise GoalError("action 'update' needs objective or max_goal_rounds")
        if objective is not None:
            fields["objective"] = text_field(objective, "objective", MAX_OBJECTIVE_CHARS)
        if max_rounds is not None:
            fields["max_rounds"] = max_rounds
    elif action == "block":
        fields = {"status": BLOCKED, "blocked_reason": text_field(
            blocked_reason, "blocked_reason", MAX_REASON_CHARS)}
    elif action == "resume":
        if goal.status != BLOCKED:
            raise GoalError(f"goal {goal.id} is not blocked; only a blocked goal resumes")
        fields = {"status": ACTIVE, "blocked_reason": None}
    else:
        fields = {"status": COMPLETED if action == "complete" else ABANDONED}
    return goal._replace(revision=goal.revision + 1, **fields)


class GoalTable(Protocol):
    """Where goals are kept; every method is quick (one small query)."""

    persistent: bool

    def latest(self, session_id: str) -> Goal | None:
        """The session's newest goal, whatever its status."""
        ...

    def find(self, session_id: str, goal_id: str) -> Goal | None:
        """The session's goal ``goal_id``."""
        ...

    def create(self, session_id: str, objective: str, max_rounds: int) -> Goal:
        """A new active goal at revision 1; GoalError while another one is open."""
        ...

    def replace(self, old: Goal, new: Goal) -> bool:
        """Store ``new`` if the goal is still at ``old.revision``; False if it moved on."""
        ...

    def bump_round(self, goal: Goal) -> Goal:
        """Count one more round of an active goal with rounds left; returns the goal now."""
        ...


def open_goal_error(goal: Goal) -> GoalError:
    """The refusal of a second open goal (every goal table words it the same)."""
    return GoalError(f"this session already has goal {goal.id} ({goal.status}, revision "
                     f"{goal.revision}); complete or abandon it with update_goal first")


class MemoryGoals:
    """Goals kept in this process, for a tree without the ``sessions`` service."""

    persistent = False

    def __init__(self) -> None:
        self._goals: dict[str, list[Goal]] = {}

    def latest(self, session_id: str) -> Goal | None:
        """The session's newest goal."""
        goals = self._goals.get(session_id)
        return goals[-1] if goals else None

    def find(self, session_id: str, goal_id: str) -> Goal | None:
        """The session's goal ``goal_id``."""
        return next((g for g in self._goals.get(session_id, ()) if g.id == goal_id), None)

    def create(self, session_id: str, objective: str, max_rounds: int) -> Goal:
        """A new active goal, unless one is open."""
        goals = self._goals.setdefault(session_id, [])
        if goals and goals[-1].status in OPEN:
            raise open_goal_error(goals[-1])
        goal = Goal(session_id, f"g-{len(goals) + 1}", len(goals) + 1, 1, objective, ACTIVE,
                    max_rounds)
        goals.append(goal)
        return goal

    def replace(self, old: Goal, new: Goal) -> bool:
        """Compare-and-set on the revision."""
        goals = self._goals.get(old.session_id, [])
        for index, goal in enumerate(goals):
            if goal.id == old.id:
                if goal.revision != old.revision:
                    return False
                goals[index] = new._replace(rounds_used=goal.rounds_used)
                return True
        return False

    def bump_round(self, goal: Goal) -> Goal:
        """One more round, if the goal is active with rounds left."""
        current = self.find(goal.session_id, goal.id) or goal
        if current.status != ACTIVE or current.rounds_used >= current.max_rounds:
            return current
        bumped = current._replace(rounds_used=current.rounds_used + 1)
        goals = self._goals[goal.session_id]
        goals[goals.index(current)] = bumped
        return bumped
