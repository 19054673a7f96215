"""Closing a turn a crashed runtime left open, so a restored session can continue.

A runtime killed mid-turn leaves a log that ends inside the turn: maybe an assistant
message whose tool calls never got results, an open step, no ``turn/end``. A provider
refuses such a history (every tool call needs its result), and a client waiting for
``turn/end`` would wait forever. On restore the agent appends what the turn would have
ended with had it been cancelled: ``NOT_RUN`` results, ``step/end``, and ``turn/end``
with reason ``error`` / code ``interrupted``. The events before stay untouched.
"""

from __future__ import annotations

from typing import Any

from dsh.runtime.agent import events
from dsh.runtime.agent.session import Session

INTERRUPTED = "interrupted"
NOTE = "Error: not run: the runtime stopped during the turn"


def open_turn(log: list[dict[str, Any]]) -> tuple[int, int | None] | None:
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


def unanswered_calls(session: Session) -> list[str]:
    """Ids of the last assistant message's tool calls that have no tool result."""
    messages = session.messages
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            answered = {m.get("toolCallId") for m in messages[index + 1:]}
            return [b["id"] for b in messages[index].get("content", ())
                    if b.get("type") == "tool-call" and b.get("id") not in answered]
    return []


def close_interrupted(session: Session) -> bool:
    """End the turn the log was left inside, if any; True when it did."""
    log = session.record.events
    found = open_turn(log)
    if found is None:
        return False
    turn, step = found
    call_seqs = {e["data"].get("callId"): e["seq"] for e in log if e["type"] == events.TOOL_CALL}
    for call_id in unanswered_calls(session):
        message = events.tool_message(call_id, NOTE, is_error=True)
        session.messages.append(message)
        data = events.placed(turn, step or 0, message)
        data["error"] = {"name": "ToolNotRunError", "code": "NOT_RUN"}
        extra = dict(events.APPEND)
        if call_id in call_seqs:
            extra["sourceEventSeqs"] = [call_seqs[call_id]]
        session.emit(events.TOOL_RESULT, data, extra)
    if step is not None:
        session.emit(events.STEP_END, events.step_data(turn, step))
    session.emit(events.TURN_END, events.turn_end(
        turn, "error", {"message": "the runtime stopped during this turn",
                        "code": INTERRUPTED}))
    return True
