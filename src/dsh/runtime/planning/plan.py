"""The ``tools-plan`` plugin: the session task list (``todo_write``) and plan mode.

``todo_write`` replaces the session's task list and emits it whole as a ``plan/update``
event ``{entries: [{content, status, priority?}]}`` (ACP ``plan`` updates, the web app's
plan panel); the event log is where the list is kept.

Plan mode (service ``modes``, see :mod:`.modes`): a client puts a session in mode
``plan`` (SDK ``session/mode/set``, ACP ``session/set_mode``, or the row's
``start_in_plan_mode``). Then the ``plan-mode`` guardrail refuses every mutating tool,
telling the model to call ``exit_plan_mode`` with its plan, and the ``plan-mode`` context
section reminds the model at the start of each turn. ``exit_plan_mode {plan}`` is asked
about (guardrail ``ask``): approved, the session returns to ``default``, a ``mode/update``
event says so (ACP ``current_mode_update``) and the tool tells the model to go ahead;
refused, the session stays in plan mode. With no client able to approve, the row's
``unattended_exit`` decides (``deny`` by default: the plan is then the turn's answer,
and the user switches the mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.runtime.kernel.guardrails import Decision
from dsh.runtime.kernel.plugin import (
    Capability,
    ContextRequest,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)
from dsh.runtime.planning.modes import DEFAULT, PLAN, SessionModes
from dsh.runtime.tools.base import ToolCall, ToolContext, ToolResult

PLAN_EVENT = "plan/update"
MODE_EVENT = "mode/update"
STATUSES = ("pending", "in_progress", "completed")
PRIORITIES = ("high", "medium", "low")
MAX_TODOS = 100
MAX_TODO_CHARS = 2000
MAX_PLAN_CHARS = 50000
_MARKS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}

PLAN_ON = ("Plan mode is on: tools that change files or run commands are refused. Explore "
           "with read-only tools and work out a plan, then call exit_plan_mode with the "
           "whole plan; the user approves it before anything changes.")
PLAN_OFF = "Plan mode is off: tools that change files may run, as the policy allows."


class TodoWrite:
    """Replaces the session's task list and shows it to the client."""

    name = "todo_write"
    description = (
        "Keep this session's task list: send the whole list every time (it replaces the "
        "previous one), each item with `content` and `status` (pending, in_progress, "
        "completed) and an optional `priority` (high, medium, low). Use it for work of "
        "several steps, marking an item in_progress when you start it and completed as "
        "soon as it is done. The user sees the list."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The complete task list, in order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "The task."},
                        "status": {"type": "string", "enum": list(STATUSES)},
                        "priority": {"type": "string", "enum": list(PRIORITIES)},
                    },
                    "required": ["content", "status"],
                },
            },
        },
        "required": ["todos"],
        "additionalProperties": False,
    }
    mutating = False  # the list is the session's, not the workspace's

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Check the list, emit ``plan/update`` with it, answer a short summary."""
        todos = args["todos"]
        if len(todos) > MAX_TODOS:
            return ToolResult(f"Error: {len(todos)} tasks; keep the list to {MAX_TODOS}",
                              is_error=True)
        entries = []
        for index, item in enumerate(todos):
            content = item["content"].strip()
            if not content:
                return ToolResult(f"Error: todos[{index}].content is empty", is_error=True)
            if len(content) > MAX_TODO_CHARS:
                return ToolResult(f"Error: todos[{index}].content is longer than "
                                  f"{MAX_TODO_CHARS} characters", is_error=True)
            entry = {"content": content, "status": item["status"]}
            if "priority" in item:
                entry["priority"] = item["priority"]
            entries.append(entry)
        ctx.emit(PLAN_EVENT, {"entries": entries})
        return ToolResult(summary(entries))


def summary(entries: list[dict[str, str]]) -> str:
    """The task list as the model reads it back: counts, then one line per task."""
    if not entries:
        return "Task list cleared."
    counts = {s: sum(1 for e in entries if e["status"] == s) for s in STATUSES}
    head = (f"Task list updated ({len(entries)} tasks: {counts['completed']} completed, "
            f"{counts['in_progress']} in progress, {counts['pending']} pending):")
    return "\n".join([head, *(f"{_MARKS[e['status']]} {e['content']}" for e in entries)])


class ExitPlanMode:
    """Presents the plan for approval; approved, the session leaves plan mode."""

    name = "exit_plan_mode"
    description = (
        "In plan mode only: present your finished plan (markdown) to the user for "
        "approval. If the user approves, plan mode ends and you carry out the plan; if "
        "not, you stay in plan mode: revise the plan or ask what to change."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"plan": {"type": "string", "description": "The plan to approve."}},
        "required": ["plan"],
        "additionalProperties": False,
    }
    mutating = False  # it changes the session's mode; the plan-mode guardrail asks

    def __init__(self, plugin: PlanTools) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Reached only once approved (or outside plan mode): leave plan mode."""
        modes = self._plugin.modes
        if modes.get(ctx.session_id) != PLAN:
            return ToolResult("Error: the session is not in plan mode, so there is nothing to "
                              "exit; go ahead with the work", is_error=True)
        modes.set(ctx.session_id, DEFAULT)
        ctx.emit(MODE_EVENT, {"mode": DEFAULT, "reason": "plan-approved"})
        return ToolResult("The user approved the plan. Plan mode is off: tools that change "
                          "files may run now. Carry out the plan.")


