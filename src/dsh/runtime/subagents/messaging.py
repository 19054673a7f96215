"""Reaching running sub-agents: ``list_agents``, ``send_message``, ``interrupt_agent``.

The tools only see the calling session's sub-agents (:mod:`.registry`); another session's
agent id answers like an unknown one. A message goes to the child's own session inbox
(``session/prompt``), so it waits behind the running turn like any queued prompt; an
interrupt cancels the running turn only (``session/cancel``), and messages queued behind
it still run: that is the agent's cancel contract, unchanged for sub-agents.

``list_agents`` with ``scope: descendants`` adds what the children's runtimes announce
about their own sub-agents (``subagent.started``/``subagent.finished``): their session id
and status, nothing more, and only one level down. Deeper levels are not visible to this
runtime; with the shipped child profile (``sdk-minimal``) there are none.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from dsh.core.errors import DshError
from dsh.runtime.subagents.child import Child, Status
from dsh.runtime.subagents.registry import Registry, clip
from dsh.runtime.tools.base import ToolContext, ToolResult

_AGENT_ID = {"type": "string", "minLength": 1,
             "description": "The sub-agent's id (agent-N), as subagent or list_agents gave."}


def _unknown(agent_id: str) -> ToolResult:
    return ToolResult(f"Error: no sub-agent '{agent_id}' in this session (list_agents shows "
                      "this session's sub-agents)", is_error=True)


def _closed(child: Child) -> ToolResult:
    return ToolResult(f"Error: sub-agent {child.id} has {child.status.value}: its runtime is "
                      "closed and takes no more messages. Start a new sub-agent instead.",
                      is_error=True)


def _shown_cwd(parent_cwd: str, cwd: str) -> str:
    """The child's directory relative to the parent's when inside it, else absolute."""
    rel = os.path.relpath(cwd, os.path.realpath(parent_cwd))
    return cwd if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


class ListAgentsTool:
    """``list_agents {scope?}``: this session's sub-agents, as JSON."""

    name = "list_agents"
    description = (
        "List this session's sub-agents: id, description, status (running, idle, finished, "
        "failed), working directory, and the last answer of each. Idle ones can take "
        "messages (send_message). scope=descendants adds their own sub-agents, as far as "
        "they are known."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "scope": {"type": "string", "enum": ["children", "descendants"],
                      "default": "children",
                      "description": "children (default) or descendants."},
        },
        "additionalProperties": False,
    }
    mutating = False

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Describe each child (and, for descendants, the children's known sub-agents)."""
        agents: list[dict[str, Any]] = []
        for child in self._registry.children(ctx.session_id):
            entry: dict[str, Any] = {
                "id": child.id, "description": child.description,
                "status": child.status.value, "cwd": _shown_cwd(ctx.cwd, child.cwd),
                "background": child.background, "forked": child.forked}
            if child.stop_reason is not None:
                entry["lastTurn"] = child.stop_reason
            if child.error:
                entry["error"] = child.error
            if child.runs:
                entry["answer"] = clip(child.last_text)
            agents.append(entry)
            if args.get("scope") == "descendants":
                agents.extend({"id": g.session_id, "parent": child.id, "status": g.status}
                              for g in child.grandchildren.values())
        if not agents:
            return ToolResult("This session has no sub-agents.")
        return ToolResult(json.dumps({"agents": agents}, indent=2, ensure_ascii=False))


class SendMessageTool:
    """``send_message {agent_id, message}``: queue a message into a live sub-agent."""

    name = "send_message"
    description = (
        "Send a message to one of your running or idle sub-agents (by agent id). It is "
        "queued in the sub-agent's conversation and answered after its current turn; the "
        "answer comes like its first one (next turn, list_agents)."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "agent_id": _AGENT_ID,
            "message": {"type": "string", "minLength": 1,
                        "description": "What to tell the sub-agent."},
        },
        "required": ["agent_id", "message"],
        "additionalProperties": False,
    }
    # It sets a sub-agent to work (which may change files): a policy that refuses or asks
    # about mutating calls does so here too; it names no path, the child stays where it is.
    mutating = True
    path_arguments: tuple[str, ...] = ()

    def __init__(self, registry: Registry, bound: Callable[[], float],
                 trace: Callable[[str], Mapping[str, str] | None] = lambda _: None) -> None:
        self._registry = registry
        self._bound = bound
        self._trace = trace

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Queue the message on the child's session; a closed or unknown id is an error."""
        child = self._registry.find(ctx.session_id, args["agent_id"])
        if child is None:
            return _unknown(args["agent_id"])
        if child.status is Status.STARTING:
            return ToolResult(f"Error: sub-agent {child.id} is still starting; try again",
                              is_error=True)
        if child.status not in (Status.RUNNING, Status.IDLE):
            return _closed(child)
        was = child.status
        try:
            await child.prompt(args["message"], bound=self._bound(),
                               trace=self._trace(ctx.session_id))
        except (asyncio.TimeoutError, DshError) as exc:
            return ToolResult(f"Error: the message did not reach {child.id}: "
                              f"{exc or 'no answer in time'}", is_error=True)
        if was is Status.RUNNING:
            return ToolResult(f"Queued for {child.id}: it runs after its current turn.")
        return ToolResult(f"Sent to {child.id}, which was idle and is working on it now.")


class InterruptAgentTool:
    """``interrupt_agent {agent_id}``: cancel a sub-agent's running turn."""

    name = "interrupt_agent"
    description = (
        "Interrupt one of your sub-agents: its running turn is cancelled. Messages already "
        "queued for it still run afterwards; it stays available for send_message."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"agent_id": _AGENT_ID},
        "required": ["agent_id"],
        "additionalProperties": False,
    }
    mutating = False

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Cancel the child's running turn; idle is no error, closed or unknown is."""
        child = self._registry.find(ctx.session_id, args["agent_id"])
        if child is None:
            return _unknown(args["agent_id"])
        if child.status not in (Status.STARTING, Status.RUNNING, Status.IDLE):
            return _closed(child)
        if child.status is Status.IDLE:
            return ToolResult(f"Sub-agent {child.id} is idle: no turn to interrupt.")
        try:
            cancelled = await child.cancel()
        except DshError as exc:
            return ToolResult(f"Error: could not interrupt {child.id}: {exc}", is_error=True)
        if not cancelled:
            return ToolResult(f"Sub-agent {child.id} had no turn running to interrupt "
                              f"(status: {child.status.value}).")
        return ToolResult(f"Interrupted {child.id}'s running turn; messages queued for it "
                          "still run.")
