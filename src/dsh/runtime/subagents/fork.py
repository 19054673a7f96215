"""What a forked sub-agent starts from: the parent's conversation, made whole.

``subagent_fork`` runs in the middle of the parent's step, so the parent's history ends
with the assistant message that made the call, and that call (with any calls after it in
the same message) has no result yet. A provider refuses a tool call without a result, so
the copy answers each open call: the fork call with a note telling the child who it is,
any other with "not run here". The child's own task then follows as its first prompt.
"""

from __future__ import annotations

from typing import Any

from dsh.runtime.agent import events

FORK_NOTE = ("You are now a forked sub-agent: the conversation up to here is your parent's, "
             "copied. Your parent carries on separately. Your own task is the next message; "
             "your final answer goes back to your parent.")
NOT_RUN = "Error: not run in the fork (the parent agent runs it)"


def fork_history(history: list[dict[str, Any]], tool_name: str) -> list[dict[str, Any]]:
    """``history`` (a copy the caller owns) with every open tool call answered."""
    answered = {m.get("toolCallId") for m in history if m.get("role") == "tool"}
    opened: list[dict[str, Any]] = []
    for message in history:
        if message.get("role") == "assistant":
            opened = [b for b in message.get("content", ())
                      if b.get("type") == "tool-call" and b.get("id") not in answered]
    for block in opened:
        fork = block.get("name") == tool_name
        history.append(events.tool_message(block["id"], FORK_NOTE if fork else NOT_RUN,
                                           is_error=not fork))
    return history
