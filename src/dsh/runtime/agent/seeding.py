"""Starting a session from another conversation (``session/new {history}``).

A forked sub-agent begins with a copy of its parent's conversation. The copy arrives over
the wire, so it is checked here before any of it reaches a session: a list of messages
whose roles are ``user``, ``assistant`` or ``tool``, each with a content list of typed
blocks that role may carry (:mod:`.blocks`), and every assistant tool call answered by a
tool message before the next non-tool message and by the end. A history a provider would
refuse is refused now (InvalidArgumentError naming the message index), not at the child's
first model request.

Seeded messages are logged as the events a turn would have logged for them
(``user/message``, ``assistant/message``, ``tool/result``) with ``turn: 0`` and ``step: 0``
("before this session's first turn"), so the session's log stays the true record of what
its model is sent, and a session store that rebuilds history from events (as
``sessions-sqlite`` does) restores the seeded conversation on ``resume``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dsh.core.errors import InvalidArgumentError
from dsh.runtime.agent import blocks, events
from dsh.runtime.agent.session import Session

ROLES = ("user", "assistant", "tool")


def _bad(index: int, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f'"history"[{index}]: {what}')


def check_history(value: Any) -> list[dict[str, Any]]:
    """``value`` as a list of seedable messages (deep copies), or InvalidArgumentError."""
    if not isinstance(value, list):
        raise InvalidArgumentError('"history" must be an array of messages')
    messages: list[dict[str, Any]] = []
    open_calls: set[str] = set()
    for index, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise _bad(index, "must be an object")
        role = message.get("role")
        if role not in ROLES:
            raise _bad(index, f"role must be one of {', '.join(ROLES)}, not {role!r}")
        content = message.get("content")
        if not isinstance(content, list):
            raise _bad(index, "content must be an array of {type, ...} blocks")
        for position, block in enumerate(content):
            wrong = blocks.problem(block, blocks.KINDS_BY_ROLE[role])
            if wrong is not None:
                raise _bad(index, f"content[{position}]: {wrong}")
        if role == "tool":
            call_id = message.get("toolCallId")
            if call_id not in open_calls:
                raise _bad(index, f"tool result for {call_id!r}, which no earlier "
                                  "assistant message left unanswered")
            open_calls.discard(call_id)
        elif open_calls:
            raise _bad(index, f"tool call {sorted(open_calls)[0]!r} has no result before "
                              "this message")
        if role == "assistant":
            open_calls.update(b["id"] for b in content if b["type"] == "tool-call")
        seeded = copy.deepcopy(dict(message))
        if not isinstance(seeded.get("id"), str):
            seeded["id"] = events.new_id()
        messages.append(seeded)
    if open_calls:
        raise InvalidArgumentError(f'"history": tool call {sorted(open_calls)[0]!r} '
                                           "has no result")
    return messages


def seed(session: Session, messages: list[dict[str, Any]]) -> None:
    """Append checked ``messages`` to a new session's history, logging each as its event."""
    for message in messages:
        session.messages.append(message)
        role = message["role"]
        if role == "user":
            session.emit(events.USER_MESSAGE, message, events.APPEND)
        elif role == "assistant":
            session.emit(events.ASSISTANT_MESSAGE, events.placed(0, 0, message), events.APPEND)
        else:
            session.emit(events.TOOL_RESULT, events.placed(0, 0, message), events.APPEND)
    session.record.context_shown = events.shown_sections(session.messages)
