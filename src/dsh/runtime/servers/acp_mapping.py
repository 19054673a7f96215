"""dsh session events → ACP ``session/update`` payloads, and ACP prompt blocks → dsh blocks.

Pure functions over plain dicts, no I/O, so the ACP server stays a thin adapter and the
mapping is tested on event lists alone. Two directions:

* :func:`prompt_blocks` turns an ACP ``session/prompt`` content array into the text blocks
  the agent and its providers understand. ACP requires every agent to take ``text`` and
  ``resource_link``; dsh also takes ``resource`` (embedded context, advertised as
  ``embeddedContext: true``): a text resource is inlined with its URI, a binary one is
  named but not inlined. ``image`` and ``audio`` are not advertised and are refused.
* :class:`UpdateMapper` turns the agent's events into ``update`` objects (the value of
  ``session/update``'s ``update`` member), in two modes. ``live`` follows a running turn:
  text arrives as ``assistant/delta`` chunks (``agent_message_chunk``), the model's
  reasoning as ``assistant/reasoning-delta`` chunks (``agent_thought_chunk``), usage after
  each model response. ``replay`` (``session/load``) rebuilds the visible conversation
  from the stored log: user prompts, each assistant message's reasoning and text, tool
  calls with their final state.

The task list (``plan/update``) becomes an ACP ``plan`` update in both modes; a mode the
agent switched to itself (``mode/update``, after an approved ``exit_plan_mode``) becomes
``current_mode_update`` live only: a replayed one would be stale, and ``session/load``
answers the current mode.

Field names follow the ACP v1 schema (agentclientprotocol.com, ``schema.json``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from dsh.core import jsonrpc
from dsh.core.errors import JsonRpcError

TOOL_KINDS: Mapping[str, str] = {
    "read_file": "read",
    "write_file": "edit",
    "edit_file": "edit",
    "grep": "search",
    "glob": "search",
    "list_directory": "search",
    "bash": "execute",
    "exit_plan_mode": "switch_mode",
}
"""ACP ``ToolKind`` of dsh's shipped tools; any other tool is ``other``."""

_TITLE_VERBS: Mapping[str, tuple[str, str]] = {
    "read_file": ("Read", "path"),
    "write_file": ("Write", "path"),
    "edit_file": ("Edit", "path"),
    "list_directory": ("List", "path"),
    "glob": ("Find", "pattern"),
    "grep": ("Search for", "pattern"),
    "bash": ("Run", "command"),
    "working_directory": ("Working directory", "cd"),
}
_TITLE_LIMIT = 120


# -- prompts -------------------------------------------------------------------------------


def _bad_block(index: int, problem: str) -> JsonRpcError:
    return JsonRpcError(jsonrpc.INVALID_PARAMS, f"prompt[{index}]: {problem}")


def _text_field(block: Mapping[str, Any], name: str, index: int) -> str:
    value = block.get(name)
    if not isinstance(value, str):
        raise _bad_block(index, f'"{name}" must be a string')
    return value


def prompt_blocks(prompt: Any) -> list[dict[str, Any]]:
    """The dsh content blocks for an ACP ``prompt`` array; -32602 naming the bad block."""
    if not isinstance(prompt, list) or not prompt:
        raise JsonRpcError(jsonrpc.INVALID_PARAMS, '"prompt" must be a non-empty array')
    blocks = []
    for index, block in enumerate(prompt):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _bad_block(index, "must be a content block object with a string \"type\"")
        kind = block["type"]
        if kind == "text":
            text = _text_field(block, "text", index)
        elif kind == "resource_link":
            uri = _text_field(block, "uri", index)
            name = _text_field(block, "name", index)
            text = f"[{name}]({uri})"
        elif kind == "resource":
            text = _embedded(block.get("resource"), index)
        elif kind in ("image", "audio"):
            raise _bad_block(index, f"{kind} content is not supported (promptCapabilities)")
        else:
            raise _bad_block(index, f"unknown content block type {kind!r}")
        blocks.append({"type": "text", "text": text})
    return blocks


