"""Context compaction: older turns summarised through the model into one message.

A conversation that nears the provider's ``context_window`` would soon be refused, so the
agent replaces the model-facing history's older part with one summary message written by
the same provider. What the model is sent becomes ``[system, summary, recent messages]``;
the event log is append-only and keeps everything: the ``context/compacted`` event
carries the summary and how many leading messages it replaced (``removedCount``), so a
store rebuilding a session from its log applies the same replacement at the same point
(:func:`replay`) and a resumed session continues from the compacted history.

Where to cut: the most recent messages that fit in ``keep`` of the window stay verbatim,
and the cut never lands on a tool result, whose call would otherwise be summarised away
(a provider refuses a result without its call). Tokens are estimated (about four
characters a token, as the scripted provider counts), which is enough to decide *when*;
the provider's own count decides nothing here.

This module is the policy and the model call; the agent (:mod:`.service`) decides when to
run it, fires the hooks and emits the event.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from dsh.runtime.agent import events
from dsh.runtime.agent.assembly import Assembly
from dsh.runtime.providers.base import ModelRequest, Provider, Usage

COMPACTED = "context/compacted"
"""The event type: ``{reason, removedCount, keptCount, tokensBefore, tokensAfter,
summary: <message>}`` (``turn`` too when it happened inside one, ``usage`` when the
provider reported the summary call's)."""

SUMMARY_KIND = "compaction-summary"
INSTRUCTIONS = (
    "You compress conversations. Summarise the conversation below for the assistant that "
    "will continue it: the user's goals and requests, decisions made, facts learned, files "
    "and commands involved with their outcomes, and what remains to do. Be concise and "
    "factual; write only the summary."
)
RESULT_LIMIT = 2000
"""Characters of one tool result quoted in the summarisation request."""


def message_tokens(message: Mapping[str, Any]) -> int:
    """Estimated tokens of one message: its text and tool-call arguments, ~4 chars each."""
    size = 0
    for block in message.get("content", ()):
        size += len(block.get("text", "")) + len(block.get("arguments", ""))
        size += len(block.get("name", ""))
    return math.ceil(size / 4) + 4


def estimate(messages: Sequence[Mapping[str, Any]]) -> int:
    """Estimated tokens of a whole request's messages."""
    return sum(message_tokens(m) for m in messages)


def split_point(messages: Sequence[Mapping[str, Any]], keep_tokens: int) -> int:
    """Index of the first message kept verbatim (0: nothing to compact).

    The tail that fits in ``keep_tokens`` is kept, at least the last message, and the cut
    moves back over tool results so each kept result keeps its call.
    """
    index, used = len(messages), 0
    while index > 0 and used + message_tokens(messages[index - 1]) <= keep_tokens:
        index -= 1
        used += message_tokens(messages[index])
    index = min(index, len(messages) - 1)
    while index > 0 and messages[index].get("role") == "tool":
        index -= 1
    return max(index, 0)


def last_prompt(messages: Sequence[Mapping[str, Any]]) -> int:
    """Index of the last user prompt (0 when there is none): a manual compaction's cut
    when the whole history fits in the kept budget."""
    for index in range(len(messages) - 1, -1, -1):
        if (messages[index].get("role") == "user"
                and (messages[index].get("source") or {}).get("kind") == "user"):
            return index
    return 0


def transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages to summarise as plain text (earlier summaries included)."""
    lines = []
    for message in messages:
        role = message.get("role", "?")
        text = events.message_text(message)
        if role == "tool":
            if len(text) > RESULT_LIMIT:
                text = text[:RESULT_LIMIT] + " …[cut]"
            lines.append(f"[tool result] {text}")
            continue
        calls = [f"{b.get('name')}({b.get('arguments', '')})"
                 for b in message.get("content", ()) if b.get("type") == "tool-call"]
        line = f"[{role}] {text}".rstrip()
        if calls:
            line += " [called " + "; ".join(calls) + "]"
        lines.append(line)
    return "\n".join(lines)


def summary_message(text: str, removed: int) -> dict[str, Any]:
    """The message that stands in for ``removed`` earlier messages."""
    body = f"Summary of the earlier conversation ({removed} messages compacted):\n{text}"
    return {"role": "user", "content": [events.text_block(body)],
            "source": {"kind": SUMMARY_KIND, "removedCount": removed}, "id": events.new_id()}


async def summarise(provider: Provider, *, session_id: str, model: str,
                    messages: Sequence[Mapping[str, Any]],
                    max_tokens: int | None) -> tuple[str, Usage | None]:
    """Ask ``provider`` for a summary of ``messages`` (no tools offered); its text and
    the call's usage (None when the provider reported none: the summary costs too).

    Raises what the provider raises (a ModelError); an empty answer is a ValueError.
    """
    request = ModelRequest(
        session_id=session_id, model=model,
        messages=(events.system_message(INSTRUCTIONS),
                  {"role": "user", "content": [events.text_block(transcript(messages))],
                   "source": {"kind": SUMMARY_KIND}, "id": events.new_id()}),
        tools=(), max_tokens=max_tokens)
    assembly = Assembly("compact")
    stream = provider.stream(request)
    try:
        async for chunk in stream:
            assembly.add(chunk)
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    text = "".join(b.get("text", "") for b in assembly.content() if b["type"] == "text")
    if not text.strip():
        raise ValueError("the model returned an empty summary")
    return text.strip(), assembly.usage


class Compaction(NamedTuple):
    """What one compaction did (the event's data, less the summary message)."""

    reason: str
    removed: int
    kept: int
    tokens_before: int
    tokens_after: int

    def data(self, summary: Mapping[str, Any], turn: int | None,
             used: Usage | None = None) -> dict[str, Any]:
        """The ``context/compacted`` event data (``usage`` of the summary's model call
        when the provider reported it, spelled as an ``assistant/message``'s)."""
        data: dict[str, Any] = {"reason": self.reason, "removedCount": self.removed,
                                "keptCount": self.kept, "tokensBefore": self.tokens_before,
                                "tokensAfter": self.tokens_after, "summary": dict(summary)}
        if turn is not None:
            data["turn"] = turn
        if used is not None:
            data["usage"] = events.usage(used)
        return data


def replay(messages: list[dict[str, Any]], data: Mapping[str, Any]) -> None:
    """Apply a logged ``context/compacted`` to a history being rebuilt, in place."""
    removed = int(data.get("removedCount", 0))
    summary = data.get("summary")
    if removed <= 0 or not isinstance(summary, dict):
        return
    messages[:removed] = [summary]
