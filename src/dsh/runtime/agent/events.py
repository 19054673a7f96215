"""The shapes the agent puts on the wire: session events and the messages inside them.

Every field name a client reads is spelled here and nowhere else, so the SDK, ACP, web
and headless servers all forward one shape, and the snapshot tests pin one module. The
names follow the original runtime's transcripts (``docs/contracts.md``, "The SDK
protocol"; their order is pinned by ``tests/protocol/test_sdk_snapshots.py``):
``turn``, ``step``, ``callId``, ``toolCallId``, ``isError``, ``source``, and ``usage`` as
``inputTokens/outputTokens/totalTokens`` (plus, where the provider reports them,
``cacheHitTokens``, ``cacheMissTokens``, ``cacheWriteTokens``, ``reasoningTokens``,
``costUsd`` and ``estimated``).

The model's reasoning streams as ``assistant/reasoning-delta`` and is stored as a
``reasoning`` block of the ``assistant/message`` (the original runtime's name for it), so
nothing that reads the answer (``assistant/delta``, the message's ``text`` blocks) ever
carries it.

An event is ``{"type", "seq", "time", "data"}`` plus, for events that add to the visible
conversation, ``surfaceOp: "append"`` (and ``sourceEventSeqs`` on a tool result, naming
its call). ``seq`` is assigned by the session; ``time`` is epoch milliseconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dsh.runtime.providers.base import Usage

INBOX_SPLICED = "agent/inbox/spliced"
TURN_START = "turn/start"
TURN_END = "turn/end"
STEP_START = "step/start"
STEP_END = "step/end"
SYSTEM_MESSAGE = "system/message"
USER_MESSAGE = "user/message"
REQUEST_CONTEXT = "request/context"
SESSION_TITLE = "session/title"
ASSISTANT_DELTA = "assistant/delta"
ASSISTANT_REASONING_DELTA = "assistant/reasoning-delta"
ASSISTANT_RETRY = "assistant/retry"
ASSISTANT_MESSAGE = "assistant/message"
TOOL_CALL = "tool/call"
TOOL_RESULT = "tool/result"
ERROR = "error"
SESSION_MOVED = "session/moved"
SESSION_SETTINGS = "session/settings"
USER_SHELL = "user/shell"

LEASE_LOST = "lease-lost"
"""The ``code`` of the ``error`` and ``turn/end`` a runtime sends when another took over
the lease of a session it was working on."""

APPEND = {"surfaceOp": "append"}
"""The extra event member of events that add a message to the visible conversation."""

TITLE_LIMIT = 80


def now_ms() -> int:
    """Epoch milliseconds, the unit of every event's ``time``."""
    return int(time.time() * 1000)


def new_id() -> str:
    """A fresh message id (uuid4 text), as the original runtime uses."""
    import uuid  # on the first message, not at boot: uuid loads platform (~2 ms)

    return str(uuid.uuid4())


def event(type: str, seq: int, data: Mapping[str, Any], extra: Mapping[str, Any]) -> dict:
    """One ``session.event`` body."""
    return {"type": type, "seq": seq, "time": now_ms(), "data": dict(data), **extra}


# -- messages --------------------------------------------------------------------------


CWD_SECTION = "working-directory:current"
"""The runtime-context section naming the working directory."""


