"""Guarded tool calls parked until someone decides: the web app's approver.

Installed with ``agent.set_approver``; each call a guardrail asks about waits here as a
pending approval until ``POST /api/approvals/{id}`` allows or denies it, the timeout
passes (deny), the turn is cancelled, or the server stops (deny). Every change is
announced as an ``approval`` notification on the session's event streams, so the page
can show and clear its buttons without polling.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from dsh.runtime.agent.toolrun import Approval

DECISIONS = ("allow", "deny")


class ApprovalBroker:
    """Pending approvals by id; ``ask`` is the agent's approver."""

    def __init__(self, timeout_s: float, notify: Callable[[str, dict[str, Any]], None]) -> None:
        self._timeout = timeout_s
        self._notify = notify
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future[Approval]]] = {}
        self._closed = False

    async def ask(self, session_id: str, tool_call: dict[str, Any]) -> Approval:
        """Park the call until a decision; anything but an explicit allow denies."""
        if self._closed:
            return Approval("deny")
        entry: dict[str, Any] = {"approvalId": uuid.uuid4().hex, "sessionId": session_id,
                                 "toolCall": dict(tool_call),
                                 "createdAt": int(time.time() * 1000)}
        future: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
        self._pending[entry["approvalId"]] = (entry, future)
        self._notify("approval", {**entry, "state": "pending"})
        state = "cancelled"
        try:
            answer = await asyncio.wait_for(future, self._timeout)
            state = answer.decision
            return answer
        except asyncio.TimeoutError:
            state = "expired"
            return Approval("deny")
        finally:
            self._pending.pop(entry["approvalId"], None)
            self._notify("approval", {**entry, "state": state})

    def pending(self) -> list[dict[str, Any]]:
        """Every approval still waiting, oldest first."""
        entries = [entry for entry, _ in self._pending.values()]
        return sorted(entries, key=lambda e: (e["createdAt"], e["approvalId"]))

    def decide(self, approval_id: str, answer: Approval) -> bool:
        """Answer one approval; False when it is unknown or already decided."""
        found = self._pending.get(approval_id)
        if found is None or found[1].done():
            return False
        found[1].set_result(answer)
        return True

    def close(self) -> None:
        """Deny everything still waiting; later asks are denied at once."""
        self._closed = True
        for _, future in list(self._pending.values()):
            if not future.done():
                future.set_result(Approval("deny"))
