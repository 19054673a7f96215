"""Reading the SDK protocol's messages: events, run results, approval requests.

The one place that knows the shapes of the SDK protocol (``docs/contracts.md``, "The SDK
protocol": ``session.event``, ``agent/inbox/spliced``, ``assistant/message``, ``turn/end``,
``approval/request``), so the client and sessions handle values, not nested dicts.
Parsing is lenient about what it does not use (new event types and fields pass through
untouched in ``data``) and strict about what it does: a ``session/prompt`` answer without
a message id is a protocol error, not a run that never ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dsh.core.errors import JsonRpcError, ProtocolError

Decision = Literal["allow", "deny"]
ContentBlock = Mapping[str, Any]
Prompt = str | Sequence[ContentBlock]


@dataclass(frozen=True)
class Event:
    """One ``session.event``: its ``type`` (``assistant/delta``, ``tool/call``, ...) and
    ``data`` as the runtime sent them."""

    session_id: str
    type: str
    data: Mapping[str, Any]


SESSION_MOVED = "session/moved"
"""The event type a runtime sends when a session it gave back moved to another runtime."""


@dataclass(frozen=True)
class SessionMoved:
    """A session moved to another runtime (a ``session/moved`` event).

    A runtime keeps a session's lease only while the session has work; a short while
    after it goes idle the lease is given back, and another runtime (``dsh --profile
    headless --session-id``, the web page, another host) may continue it. The runtime
    this client talks to then says so: ``holder`` is ``{host, pid}`` of the runtime
    holding the session now, or ``None`` when that one already gave it back. The next
    prompt from this client takes the session back (busy while the other one runs it).
    A session taken over while it worked here (this runtime stalled past the lease
    expiry) moves the same way, after an ``error`` event and the running turn's
    ``turn/end`` (``error``), both with code ``lease-lost``: the run ends with them.
    """

    session_id: str
    holder: Mapping[str, Any] | None


@dataclass(frozen=True)
class RunResult:
    """One prompt's run, from its inbox receipt to the session's next ``idle``.

    ``final_text`` is the text of the last assistant message; ``stop_reason`` the last
    ``turn/end`` reason kind (``completed``, ``max-tokens``, ``cancelled``, ``error``), or
    ``None`` if no turn ended; ``events`` every event of the session in between.
    """

    session_id: str
    final_text: str
    stop_reason: str | None
    events: tuple[Event, ...]


@dataclass(frozen=True)
class ApprovalRequest:
    """A server-to-client ``approval/request``: may the agent run this tool call?"""

    session_id: str
    tool_call: Mapping[str, Any]


@dataclass(frozen=True)
class ApprovalAnswer:
    """A fuller answer to an :class:`ApprovalRequest` than ``"allow"``/``"deny"``:
    ``remember`` gives the same answer to the tool's later calls in the session (they are
    not asked about; "allow" of a call reaching outside the workspace grants its
    directories instead), and ``note`` is what the model reads of a denial."""

    decision: Decision
    remember: bool = False
    note: str | None = None

    def __post_init__(self) -> None:
        if self.decision not in ("allow", "deny"):
            raise ValueError(f"decision must be 'allow' or 'deny', not {self.decision!r}")

    def wire(self) -> dict[str, Any]:
        """The ``approval/request`` answer."""
        answer: dict[str, Any] = {"decision": self.decision}
        if self.remember:
            answer["remember"] = "session"
        if self.note:
            answer["note"] = self.note
        return answer


def content_blocks(prompt: Prompt) -> list[dict[str, Any]]:
    """A prompt as ``contentBlocks``: a string becomes one text block."""
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    blocks = [dict(block) for block in prompt]
    if not blocks or not all(isinstance(b.get("type"), str) for b in blocks):
        raise ValueError("a prompt is a string or a non-empty list of {type, ...} blocks")
    return blocks


def session_event(params: Any) -> Event | None:
    """The :class:`Event` of a ``session.event`` notification's params (``None`` if it
    does not carry one)."""
    if not isinstance(params, dict):
        return None
    event = params.get("event")
    session_id = params.get("sessionId")
    if not isinstance(event, dict) or not isinstance(session_id, str):
        return None
    kind = event.get("type")
    data = event.get("data")
    return Event(session_id, kind if isinstance(kind, str) else "",
                 data if isinstance(data, dict) else {})


def status_of(params: Any, session_id: str) -> str | None:
    """The status of a ``session.status`` notification about ``session_id``."""
    if isinstance(params, dict) and params.get("sessionId") == session_id:
        status = params.get("status")
        return status if isinstance(status, str) else None
    return None


def session_moved(event: Event | None) -> SessionMoved | None:
    """The :class:`SessionMoved` an event says, or ``None`` for any other event."""
    if event is None or event.type != SESSION_MOVED:
        return None
    holder = event.data.get("holder")
    return SessionMoved(event.session_id, holder if isinstance(holder, dict) else None)


def is_receipt(event: Event, message_id: str) -> bool:
    """Whether ``event`` is the inbox receipt of the queued message ``message_id``."""
    if event.type != "agent/inbox/spliced":
        return False
    inserted = event.data.get("inserted")
    return isinstance(inserted, list) and any(
        isinstance(item, dict) and item.get("id") == message_id for item in inserted
    )


def message_id(answer: Any) -> str:
    """The ``messageId`` of a ``session/prompt`` answer."""
    value = answer.get("messageId") if isinstance(answer, dict) else None
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"session/prompt answered without a messageId: {answer!r}")
    return value


def session_id(answer: Any) -> str:
    """The ``sessionId`` of a ``session/new`` answer."""
    value = answer.get("sessionId") if isinstance(answer, dict) else None
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"session/new answered without a sessionId: {answer!r}")
    return value


def run_result(session: str, events: Sequence[Event]) -> RunResult:
    """Summarise one run's events."""
    return RunResult(session, final_text(events), stop_reason(events), tuple(events))


