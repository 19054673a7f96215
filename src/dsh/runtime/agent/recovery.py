"""Closing a turn a crashed runtime left open, so a restored session can continue.

A runtime killed mid-turn leaves a log that ends inside the turn: maybe an assistant
message whose tool calls never got results, an open step, no ``turn/end``. A provider
refuses such a history (every tool call needs its result), and a client waiting for
``turn/end`` would wait forever. What ends it is what the turn would have ended with had
it been cancelled: ``NOT_RUN`` results, ``step/end``, and ``turn/end`` with reason
``error`` / code ``interrupted``. The events before stay untouched.

:func:`closing` computes those events from the log alone, so the two places that close
such a turn write the same ones: the agent restoring the session
(:func:`close_interrupted`), and a store asked for the log of a session whose holder is
known dead (:meth:`dsh.runtime.sessions.tracking.Tracking.close_abandoned`), under the
lease it takes for that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsh.runtime.agent import events
from dsh.runtime.agent.session import Session

INTERRUPTED = "interrupted"
NOTE = "Error: not run: the runtime stopped during the turn"
MESSAGE = "the runtime stopped during this turn"

Closing = tuple[str, dict[str, Any], dict[str, Any]]
"""One event that ends an interrupted turn: ``(type, data, extra members)``."""


def open_turn(log: Sequence[dict[str, Any]]) -> tuple[int, int | None] | None:
    """``(turn, open step or None)`` when the log ends inside a turn, else None."""
    turn: int | None = None
    step: int | None = None
    for event in log:
        kind, data = event["type"], event.get("data", {})
        if kind == events.TURN_START:
            turn, step = int(data["turn"]), None
        elif kind == events.TURN_END:
            turn = step = None
        elif kind == events.STEP_START:
            step = int(data["step"])
        elif kind == events.STEP_END:
            step = None
    return None if turn is None else (turn, step)


def unanswered_calls(log: Sequence[dict[str, Any]]) -> list[tuple[str, int | None]]:
    """The tool calls of the log's last assistant message that have no tool result after
    it, each ``(call id, seq of its tool/call event or None)``, in the message's order."""
    answered: set[Any] = set()
    for index in range(len(log) - 1, -1, -1):
        event = log[index]
        message = event.get("data", {}).get("message")
        if not isinstance(message, dict):
            continue
        if event["type"] == events.TOOL_RESULT:
            answered.add(message.get("toolCallId"))
        elif event["type"] == events.ASSISTANT_MESSAGE:
            calls = [b["id"] for b in message.get("content", ())
                     if b.get("type") == "tool-call" and b.get("id") not in answered]
            seqs = {e["data"].get("callId"): e["seq"] for e in log[index:]
                    if e["type"] == events.TOOL_CALL}
            return [(call_id, seqs.get(call_id)) for call_id in calls]
    return []


def closing(log: Sequence[dict[str, Any]]) -> list[Closing]:
    """The events that end the turn ``log`` was left inside, in order; empty when it ends
    outside a turn. ``log`` may be the whole log or its tail from the open turn's
    ``turn/start``."""
    found = open_turn(log)
    if found is None:
        return []
    turn, step = found
    out: list[Closing] = []
    for call_id, call_seq in unanswered_calls(log):
        data = events.placed(turn, step or 0, events.tool_message(call_id, NOTE,
                                                                  is_error=True))
        data["error"] = {"name": "ToolNotRunError", "code": "NOT_RUN"}
        extra: dict[str, Any] = dict(events.APPEND)
        if call_seq is not None:
            extra["sourceEventSeqs"] = [call_seq]
        out.append((events.TOOL_RESULT, data, extra))
    if step is not None:
        out.append((events.STEP_END, events.step_data(turn, step), {}))
    out.append((events.TURN_END, events.turn_end(turn, "error", {
        "message": MESSAGE, "code": INTERRUPTED}), {}))
    return out


def closing_events(log: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`closing` as stored events, numbered on from the last event of ``log``."""
    start = int(log[-1]["seq"]) + 1 if log else 0
    return [events.event(kind, start + n, data, extra)
            for n, (kind, data, extra) in enumerate(closing(log))]


def close_interrupted(session: Session) -> bool:
    """End the turn the session's log was left inside, if any (its messages gain the
    ``NOT_RUN`` results); True when it did."""
    ends = closing(session.record.events)
    for kind, data, extra in ends:
        if kind == events.TOOL_RESULT:
            session.messages.append(dict(data["message"]))
        session.emit(kind, data, extra)
    return bool(ends)