def _plan_problem(plan: Any) -> str | None:
    if not isinstance(plan, str) or not plan.strip():
        return "exit_plan_mode needs the plan: `plan` is empty"
    if len(plan) > MAX_PLAN_CHARS:
        return f"the plan is longer than {MAX_PLAN_CHARS} characters; summarise it"
    return None


class PlanTools(Plugin):
    """Plugin row ``tools-plan``: todo_write, exit_plan_mode, the plan-mode guardrail and
    context section; publishes service ``modes``."""

    manifest = Manifest(
        id="tools-plan",
        version=__version__,
        capabilities=frozenset({Capability.TOOL, Capability.GUARDRAIL, Capability.PROMPT,
                                Capability.SERVICE}),
        description="The session task list (todo_write) and plan mode (exit_plan_mode, a "
                    "guardrail refusing mutating tools while planning). Publishes 'modes'.",
        config_schema={
            "type": "object",
            "properties": {
                "start_in_plan_mode": {
                    "type": "boolean", "default": False,
                    "description": "New sessions start in plan mode."},
                "unattended_exit": {
                    "type": "string", "enum": ["deny", "allow"], "default": "deny",
                    "description": "The answer to exit_plan_mode when no client can approve."},
            },
            "additionalProperties": False,
        },
        provides=("modes",),
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self.modes = SessionModes(PLAN if config.get("start_in_plan_mode") else DEFAULT)

    def apply(self, reg: Registrar) -> None:
        """Register the tools, the guardrail, the context section and the service."""
        reg.tool(TodoWrite())
        reg.tool(ExitPlanMode(self))
        reg.guardrail("plan-mode", self.check)
        reg.context("plan-mode", self.section)
        reg.service("modes")

    async def start(self, rt: RuntimeContext) -> None:
        """Publish the modes for the protocol servers."""
        rt.publish("modes", self.modes)

    async def update(self, config: Mapping[str, Any]) -> bool:
        """A new start mode applies to sessions not seen yet; modes already set stay."""
        self.config = config
        self.modes.start = PLAN if config.get("start_in_plan_mode") else DEFAULT
        return True

    def check(self, call: ToolCall) -> tuple[Decision, str]:
        """The guardrail: in plan mode, mutating tools are refused and leaving is asked."""
        mode = self.modes.get(call.session_id)
        if call.name == ExitPlanMode.name:
            if mode != PLAN:
                return Decision.ALLOW, ""
            problem = _plan_problem(call.arguments.get("plan"))
            if problem is not None:
                return Decision.DENY, problem
            if call.can_ask:
                return Decision.ASK, "approve the plan to leave plan mode"
            if self.config["unattended_exit"] == "allow":
                return Decision.ALLOW, ""
            return Decision.DENY, ("no client can approve a plan here, so the session stays "
                                   "in plan mode: give the plan as your answer; the user "
                                   "switches the mode")
        if mode == PLAN and call.tool.mutating:
            return Decision.DENY, (f"plan mode: '{call.name}' may change files and is "
                                   "refused until the plan is approved; use read-only tools, "
                                   "then call exit_plan_mode with your plan")
        return Decision.ALLOW, ""

    def section(self, request: ContextRequest) -> str | None:
        """Tell the model it is planning, and again once it is not (it was told before)."""
        if self.modes.get(request.session_id) == PLAN:
            return PLAN_ON
        return PLAN_OFF if self.modes.was_planning(request.session_id) else None
