"""Reassembling a provider's chunk stream into one assistant message.

Providers stream reasoning, text and tool calls in fragments (a tool call's JSON arguments
may be cut anywhere); the agent shows reasoning and text as they come, each as its own kind,
and needs whole tool calls to run. This module is the pure half of that: it takes chunks
and answers what to show now and, at the end, the message content. No I/O, no events, so
it is tested on chunk lists alone.
"""

from __future__ import annotations

from typing import Any

from dsh.runtime.agent import events
from dsh.runtime.providers.base import (
    Chunk,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)


class _PartialCall:
    """One tool call as its fragments arrive (the argument pieces are joined at the end)."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class _PartialThought:
    """One reasoning block as its fragments arrive."""

    __slots__ = ("field", "redacted", "signature", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.signature: str | None = None
        self.redacted: str | None = None
        self.field: str | None = None


class Assembly:
    """Collects one response. ``add`` returns the fragment to show at once, if any."""

    def __init__(self, call_id_prefix: str) -> None:
        self._prefix = call_id_prefix
        self._text: list[str] = []
        self._thoughts: dict[int, _PartialThought] = {}
        self._calls: dict[int, _PartialCall] = {}
        self.usage: Usage | None = None
        self._finish: FinishReason | None = None

    def add(self, chunk: Chunk) -> TextDelta | ReasoningDelta | None:
        """Take one chunk; a non-empty text or reasoning fragment is returned for
        streaming (each is shown as its own kind, never one as the other)."""
        if isinstance(chunk, TextDelta):
            if chunk.text:
                self._text.append(chunk.text)
                return chunk
        elif isinstance(chunk, ReasoningDelta):
            thought = self._thoughts.setdefault(chunk.index, _PartialThought())
            thought.signature = chunk.signature or thought.signature
            if chunk.redacted is not None:
                thought.redacted = chunk.redacted
            thought.field = chunk.field or thought.field
            if chunk.text:
                thought.text.append(chunk.text)
                return chunk
        elif isinstance(chunk, ToolCallDelta):
            call = self._calls.setdefault(chunk.index, _PartialCall())
            call.id = chunk.id or call.id
            call.name = chunk.name or call.name
            call.arguments.append(chunk.arguments)
        elif isinstance(chunk, Usage):
            self.usage = chunk
        elif isinstance(chunk, Finish):
            self._finish = chunk.reason
        else:
            raise TypeError(f"provider yielded {type(chunk).__name__}, not a chunk")
        return None

    @property
    def finish(self) -> FinishReason:
        """The provider's finish reason; inferred when a stream ended without one."""
        if self._finish is not None:
            return self._finish
        return "tool-calls" if self._calls else "stop"

    @property
    def text(self) -> str:
        """The answer's text so far."""
        return "".join(self._text)

    def content(self) -> list[dict[str, Any]]:
        """The message content: reasoning blocks (in their order), the text block (when
        there is text), then the tool calls.

        A call the provider sent without an id gets ``<prefix>_<index>``, so ids are
        deterministic and unique within the turn; one without a name keeps ``""`` and is
        answered with an unknown-tool error.
        """
        blocks: list[dict[str, Any]] = []
        for index in sorted(self._thoughts):
            thought = self._thoughts[index]
            blocks.append(events.reasoning_block("".join(thought.text), thought.signature,
                                                 thought.redacted, thought.field))
        text = "".join(self._text)
        if text:
            blocks.append(events.text_block(text))
        for index in sorted(self._calls):
            call = self._calls[index]
            call_id = call.id or f"{self._prefix}_{index}"
            blocks.append(events.tool_call_block(call_id, call.name or "", "".join(call.arguments)))
        return blocks
