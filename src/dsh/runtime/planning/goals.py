"""The ``tools-goals`` plugin: ``create_goal``, ``get_goal``, ``update_goal`` and the goal
context section.

A goal is an objective that outlives one turn: while it is active, the ``goal`` context
section shows it to the model at the start of every turn, with its revision and round
(``Goal g-1 (rev 2, round 3 of 10): ...``), and each such turn uses one of its
``max_goal_rounds``. Once the rounds are used up the section says so, asking the model
to finish, block or abandon it; once completed or abandoned the section stops. A blocked
goal is shown with its reason and uses no rounds.

Goals live in the ``sessions`` service's database (the ``goals`` table of
:mod:`dsh.runtime.sessions.goals`, or PostgreSQL's under ``sessions-postgres``; the model
is :mod:`.goalstore`) when the tree has that service; without it (a tree with no
sessions row) they are kept in memory and end with the runtime, and ``create_goal`` says
so in its answer. Every change is also a
``goal/update`` session event carrying the goal, so clients can show it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.core.errors import PluginError
from dsh.runtime.kernel.plugin import (
    Capability,
    ContextRequest,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)
from dsh.runtime.planning.goalstore import (
    ACTIONS,
    ACTIVE,
    BLOCKED,
    MAX_OBJECTIVE_CHARS,
    Goal,
    GoalError,
    GoalTable,
    MemoryGoals,
    change,
    text_field,
)
from dsh.runtime.tools.base import ToolContext, ToolResult

GOAL_EVENT = "goal/update"
SECTION = "goal"
_ROUNDS = {"type": "integer", "minimum": 1, "maximum": 1000,
           "description": "How many turns the goal may stay active before it must finish."}


def _answer(sentence: str, goal: Goal) -> ToolResult:
    return ToolResult(f"{sentence}\n{json.dumps({'goal': goal.view()}, ensure_ascii=False)}")


def section_text(goal: Goal, *, used_up: bool = False) -> str:
    """What the model is shown at the start of a turn about an open ``goal``.

    ``used_up``: the goal had no rounds left when this turn began.
    """
    name = f"Goal {goal.id}"
    how = (f"update_goal with goal_id {goal.id}, revision {goal.revision} and action "
           "'complete' once it is done, or 'block' with a blocked_reason if you cannot go on")
    if goal.status == BLOCKED:
        return (f"{name} (rev {goal.revision}) is blocked: {goal.blocked_reason}\n"
                f"Objective: {goal.objective}\nWhen the blocker is gone, call update_goal "
                f"with goal_id {goal.id}, revision {goal.revision} and action 'resume'.")
    if used_up:
        return (f"{name} (rev {goal.revision}, all {goal.max_rounds} rounds used): "
                f"{goal.objective}\nThe goal's round budget is used up: finish now. Call "
                f"{how}, or 'abandon'; the user may grant more rounds (max_goal_rounds).")
    return (f"{name} (rev {goal.revision}, round {goal.rounds_used} of {goal.max_rounds}): "
            f"{goal.objective}\nKeep working toward it. Call {how}.")


class _GoalTool:
    """What the three goal tools share: the plugin (its table) and no file access."""

    mutating = False  # goals change the sessions database, never the workspace

    def __init__(self, plugin: GoalTools) -> None:
        self._plugin = plugin

    def _emit(self, ctx: ToolContext, goal: Goal) -> None:
        ctx.emit(GOAL_EVENT, {"goal": goal.view()})


class CreateGoal(_GoalTool):
    """Starts the session's goal."""

    name = "create_goal"
    description = (
        "Set a persistent goal for this session: an objective that takes more than one "
        "turn. It is shown to you at the start of every turn until you complete it (or "
        "block or abandon it) with update_goal. A session has one open goal at a time. "
        "Do not use it for work that fits in this turn."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "objective": {"type": "string",
                          "description": "The concrete outcome that completes the goal."},
            "max_goal_rounds": _ROUNDS,
        },
        "required": ["objective"],
        "additionalProperties": False,
    }

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Create the goal, unless one is open already."""
        table = self._plugin.table
        try:
            objective = text_field(args["objective"], "objective", MAX_OBJECTIVE_CHARS)
            rounds = args.get("max_goal_rounds", self._plugin.config["default_max_goal_rounds"])
            goal = table.create(ctx.session_id, objective, rounds)
        except GoalError as exc:
            return ToolResult(f"Error: {exc}", is_error=True)
        self._emit(ctx, goal)
        note = "" if table.persistent else (" It is kept in memory only (this profile has no "
                                            "sessions database) and ends with the runtime.")
        return _answer(f"Created goal {goal.id} at revision 1; it will be shown to you each "
                       f"turn for up to {goal.max_rounds} rounds.{note}", goal)


class GetGoal(_GoalTool):
    """Reads the session's goal."""

    name = "get_goal"
    description = ("Read this session's current goal (its id, revision, status, objective "
                   "and rounds), e.g. before update_goal.")
    parameters: Mapping[str, Any] = {"type": "object", "properties": {},
                                     "additionalProperties": False}

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """The newest goal, or a note that there is none."""
        goal = self._plugin.table.latest(ctx.session_id)
        if goal is None:
            return ToolResult('This session has no goal (create_goal sets one).\n{"goal": null}')
        return _answer(f"Goal {goal.id} is {goal.status} at revision {goal.revision}.", goal)