def final_text(events: Sequence[Event]) -> str:
    """The text blocks of the last ``assistant/message``, joined; ``""`` if none."""
    for event in reversed(events):
        if event.type != "assistant/message":
            continue
        message = event.data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            return "".join(
                str(block.get("text") or "") for block in content
                if isinstance(block, dict) and block.get("type") == "text"
            )
    return ""


def stop_reason(events: Sequence[Event]) -> str | None:
    """The ``data.reason.kind`` of the last ``turn/end``."""
    for event in reversed(events):
        if event.type == "turn/end":
            reason = event.data.get("reason")
            kind = reason.get("kind") if isinstance(reason, dict) else None
            return kind if isinstance(kind, str) else None
    return None


def approval_request(params: Any) -> ApprovalRequest:
    """Parse ``approval/request`` params; -32602 for a malformed one."""
    if isinstance(params, dict):
        session = params.get("sessionId")
        tool_call = params.get("toolCall")
        if isinstance(session, str) and isinstance(tool_call, dict):
            return ApprovalRequest(session, tool_call)
    raise JsonRpcError(-32602, "approval/request needs {sessionId, toolCall}")


def history_page(answer: Any) -> tuple[list[dict[str, Any]], str | None]:
    """``(events, nextCursor)`` of a ``session/history`` answer.

    A runtime from before paging answers ``{events}`` alone: that is its whole log, the
    last page. Anything else malformed is a protocol error, not an empty history.
    """
    events = answer.get("events") if isinstance(answer, dict) else None
    cursor = answer.get("nextCursor") if isinstance(answer, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events) or (
            cursor is not None and not isinstance(cursor, str)):
        raise ProtocolError(f"session/history answered {repr(answer)[:200]}, not "
                            "{events: [...], nextCursor}")
    return events, cursor
