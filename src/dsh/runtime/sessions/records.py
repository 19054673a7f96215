"""Rebuilding a :class:`~dsh.runtime.agent.session.SessionRecord` from its stored log.

A store keeps the session row (cwd, title, a small state snapshot) and the event log; the
conversation is the message events in seq order, so ``load`` replays the log rather than
trusting a snapshot a crash could leave stale. Every store calls :func:`replay`, so a
session moved between stores (``dsh sessions export/import``) loads the same.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from dsh.runtime.agent import compaction, events
from dsh.runtime.agent.session import SessionRecord

_MESSAGE_EVENTS = {events.SYSTEM_MESSAGE, events.USER_MESSAGE, events.ASSISTANT_MESSAGE,
                   events.TOOL_RESULT}
_CONTEXT_PREFIX = "Current working directory: "


def state_of(record: SessionRecord) -> dict[str, Any]:
    """The state snapshot a store keeps beside the session row: the turn count, the
    directory the model was last told about, the workspace root and granted roots."""
    return {"turns": record.turns, "context_cwd": record.context_cwd,
            "root": record.root, "granted": record.granted}


def rebuild(session_id: str, cwd: str, title: str, log: list[dict[str, Any]],
            state: Mapping[str, Any]) -> SessionRecord:
    """The record of a stored session row (``cwd``, ``title``, ``state``) and its log.

    A session stored before roots were kept takes its stored cwd as its root.
    """
    record = SessionRecord(session_id, cwd, title=title, events=log,
                           context_cwd=state.get("context_cwd"),
                           root=state.get("root") or os.path.realpath(cwd),
                           granted=list(state.get("granted") or ()))
    return replay(record, state)


def replay(record: SessionRecord, state: Mapping[str, Any]) -> SessionRecord:
    """Fill ``record`` (built with its stored row and ``events``) from its log: messages,
    system message, turns, title, the directory the model was last told, the session's
    own settings (its last ``session/settings``); returns it."""
    turns = 0
    for event in record.events:
        kind, data = event["type"], event.get("data", {})
        if kind == events.TURN_START:
            turns = max(turns, int(data.get("turn", 0)))
        elif kind == events.SESSION_TITLE and not record.title:
            record.title = data.get("title", "")
        elif kind == compaction.COMPACTED:
            compaction.replay(record.messages, data)
        elif kind == events.SESSION_SETTINGS:
            record.settings = dict(data)
        if kind not in _MESSAGE_EVENTS:
            continue
        message = data if kind == events.USER_MESSAGE else data.get("message")
        if not isinstance(message, dict):
            continue
        if kind == events.SYSTEM_MESSAGE:
            record.system = message
            continue
        record.messages.append(message)
        told = _context_cwd(message)
        if told is not None:
            record.context_cwd = told
    record.turns = max(turns, int(state.get("turns", 0)))
    record.context_shown = events.shown_sections(record.messages)
    return record


def _context_cwd(message: dict[str, Any]) -> str | None:
    """The directory a runtime-context message told the model about, if it is one."""
    source = message.get("source")
    if not isinstance(source, dict) or source.get("kind") != "runtime-context":
        return None
    for section in source.get("sections", ()):
        text = section.get("text", "") if isinstance(section, dict) else ""
        if section.get("name") == events.CWD_SECTION and text.startswith(
                _CONTEXT_PREFIX):
            try:
                told = json.loads(text[len(_CONTEXT_PREFIX):].rstrip("."))
            except ValueError:
                return None
            return told if isinstance(told, str) else None
    return None


def decode(bodies: Sequence[str]) -> list[dict[str, Any]]:
    """The stored event texts of a log, parsed: one ``json.loads`` of them all, with the
    cycle collector paused.

    A resume parses the whole log; a long one is 100,000 events of nested dicts, whose
    allocation sets off collections that rescan every object parsed so far, more than
    doubling the time (2.4 s to under 1 s at 100,000 events). Parsed data holds no cycles,
    so nothing is left for the collector; it runs again as it was before the call.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return json.loads("[" + ",".join(bodies) + "]")
    finally:
        if paused:
            gc.enable()


def encode(event: Mapping[str, Any]) -> str:
    """An event as stored: compact JSON, non-ASCII kept (the bytes a client was sent)."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)