def text_block(text: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": text}


def user_message(content: Sequence[Mapping[str, Any]], message_id: str) -> dict[str, Any]:
    """A prompt as queued, shown and sent: ``id`` is the ``messageId`` the client got."""
    return {"role": "user", "content": [dict(b) for b in content], "source": {"kind": "user"},
            "id": message_id}


def system_message(text: str) -> dict[str, Any]:
    """The system prompt as the model receives it."""
    return {"role": "system", "content": [text_block(text)],
            "source": {"kind": "system-prompt"}, "id": new_id()}


def context_message(cwd: str) -> dict[str, Any]:
    """The runtime-context note telling the model where it works (sent when it changes)."""
    text = f"Current working directory: {json.dumps(cwd)}."
    section = {"name": CWD_SECTION, "text": text}
    return {"role": "user", "content": [text_block(section["text"])],
            "source": {"kind": "runtime-context", "form": "snapshot", "sections": [section]},
            "id": new_id()}


def shown_sections(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Plugin context sections present in ``messages``: name → the last text shown.

    What a session's ``context_shown`` is after a reload or a compaction: a section the
    history no longer holds is not shown any more, so the next turn sends it again.
    """
    shown: dict[str, str] = {}
    for message in messages:
        source = message.get("source")
        if not isinstance(source, Mapping) or source.get("kind") != "runtime-context":
            continue
        for section in source.get("sections", ()):
            if isinstance(section, Mapping) and section.get("name") != CWD_SECTION:
                shown[str(section.get("name"))] = str(section.get("text", ""))
    return shown


def reasoning_block(text: str, signature: str | None = None,
                    redacted: str | None = None, field: str | None = None) -> dict[str, Any]:
    """The model's reasoning inside an assistant message (``signature``, ``redacted`` and
    ``field``: what the route that produced it needs to send it back the way it came,
    e.g. Anthropic's signed and encrypted thinking; see :mod:`dsh.runtime.providers.base`)."""
    block: dict[str, Any] = {"type": "reasoning", "text": text}
    for name, value in (("signature", signature), ("redacted", redacted), ("field", field)):
        if value is not None:
            block[name] = value
    return block


def tool_call_block(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A tool call inside an assistant message; ``arguments`` stays JSON text."""
    return {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}


def assistant_message(
    content: list[dict[str, Any]], *, provider: str, model: str
) -> dict[str, Any]:
    """A model response as one message (text block first, then its tool calls)."""
    return {"role": "assistant", "content": content,
            "source": {"kind": "model", "provider": provider, "model": model}, "id": new_id()}


def image_block(mime_type: str, data: str) -> dict[str, Any]:
    """An image content block (base64 ``data``), spelled as ACP and MCP spell theirs."""
    return {"type": "image", "mimeType": mime_type, "data": data}


def tool_message(call_id: str, text: str, *, is_error: bool,
                 images: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """A tool's answer to call ``call_id``: its text, then any ``(mime_type, data)`` images."""
    content = [text_block(text), *(image_block(m, d) for m, d in images)]
    return {"role": "tool", "source": {"kind": "tool", "callId": call_id},
            "toolCallId": call_id, "content": content, "isError": is_error,
            "id": new_id()}


def plugin_context_message(name: str, text: str) -> dict[str, Any]:
    """A context section a plugin contributes (goals, instructions), sent when it changes."""
    section = {"name": name, "text": text}
    return {"role": "user", "content": [text_block(text)],
            "source": {"kind": "runtime-context", "form": "snapshot", "sections": [section]},
            "id": new_id()}


def message_text(message: Mapping[str, Any]) -> str:
    """The concatenated text blocks of a message (titles, token estimates)."""
    return "".join(
        b.get("text", "") for b in message.get("content", ()) if b.get("type") == "text"
    )


def usage(value: Usage) -> dict[str, Any]:
    """Token counts (and cost) in the wire spelling; optional figures only when known."""
    data: dict[str, Any] = {"inputTokens": value.input_tokens,
                            "outputTokens": value.output_tokens,
                            "totalTokens": value.total_tokens}
    if value.cache_hit_tokens is not None:
        data["cacheHitTokens"] = value.cache_hit_tokens
        data["cacheMissTokens"] = value.cache_miss_tokens
    if value.cache_write_tokens is not None:
        data["cacheWriteTokens"] = value.cache_write_tokens
    if value.reasoning_tokens is not None:
        data["reasoningTokens"] = value.reasoning_tokens
    if value.cost_usd is not None:
        data["costUsd"] = value.cost_usd
    if value.estimated:
        data["estimated"] = True
    return data


# -- event data ------------------------------------------------------------------------


def inbox_received(start: int, message: Mapping[str, Any]) -> dict[str, Any]:
    """The receipt of a queued prompt (``inserted[].id`` is its messageId)."""
    return {"target": "next-turn", "start": start, "inserted": [dict(message)]}


def inbox_taken(count: int) -> dict[str, Any]:
    """Queued prompts leaving the inbox because a turn took them."""
    return {"target": "next-turn", "start": 0, "removedCount": count, "inserted": []}


def turn_data(turn: int) -> dict[str, Any]:
    """Data of ``turn/start``."""
    return {"turn": turn}


def step_data(turn: int, step: int) -> dict[str, Any]:
    """Data of ``step/start`` and ``step/end``."""
    return {"turn": turn, "step": step}


def placed(turn: int, step: int, message: Mapping[str, Any]) -> dict[str, Any]:
    """Data of a message that belongs to a step (system, assistant, tool result)."""
    return {"turn": turn, "step": step, "message": dict(message)}


def request_context(provider: str, model: str, context_window: int) -> dict[str, Any]:
    """Which route and model a turn uses, and how much context it has."""
    return {"provider": provider, "model": model, "contextWindow": context_window}


def session_title(title: str, message_seq: int) -> dict[str, Any]:
    """The session's title, taken from its first prompt."""
    return {"title": title, "messageSeqs": [message_seq], "source": {"kind": "fallback"}}


def title_from(message: Mapping[str, Any]) -> str:
    """A one-line title from a prompt's text (empty when the prompt has none)."""
    line = " ".join(message_text(message).split())
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1] + "…"


def assistant_delta(turn: int, step: int, index: int, text: str) -> dict[str, Any]:
    """A streamed fragment of the assistant's text (``index``: its position in the step)."""
    return {"turn": turn, "step": step, "index": index, "text": text}


def retry(turn: int, step: int, message: str, code: str) -> dict[str, Any]:
    """Data of ``assistant/retry``: the step's streamed text and reasoning so far are void
    (the stream broke off) and the request is being sent again."""
    return {"turn": turn, "step": step, "reason": {"message": message, "code": code}}


def assistant_data(
    turn: int, step: int, message: Mapping[str, Any], used: Usage | None
) -> dict[str, Any]:
    """Data of ``assistant/message``."""
    data = placed(turn, step, message)
    if used is not None:
        data["usage"] = usage(used)
    return data


def tool_call(turn: int, step: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """Data of ``tool/call``."""
    return {"turn": turn, "step": step, "callId": call_id, "name": name, "arguments": arguments}


def turn_end(turn: int, kind: str, error: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Data of ``turn/end``: ``completed``, ``max-tokens``, ``cancelled`` or ``error``."""
    reason: dict[str, Any] = {"kind": kind}
    if error is not None:
        reason["error"] = dict(error)
    return {"turn": turn, "reason": reason}


def hook_error(message: str, hook: str, lifecycle_event: str) -> dict[str, Any]:
    """Data of an ``error`` event for a hook that raised or overran its budget."""
    return {"message": message,
            "source": {"kind": "hook", "hook": hook, "event": lifecycle_event}}


def unlogged(type: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """An event about this runtime's hold on a session rather than part of its log: no
    ``seq``, never stored (the log may be another runtime's by now)."""
    return {"type": type, "time": now_ms(), "data": dict(data)}


def moved(holder: Mapping[str, Any] | None) -> dict[str, Any]:
    """A ``session/moved`` event: this runtime no longer has the session, another runtime
    leased or wrote it (``holder``: ``{host, pid}`` of the one leasing it now, or None
    when it already gave it back). It is not part of the log: no ``seq``, never stored."""
    return unlogged(SESSION_MOVED, {"holder": None if holder is None else dict(holder)})


def lease_lost(message: str, holder: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``error`` event of a session whose lease another runtime took from this one
    while it had work here (``code: lease-lost``, ``holder`` as in :func:`moved`); not
    part of the log, like :func:`moved`."""
    return unlogged(ERROR, {"message": message, "code": LEASE_LOST,
                            "holder": None if holder is None else dict(holder)})


def turn_lost(turn: int, message: str) -> dict[str, Any]:
    """The ``turn/end`` (``error``, code ``lease-lost``) this runtime sends for its running
    turn of a session another runtime took over; not part of the log: the log's own end
    of the turn is the new holder's to write (a restore closes it as interrupted)."""
    return unlogged(TURN_END, turn_end(turn, "error", {"message": message,
                                                       "code": LEASE_LOST}))
