"""The sub-agents of every parent session: ids, limits, reports, and closing them.

Rules the tools rely on:

- **Ids** are ``agent-N``, unique for the life of the runtime process (a module counter,
  so a row replaced by a reload never hands out an id the model already saw), and
  predictable, so a scripted model can name them.
- **Sessions own their sub-agents.** An id from another session answers exactly like an
  unknown one, so one session cannot reach another's sub-agents.
- **Bounded.** At most ``max_agents`` live sub-agents per session (starting, running or
  idle): starting one more closes the session's longest-idle one, and is refused when all
  are running. At most :data:`MAX_RECORDS` records are kept; the oldest closed ones go.
- **Reports.** When a background sub-agent's queue drains (or its runtime dies) a report
  is queued for its session; the ``subagents`` context section hands the reports to the
  model at the start of its next turn, once each.
- **Lifetime.** Sub-agents live until the parent session ends (``session_end``), the
  row is disposed, or they are closed to make room; closing kills the child's whole
  process group, and ``subagent.finished`` is announced once it is gone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from dsh.core.errors import DshError
from dsh.runtime.subagents.child import LIVE, Child, Status

logger = logging.getLogger("dsh.subagent")

MAX_RECORDS = 32
"""Sub-agent records kept per session (live ones are never dropped)."""
REPORT_CHARS = 4000
"""How much of a sub-agent's answer a report or ``list_agents`` shows."""

_ids = itertools.count(1)

Finished = Callable[[Child, str], None]
"""``finished(child, outcome)``: called once a child's runtime is gone."""
Changed = Callable[[Child], None]
"""``changed(child)``: a live child's status changed (running, idle, failed)."""


class LimitReachedError(DshError):
    """No room for another sub-agent; the message is written for the model."""


class Registry:
    """Sub-agents by parent session; ``finished`` hears of every closed one, ``changed``
    of every status change while it lives."""

    def __init__(self, finished: Finished, changed: Changed) -> None:
        self._children: dict[str, dict[str, Child]] = {}
        self._reports: dict[str, list[str]] = {}
        self._closing: dict[Child, asyncio.Task[None]] = {}
        self._finished = finished
        self._changed = changed

    # -- records --------------------------------------------------------------------------

    async def add(self, parent: str, *, description: str, cwd: str, background: bool,
                  forked: bool, max_agents: int) -> Child:
        """A new child record for ``parent``, after making room (or LimitReachedError)."""
        children = self._children.setdefault(parent, {})
        live = [c for c in children.values() if c.status in LIVE]
        if len(live) >= max_agents:
            idle = [c for c in live if c.status is Status.IDLE]
            if not idle:
                raise LimitReachedError(
                    f"{len(live)} sub-agents of this session are still running (the limit "
                    f"is {max_agents}): wait for one, or interrupt it with interrupt_agent")
            await self.close(idle[0])
        closed = [k for k, c in children.items() if c.status not in LIVE]
        for key in closed[:max(len(children) - MAX_RECORDS + 1, 0)]:
            del children[key]
        child = Child(f"agent-{next(_ids)}", parent, description, cwd, background, forked,
                      on_settled=self._settled, on_status=self._changed)
        children[child.id] = child
        return child

    def find(self, parent: str, agent_id: str) -> Child | None:
        """The child ``agent_id`` of ``parent``, or None (also for another session's)."""
        return self._children.get(parent, {}).get(agent_id)

    def children(self, parent: str) -> list[Child]:
        """``parent``'s children, oldest first."""
        return list(self._children.get(parent, {}).values())

    def take_reports(self, parent: str) -> list[str]:
        """The reports not yet shown to ``parent``'s model (and forget them)."""
        return self._reports.pop(parent, [])

    # -- closing --------------------------------------------------------------------------

    async def close(self, child: Child) -> None:
        """Close ``child`` once (later callers wait for the same close)."""
        task = self._closing.get(child)
        if task is None:
            task = self._closing[child] = asyncio.ensure_future(self._close(child))
        await asyncio.shield(task)

    async def end_session(self, parent: str) -> None:
        """Close every child of ``parent`` (the parent session ended)."""
        children = [c for c in self._children.get(parent, {}).values() if c.status in LIVE]
        await asyncio.gather(*(self.close(c) for c in children), return_exceptions=True)
        self._reports.pop(parent, None)

    async def close_all(self) -> None:
        """Close every child of every session (the row is disposed)."""
        await asyncio.gather(*(self.end_session(p) for p in list(self._children)),
                             return_exceptions=True)
        pending = [t for t in self._closing.values() if not t.done()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _close(self, child: Child) -> None:
        outcome = "error"
        try:
            outcome = await child.close()
        except Exception:
            logger.warning("closing sub-agent %s failed", child.id, exc_info=True)
        finally:
            self._finished(child, outcome)

    def _settled(self, child: Child) -> None:
        """A child's queue drained or its runtime died: report it if it runs unattended."""
        if not child.background:
            return
        if child.status is Status.FAILED:
            line = f"- {child.id} ({child.description}) failed: {child.error}"
        else:
            how = "" if child.stop_reason == "completed" else f" (its last turn ended: " \
                f"{child.stop_reason}{': ' + child.error if child.error else ''})"
            line = (f"- {child.id} ({child.description}) is idle: run {child.runs} is "
                    f"done{how}. Its answer:\n{clip(child.last_text)}")
        self._reports.setdefault(child.parent, []).append(line)


def clip(text: str, limit: int = REPORT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters]"