def _embedded(resource: Any, index: int) -> str:
    """An embedded resource as text: inlined when textual, named when binary."""
    if not isinstance(resource, dict):
        raise _bad_block(index, '"resource" must be an object')
    uri = _text_field(resource, "uri", index)
    if "text" in resource:
        return f"<resource uri={json.dumps(uri)}>\n{_text_field(resource, 'text', index)}\n" \
               "</resource>"
    if isinstance(resource.get("blob"), str):
        mime = resource.get("mimeType") or "binary"
        return f"[{uri}] ({mime} resource, not shown: binary content)"
    raise _bad_block(index, 'an embedded resource needs "text" or "blob"')


# -- events --------------------------------------------------------------------------------


def text_content(text: str) -> dict[str, Any]:
    """An ACP text content block."""
    return {"type": "text", "text": text}


def tool_kind(name: str) -> str:
    """The ACP ``ToolKind`` of a dsh tool."""
    return TOOL_KINDS.get(name, "other")


def parse_arguments(arguments: Any) -> Any:
    """A tool call's arguments as sent by the model (JSON text) made a value, when it is
    JSON; otherwise the text itself, so ``rawInput`` always shows what the model sent."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def tool_title(name: str, arguments: Any) -> str:
    """A one-line human title, e.g. ``Write notes.txt`` or ``Run `ls -l```."""
    verb, key = _TITLE_VERBS.get(name, (name, ""))
    value = arguments.get(key) if isinstance(arguments, dict) and key else None
    if not isinstance(value, str) or not value:
        return verb
    shown = " ".join(value.split())
    if len(shown) > _TITLE_LIMIT:
        shown = shown[: _TITLE_LIMIT - 1] + "…"
    return f"{verb} `{shown}`" if key in ("command", "pattern") else f"{verb} {shown}"


def tool_locations(arguments: Any, cwd: str | None) -> list[dict[str, str]]:
    """ACP ``locations`` (absolute paths) for a call with a ``path`` argument."""
    path = arguments.get("path") if isinstance(arguments, dict) else None
    if not isinstance(path, str) or not path or cwd is None:
        return []
    return [{"path": os.path.normpath(os.path.join(cwd, path))}]


def tool_call_update(call_id: str, name: str, arguments: Any, *, cwd: str | None,
                     status: str) -> dict[str, Any]:
    """The ``tool_call`` fields of a call (also the ``toolCall`` of a permission request)."""
    raw = parse_arguments(arguments)
    update: dict[str, Any] = {
        "toolCallId": call_id,
        "title": tool_title(name, raw),
        "kind": tool_kind(name),
        "status": status,
        "rawInput": raw,
    }
    locations = tool_locations(raw, cwd)
    if locations:
        update["locations"] = locations
    return update


def _result_update(data: Mapping[str, Any]) -> dict[str, Any] | None:
    message = data.get("message") or {}
    call_id = message.get("toolCallId")
    if not isinstance(call_id, str):
        return None
    content = [{"type": "content", "content": text_content(block["text"])}
               for block in message.get("content", ())
               if block.get("type") == "text" and block.get("text")]
    update: dict[str, Any] = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "failed" if message.get("isError") else "completed",
        "content": content,
    }
    if data.get("error"):
        update["rawOutput"] = {"error": dict(data["error"])}
    return update


class UpdateMapper:
    """Maps one session's events to ACP updates; keeps what later events need.

    ``cwd`` makes tool locations absolute; the context window (from ``request/context``)
    is the ``size`` of ``usage_update``.
    """

    def __init__(self, cwd: str | None = None) -> None:
        self.cwd = cwd
        self._context_window: int | None = None

    def live(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Updates for an event of a running turn."""
        kind, data = event.get("type"), event.get("data") or {}
        if kind == "assistant/delta":
            text = data.get("text")
            return [_chunk("agent_message_chunk", text)] if text else []
        if kind == "assistant/reasoning-delta":
            text = data.get("text")
            return [_chunk("agent_thought_chunk", text)] if text else []
        if kind == "assistant/message":
            return self._usage(data)
        if kind == "mode/update" and isinstance(data.get("mode"), str):
            return [{"sessionUpdate": "current_mode_update", "currentModeId": data["mode"]}]
        return self._common(kind, data)

    def replay(self, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Updates that rebuild a stored conversation (``session/load``)."""
        updates: list[dict[str, Any]] = []
        for event in events:
            kind, data = event.get("type"), event.get("data") or {}
            if kind == "user/message":
                if (data.get("source") or {}).get("kind") == "user":
                    updates.extend(_chunk("user_message_chunk", b.get("text"))
                                   for b in data.get("content", ()) if b.get("type") == "text")
            elif kind == "assistant/message":
                message = data.get("message") or {}
                kinds = {"reasoning": "agent_thought_chunk", "text": "agent_message_chunk"}
                updates.extend(_chunk(kinds[b["type"]], b.get("text"))
                               for b in message.get("content", ())
                               if b.get("type") in kinds and b.get("text"))
            else:
                updates.extend(self._common(kind, data))
        return updates

    def _common(self, kind: Any, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        """What both modes map the same way: tool calls, results, titles, context size."""
        if kind == "tool/call":
            update = tool_call_update(str(data.get("callId")), str(data.get("name")),
                                      data.get("arguments"), cwd=self.cwd, status="pending")
            return [{"sessionUpdate": "tool_call", **update}]
        if kind == "tool/result":
            result = _result_update(data)
            return [result] if result is not None else []
        if kind == "plan/update" and isinstance(data.get("entries"), list):
            return [plan_update(data["entries"])]
        if kind == "session/title" and isinstance(data.get("title"), str):
            return [{"sessionUpdate": "session_info_update", "title": data["title"]}]
        if kind == "request/context" and isinstance(data.get("contextWindow"), int):
            self._context_window = data["contextWindow"]
        return []

    def _usage(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        usage = data.get("usage")
        if not isinstance(usage, dict) or self._context_window is None:
            return []
        used = usage.get("totalTokens")
        if not isinstance(used, int):
            return []
        return [{"sessionUpdate": "usage_update", "used": used, "size": self._context_window}]


def plan_update(entries: Sequence[Any]) -> dict[str, Any]:
    """An ACP ``plan`` update: every entry, ``priority`` defaulting to ``medium`` (ACP
    requires one; dsh's task list leaves it optional)."""
    return {"sessionUpdate": "plan", "entries": [
        {"content": str(e.get("content", "")), "priority": e.get("priority") or "medium",
         "status": e.get("status", "pending")}
        for e in entries if isinstance(e, Mapping)]}


def _chunk(kind: str, text: Any) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": text_content(str(text or ""))}


# -- permission answers --------------------------------------------------------------------


def selected_option(answer: Any, offered: Mapping[str, Any]) -> str | None:
    """The option id of a well-formed ``session/request_permission`` answer selecting one
    of ``offered``; None for any other shape (cancelled, missing, an unknown id, a field
    of the wrong type), which the server takes as a denial."""
    outcome = answer.get("outcome") if isinstance(answer, Mapping) else None
    if not isinstance(outcome, Mapping) or outcome.get("outcome") != "selected":
        return None
    option = outcome.get("optionId")
    return option if isinstance(option, str) and option in offered else None


def clipped(value: Any, limit: int = 200) -> str:
    """A client's answer, shortened for a log line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- turn ends -----------------------------------------------------------------------------

STOP_REASONS: Mapping[str, str] = {
    "completed": "end_turn",
    "max-tokens": "max_tokens",
    "cancelled": "cancelled",
}


def stop_reason(reason: Mapping[str, Any], *, cancel_requested: bool) -> str | JsonRpcError:
    """The ``stopReason`` for a ``turn/end`` reason, or the error to answer instead.

    ACP has no failed stop reason: a turn that failed is a JSON-RPC error (-32603, the
    agent's code in ``data``), except that a client that asked to cancel always hears
    ``cancelled`` (the spec requires it, whatever the abort caused) and a turn that used
    all its steps is ``max_turn_requests``.
    """
    kind = reason.get("kind")
    if cancel_requested and kind != "completed":
        return "cancelled"
    if isinstance(kind, str) and kind in STOP_REASONS:
        return STOP_REASONS[kind]
    error = reason.get("error") or {}
    if error.get("code") == "max-steps":
        return "max_turn_requests"
    return JsonRpcError(jsonrpc.INTERNAL_ERROR, str(error.get("message") or "the turn failed"),
                        {"code": error.get("code", "internal")})
