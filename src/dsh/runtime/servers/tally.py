"""What a session's log adds up to: the files it changed, and its usage and cost so far.

Both are read from the events as they are stored (``session/changes`` and
``session/usage``), a page at a time, so they work for a session live here, stored, or
running in another runtime, and cost memory for what they answer, not for the log.

* A change is a ``write_file``/``edit_file`` call that succeeded: its path (as the model
  gave it, relative to the working directory then), the tool, where it is in the log, and
  the unified diff the tool reported in its ``tool/result`` (``data.diff``, bounded by
  the tool) when there is one.
* Usage sums the ``usage`` of every ``assistant/message``: input and output tokens, cache
  hits and misses, reasoning tokens, cost in USD (``costUsd`` null when no message was
  priced; ``costPartial`` when some were not), and reports the last request's input as the
  context in use with the window of the route it went to (``request/context``), and
  when the log began and last grew (``createdAt``, ``updatedAt``: epoch milliseconds).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

FILE_TOOLS = frozenset({"write_file", "edit_file"})
_COUNTS = ("inputTokens", "outputTokens", "cacheHitTokens", "cacheMissTokens",
           "cacheWriteTokens", "reasoningTokens")


class Changes:
    """Collects a log's file changes, event by event."""

    def __init__(self) -> None:
        self._calls: dict[str, dict[str, Any]] = {}
        self.changes: list[dict[str, Any]] = []

    def add(self, event: Mapping[str, Any]) -> None:
        """Take one event into account."""
        kind, data = event.get("type"), event.get("data") or {}
        if kind == "tool/call" and data.get("name") in FILE_TOOLS:
            path = _path(data.get("arguments"))
            if path is not None:
                self._calls[str(data.get("callId"))] = {
                    "path": path, "tool": data["name"], "callId": data.get("callId"),
                    "turn": data.get("turn"), "seq": event.get("seq")}
        elif kind == "tool/result":
            message = data.get("message") or {}
            call = self._calls.pop(str(message.get("toolCallId")), None)
            if call is None or message.get("isError"):
                return
            change = dict(call)
            if isinstance(data.get("diff"), (str, dict)):
                change["diff"] = data["diff"]
            self.changes.append(change)

    def answer(self) -> dict[str, Any]:
        """``{changes: [...], files: [distinct paths, in first-change order]}``."""
        files = list(dict.fromkeys(c["path"] for c in self.changes))
        return {"changes": self.changes, "files": files}


class Usage:
    """Sums a log's usage, event by event."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = dict.fromkeys(_COUNTS, 0)
        self.cost = 0.0
        self.priced = self.unpriced = 0
        self.estimated = False
        self.turns = 0
        self.context: dict[str, Any] = {}
        self.last_input: int | None = None
        self.times: list[int] = []

    def add(self, event: Mapping[str, Any]) -> None:
        """Take one event into account."""
        kind, data = event.get("type"), event.get("data") or {}
        when = event.get("time")
        if isinstance(when, int):
            self.times[1:] = [when]
            if len(self.times) == 1:
                self.times.append(when)
        if kind == "turn/start":
            self.turns = max(self.turns, int(data.get("turn") or 0))
        elif kind == "request/context":
            self.context = {"provider": data.get("provider"), "model": data.get("model"),
                            "contextWindow": data.get("contextWindow")}
        elif kind == "assistant/message" and isinstance(data.get("usage"), dict):
            used = data["usage"]
            for key in _COUNTS:
                value = used.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    self.totals[key] += value
            cost = used.get("costUsd")
            if isinstance(cost, (int, float)) and not isinstance(cost, bool):
                self.cost += cost
                self.priced += 1
            else:
                self.unpriced += 1
            self.estimated = self.estimated or bool(used.get("estimated"))
            if isinstance(used.get("inputTokens"), int):
                self.last_input = used["inputTokens"] + (used.get("cacheWriteTokens") or 0)

    def answer(self) -> dict[str, Any]:
        """The totals, the cost, and the context in use."""
        out: dict[str, Any] = {**self.totals, "turns": self.turns,
                               "costUsd": round(self.cost, 8) if self.priced else None,
                               "contextTokens": self.last_input, **self.context,
                               "createdAt": self.times[0] if self.times else None,
                               "updatedAt": self.times[-1] if self.times else None}
        if self.priced and self.unpriced:
            out["costPartial"] = True
        if self.estimated:
            out["estimated"] = True
        return out


def of(events: Iterable[Mapping[str, Any]], tally: Changes | Usage) -> dict[str, Any]:
    """Feed ``events`` to ``tally``; its answer."""
    for event in events:
        tally.add(event)
    return tally.answer()


def _path(arguments: Any) -> str | None:
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return None
    path = args.get("path") if isinstance(args, dict) else None
    return path if isinstance(path, str) and path else None
