"""``--json-format codex``: a headless run as the JSON lines ``codex exec --json`` prints.

People who script Codex read its ``ThreadEvent`` stream; the shapes are the TypeScript
types of ``@openai/codex-sdk`` (0.163.0, ``dist/index.d.ts``). :class:`CodexEvents` maps a
dsh session's events onto them where the concepts meet, so such a script runs unchanged
(``docs/contracts.md``, "Headless", has the table):

=====================================  ===========================================
dsh event                              Codex event
=====================================  ===========================================
the session is open                    ``thread.started {thread_id}`` (the session id)
``turn/start``                         ``turn.started``
``assistant/message``                  ``item.completed``: a ``reasoning`` item per
                                       reasoning block, then an ``agent_message``
                                       with its text
``tool/call`` of ``bash``              ``item.started`` ``command_execution``
                                       (``in_progress``); its ``tool/result``
                                       ``item.completed`` with ``aggregated_output``,
                                       ``exit_code`` and ``completed``/``failed``
``tool/result`` of ``write_file``,     ``item.completed`` ``file_change`` (``add`` or
``edit_file``                          ``update``, from the result's ``diff``)
``tool/call`` of ``web_search``        ``item.started``/``item.completed``
                                       ``web_search {query}`` (its queries joined)
``tool/call`` of ``mcp__S__T``         ``mcp_tool_call {server: S, tool: T}``
any other tool (``read_file``, ...)    ``mcp_tool_call {server: "dsh", tool}``
``plan/update`` (``todo_write``)       ``todo_list``: started, then updated, completed
                                       when the turn ends
``error``, ``assistant/retry``         ``item.completed`` ``error {message}``
``turn/end`` completed                 ``turn.completed {usage}``, summed over the turn
``turn/end`` otherwise                 ``turn.failed {error: {message}}``
=====================================  ===========================================

Item ids are ``item_0``, ``item_1``, ... in the order items start, as Codex numbers them.
Pure: events in, Codex events out (the view writes them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from dsh.runtime.headless.progress import message_text
from dsh.runtime.headless.tally import Tally
from dsh.runtime.headless.views import Sink, json_line

MCP_PREFIX = "mcp__"
DSH_SERVER = "dsh"
"""The ``server`` of an ``mcp_tool_call`` item made of one of dsh's own tools."""
_EXIT = re.compile(r"\[Command finished with exit code (-?\d+)\]\s*\Z")
_FAILED = {"max-tokens": "the model stopped at its output token limit",
           "cancelled": "the turn was cancelled"}