class UpdateGoal(_GoalTool):
    """Changes the session's goal, compare-and-set on its revision."""

    name = "update_goal"
    description = (
        "Change this session's goal. `revision` must be the goal's current revision (from "
        "get_goal or the goal shown each turn); a stale one is refused. Actions: "
        "'complete' (done), 'block' (cannot go on; needs blocked_reason), 'resume' (a "
        "blocked goal), 'update' (new objective and/or max_goal_rounds), 'abandon'."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "goal_id": {"type": "string", "description": "The goal's id, e.g. g-1."},
            "revision": {"type": "integer", "minimum": 1,
                         "description": "The revision you last read."},
            "action": {"type": "string", "enum": list(ACTIONS)},
            "objective": {"type": "string", "description": "New objective (action update)."},
            "max_goal_rounds": _ROUNDS,
            "blocked_reason": {"type": "string",
                               "description": "What stops the work (action block)."},
        },
        "required": ["goal_id", "revision", "action"],
        "additionalProperties": False,
    }

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Apply the action if the goal exists and is still at ``revision``."""
        table = self._plugin.table
        goal_id = args["goal_id"]
        goal = table.find(ctx.session_id, goal_id)
        if goal is None:
            latest = table.latest(ctx.session_id)
            known = f"its goal is {latest.id}" if latest else "it has no goal (create_goal)"
            return ToolResult(f"Error: no goal {goal_id!r} in this session; {known}",
                              is_error=True)
        try:
            new = change(goal, args["action"], revision=args["revision"],
                         objective=args.get("objective"),
                         max_rounds=args.get("max_goal_rounds"),
                         blocked_reason=args.get("blocked_reason"))
        except GoalError as exc:
            return ToolResult(f"Error: {exc}", is_error=True)
        if not table.replace(goal, new):
            now = table.find(ctx.session_id, goal_id) or goal
            return ToolResult(f"Error: goal {goal_id} moved to revision {now.revision} "
                              "meanwhile; call get_goal and decide again", is_error=True)
        stored = table.find(ctx.session_id, goal_id) or new
        self._emit(ctx, stored)
        return _answer(f"Goal {stored.id} is {stored.status} at revision {stored.revision}.",
                       stored)


class GoalTools(Plugin):
    """Plugin row ``tools-goals``: the goal tools and the ``goal`` context section."""

    manifest = Manifest(
        id="tools-goals",
        version=__version__,
        capabilities=frozenset({Capability.TOOL, Capability.PROMPT}),
        description="Persistent session goals (create_goal, get_goal, update_goal) kept in "
                    "the sessions database and shown to the model each turn until done.",
        config_schema={
            "type": "object",
            "properties": {
                "default_max_goal_rounds": {
                    "type": "integer", "minimum": 1, "maximum": 1000, "default": 20,
                    "description": "Rounds of a goal created without max_goal_rounds."},
            },
            "additionalProperties": False,
        },
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._rt: RuntimeContext | None = None
        self._memory = MemoryGoals()

    def apply(self, reg: Registrar) -> None:
        """Register the tools and the context section."""
        reg.tool(CreateGoal(self))
        reg.tool(GetGoal(self))
        reg.tool(UpdateGoal(self))
        reg.context(SECTION, self.section)

    async def start(self, rt: RuntimeContext) -> None:
        """Remember the runtime: the ``sessions`` service is looked up at each use."""
        self._rt = rt

    @property
    def table(self) -> GoalTable:
        """The sessions database's goals when the tree has the service, else memory.

        Looked up at use, not at start, so a row without ``inject: [sessions]`` still
        finds the database, and a replaced sessions row's new store is used. Every store
        kind offers its own table through ``goals()`` (SQLite, PostgreSQL); only a store
        without one (a third-party row) leaves goals in memory.
        """
        if self._rt is not None:
            try:
                store = self._rt.service("sessions")
            except PluginError:
                store = None
            table = getattr(store, "goals", None)
            if table is not None:
                return table()
        return self._memory

    async def update(self, config: Mapping[str, Any]) -> bool:
        """A new default applies to goals created from now on."""
        self.config = config
        return True

    def section(self, request: ContextRequest) -> str | None:
        """The open goal, counting this turn as one of its rounds; None when there is none."""
        goal = self.table.latest(request.session_id)
        if goal is None or goal.status not in (ACTIVE, BLOCKED):
            return None
        used_up = goal.status == ACTIVE and goal.rounds_used >= goal.max_rounds
        if goal.status == ACTIVE and not used_up:
            goal = self.table.bump_round(goal)
        return section_text(goal, used_up=used_up)
