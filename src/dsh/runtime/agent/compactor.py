"""When a session's history is compacted, and what happens around it.

:mod:`.compaction` is the policy and the model call; this runs it for a live session:
before a model request when the history nears the context window (``auto``), after the
provider refused it as too long (``overflow``), or when a client asks (``manual``). One
compaction per session at a time; ``before_compact`` and ``on_compact`` hooks around it,
and a ``context/compacted`` event in the session's log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from dsh.runtime.agent import compaction, events
from dsh.runtime.agent.lifecycle import Lifecycle
from dsh.runtime.agent.loop import Plan
from dsh.runtime.agent.session import Session
from dsh.runtime.agent.settings import AgentConfig

logger = logging.getLogger("dsh.agent")


def model_view(session: Session) -> list[dict[str, Any]]:
    """What the model would be sent of ``session``: its system message and history."""
    system = session.record.system
    return [*([system] if system is not None else []), *session.messages]


class Compactor:
    """Compacts live sessions' histories under ``config()``'s ``compact_at``/``compact_keep``."""

    def __init__(self, config: Callable[[], AgentConfig], lifecycle: Lifecycle) -> None:
        self._config = config
        self._lifecycle = lifecycle
        self._locks: dict[str, asyncio.Lock] = {}

    async def if_needed(self, session: Session, plan: Plan, turn: int) -> None:
        """Before a model request: compact when the history nears the context window.

        A failed summary is an ``error`` event and the request goes ahead uncompacted
        (the provider may still accept it; if not, its error ends the turn).
        """
        threshold = self._config().compact_at * plan.context_window
        if threshold <= 0 or compaction.estimate(model_view(session)) < threshold:
            return
        try:
            await self.compact(session, plan, "auto", turn)
        except Exception as exc:
            logger.warning("compaction of session %s failed", session.id, exc_info=True)
            session.emit(events.ERROR, {"message": f"compaction failed: {exc}",
                                        "source": {"kind": "compaction"}})

    async def for_overflow(self, session: Session, plan: Plan, turn: int) -> bool:
        """After the provider refused the history as too long: compact it now (reason
        ``overflow``). False when there was nothing to cut or the summary failed (an
        ``error`` event says which); the caller then ends the turn with a clear error."""
        try:
            done = await self.compact(session, plan, "overflow", turn)
        except Exception as exc:
            logger.warning("compaction of session %s failed", session.id, exc_info=True)
            session.emit(events.ERROR, {"message": f"compaction failed: {exc}",
                                        "source": {"kind": "compaction"}})
            return False
        return done is not None

    async def compact(self, session: Session, plan: Plan, reason: str,
                      turn: int | None) -> compaction.Compaction | None:
        """Summarise the older part of the history; None when there is nothing to cut.

        One compaction per session at a time; the cut replaces only the prefix, so
        messages a concurrent turn appends meanwhile stay.
        """
        async with self._locks.setdefault(session.id, asyncio.Lock()):
            messages = session.messages
            window = plan.context_window
            cut = compaction.split_point(messages, int(window * self._config().compact_keep))
            if cut == 0 and reason in ("manual", "overflow"):
                # the provider's count, not our estimate, said it is too long: cut back to
                # the running prompt at least
                cut = compaction.last_prompt(messages) or len(messages)
            if cut == 0 or (compaction.last_prompt(messages) < cut and not any(
                    m.get("role") == "assistant" for m in messages[:cut])):
                # Nothing to cut, or only the running turn's prompt: nothing to summarise.
                return None
            before = compaction.estimate(model_view(session))
            fire = self._lifecycle.fire
            await fire(session, "before_compact", turn=turn, payload={
                "reason": reason, "messageCount": len(messages), "removeCount": cut,
                "tokensBefore": before, "contextWindow": window})
            text = await compaction.summarise(
                plan.provider, session_id=session.id, model=plan.model,
                messages=messages[:cut], max_tokens=plan.max_tokens)
            summary = compaction.summary_message(text, cut)
            messages[:cut] = [summary]
            session.record.context_shown = events.shown_sections(messages)
            done = compaction.Compaction(reason, cut, len(messages) - 1, before,
                                         compaction.estimate(model_view(session)))
            session.emit(compaction.COMPACTED, done.data(summary, turn))
            await fire(session, "on_compact", turn=turn, message=text, payload={
                "reason": reason, "removedCount": done.removed, "keptCount": done.kept,
                "tokensBefore": done.tokens_before, "tokensAfter": done.tokens_after,
                "summary": text})
            return done