def _arguments(text: Any) -> Any:
    """A tool call's JSON argument text as a value (the text itself when it is not JSON)."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


class CodexEvents:
    """Translates one session's dsh events into Codex ``ThreadEvent`` objects."""

    def __init__(self, session_id: str) -> None:
        self._thread_id = session_id
        self._next = 0
        self._calls: dict[str, dict[str, Any]] = {}  # callId -> the started item
        self._todo: dict[str, Any] | None = None
        self._tally = Tally()

    def _id(self) -> str:
        item_id = f"item_{self._next}"
        self._next += 1
        return item_id

    def started(self) -> list[dict[str, Any]]:
        """The first event: the thread (dsh's session) exists."""
        return [{"type": "thread.started", "thread_id": self._thread_id}]

    def translate(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The Codex events for one dsh event (often none)."""
        self._tally.add(event)
        kind = event.get("type")
        data = event.get("data") or {}
        handler = _HANDLERS.get(str(kind))
        return handler(self, data) if handler is not None else []

    # -- per event ---------------------------------------------------------------------

    def _turn_start(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        self._tally = Tally()
        return [{"type": "turn.started"}]

    def _message(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        message = data.get("message") or {}
        out = []
        for block in message.get("content") or ():
            if isinstance(block, Mapping) and block.get("type") == "reasoning" and (
                    block.get("text")):
                out.append(self._completed({"type": "reasoning", "text": block["text"]}))
        text = message_text(message)
        if text:
            out.append(self._completed({"type": "agent_message", "text": text}))
        return out

    def _tool_call(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        name = str(data.get("name", ""))
        args = _arguments(data.get("arguments", ""))
        call_id = str(data.get("callId", ""))
        if name == "todo_write":
            return []  # its plan/update is the todo_list item
        if name in ("write_file", "edit_file"):
            path = args.get("path", "") if isinstance(args, Mapping) else ""
            self._calls[call_id] = {"type": "file_change", "path": str(path)}
            return []  # Codex reports a patch once, when it has applied or failed
        item: dict[str, Any]
        if name == "bash":
            command = args.get("command", "") if isinstance(args, Mapping) else str(args)
            item = {"type": "command_execution", "command": str(command),
                    "aggregated_output": "", "status": "in_progress"}
        elif name == "web_search":
            queries = args.get("queries") if isinstance(args, Mapping) else None
            query = ("; ".join(map(str, queries)) if isinstance(queries, list)
                     else str(args))
            item = {"type": "web_search", "query": query}
        else:
            server, tool = DSH_SERVER, name
            if name.startswith(MCP_PREFIX) and "__" in name[len(MCP_PREFIX):]:
                server, _, tool = name[len(MCP_PREFIX):].partition("__")
            item = {"type": "mcp_tool_call", "server": server, "tool": tool,
                    "arguments": args, "status": "in_progress"}
        item = {"id": self._id(), **item}
        self._calls[call_id] = item
        return [{"type": "item.started", "item": dict(item)}]

    def _tool_result(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        message = data.get("message") or {}
        item = self._calls.pop(str(message.get("toolCallId", "")), None)
        if item is None:
            return []
        text = message_text(message)
        failed = bool(message.get("isError"))
        kind = item["type"]
        if kind == "file_change":
            found = data.get("diff")
            diff: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            path = str(diff.get("path") or item["path"])
            change = {"path": path, "kind": "add" if diff.get("kind") == "add" else "update"}
            return [self._completed({"type": "file_change", "changes": [change],
                                     "status": "failed" if failed else "completed"})]
        done = dict(item)
        if kind == "command_execution":
            found = _EXIT.search(text)
            done["aggregated_output"] = text[:found.start()] if found else text
            if found:
                done["exit_code"] = int(found.group(1))
            failed = failed or bool(found and found.group(1) != "0")
            done["status"] = "failed" if failed else "completed"
        elif kind == "mcp_tool_call":
            done["status"] = "failed" if failed else "completed"
            if failed:
                done["error"] = {"message": text}
            else:
                done["result"] = {"content": [{"type": "text", "text": text}],
                                  "structured_content": None}
        return [{"type": "item.completed", "item": done}]

    def _plan(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        items = [{"text": str(entry.get("content", "")),
                  "completed": entry.get("status") == "completed"}
                 for entry in data.get("entries") or () if isinstance(entry, Mapping)]
        if self._todo is None:
            self._todo = {"id": self._id(), "type": "todo_list", "items": items}
            return [{"type": "item.started", "item": dict(self._todo)}]
        self._todo = {**self._todo, "items": items}
        return [{"type": "item.updated", "item": dict(self._todo)}]

    def _error(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [self._completed({"type": "error", "message": str(data.get("message", ""))})]

    def _retry(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        reason = (data.get("reason") or {}).get("message") or "the stream broke off"
        return [self._completed({"type": "error",
                                 "message": f"{reason}; asking the model again"})]

    def _turn_end(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        out = []
        if self._todo is not None:
            out.append({"type": "item.completed", "item": self._todo})
            self._todo = None
        reason = data.get("reason") or {}
        kind = reason.get("kind")
        if kind == "completed":
            tally = self._tally
            out.append({"type": "turn.completed", "usage": {
                "input_tokens": tally.input_tokens,
                "cached_input_tokens": tally.cached_tokens or 0,
                "cache_write_input_tokens": tally.cache_write_tokens,
                "output_tokens": tally.output_tokens,
                "reasoning_output_tokens": tally.reasoning_tokens}})
        else:
            error = reason.get("error") or {}
            message = error.get("message") or _FAILED.get(str(kind), f"the turn ended: {kind}")
            out.append({"type": "turn.failed", "error": {"message": str(message)}})
        return out

    def _completed(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"type": "item.completed", "item": {"id": self._id(), **item}}


_HANDLERS: dict[str, Callable[[CodexEvents, Mapping[str, Any]], list[dict[str, Any]]]] = {
    "turn/start": CodexEvents._turn_start,
    "assistant/message": CodexEvents._message,
    "tool/call": CodexEvents._tool_call,
    "tool/result": CodexEvents._tool_result,
    "plan/update": CodexEvents._plan,
    "error": CodexEvents._error,
    "assistant/retry": CodexEvents._retry,
    "turn/end": CodexEvents._turn_end,
}


class CodexView:
    """``--json-format codex``: the Codex events on stdout, one JSON object a line."""

    def __init__(self, out: Sink, err: Callable[[str], None], *,
                 out_terminal: bool = False) -> None:
        self._out = out
        self._err = err
        self._terminal = out_terminal
        self._events: CodexEvents | None = None

    def _write(self, events: list[dict[str, Any]]) -> None:
        for item in events:
            self._out.write_line(json_line(item, terminal=self._terminal))

    def started(self, session_id: str) -> None:
        self._events = CodexEvents(session_id)
        self._write(self._events.started())

    def event(self, event: Mapping[str, Any]) -> None:
        if self._events is not None:
            self._write(self._events.translate(event))

    def note(self, text: str, *, error: bool = False) -> None:
        if error:
            self._err(text)

    def finished(self, reason: Mapping[str, Any], answer: str) -> None:
        pass

    def close(self) -> None:
        pass
