"""One session's state: where it works, what was said, what was emitted, what waits.

A session owns its event log (``seq`` counts from 0 per session, so a client can detect
gaps), the conversation history the model is sent, a bounded inbox of prompts waiting for
a turn, and the tasks running them. It knows nothing of providers or tools: the turn loop
(:mod:`.loop`) drives it, and :mod:`.service` decides when turns start. What survives a
restart is exactly :class:`SessionRecord`, so a persistence service only ever stores that.
"""

from __future__ import annotations

import enum
import os
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from dsh.core.redact import redact
from dsh.runtime.agent import events, summary
from dsh.runtime.tools.confine import Boundary

if TYPE_CHECKING:
    import asyncio


class Status(str, enum.Enum):
    """What ``session.status`` reports: ``running`` from a prompt until the inbox drains."""

    IDLE = "idle"
    RUNNING = "running"


def _unsettled(session: Session) -> None:
    """The ``settle`` of a session no agent watches (tests that build one alone)."""


class SessionRecord:
    """The persistent part of a session (what :mod:`.store` keeps).

    ``system`` is the system message as first shown: a session keeps the prompt it started
    with, so its log stays a true record of what the model was sent. ``context_cwd`` is
    the directory the model was last told about, ``context_shown`` the last text of each
    plugin context section; each is told again only after a change (or a compaction).
    ``root`` is the workspace root, the real path of ``cwd`` when the session was created:
    the boundary of its tools, which moving ``cwd`` never moves. ``granted`` are the
    directories the user granted beyond it ("always" approvals), real paths too.
    ``settings`` are the session's own choices (:mod:`.choices`: route, model, effort,
    policy mode, remembered approvals), as its last ``session/settings`` event says.
    """

    __slots__ = (
        "context_cwd",
        "context_shown",
        "cwd",
        "events",
        "granted",
        "messages",
        "root",
        "session_id",
        "settings",
        "system",
        "title",
        "turns",
    )

    def __init__(self, session_id: str, cwd: str, *, title: str = "",
                 events: list[dict[str, Any]] | None = None,
                 context_cwd: str | None = None, root: str | None = None,
                 granted: list[str] | None = None) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.root = root if root is not None else os.path.realpath(cwd)
        self.granted: list[str] = list(granted or ())
        self.title = title
        self.turns = 0
        self.messages: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = events if events is not None else []
        self.system: dict[str, Any] | None = None
        self.context_cwd = context_cwd
        self.context_shown: dict[str, str] = {}
        self.settings: dict[str, Any] = {}


Notify = Callable[[str, Mapping[str, Any]], None]


class RunningTurn(Protocol):
    """What a session knows of its running turn (a :class:`.loop.Turn`): how to stop it.

    The turn drives the session, never the other way round, so the session names no more
    of it than the flag that cancels it.
    """

    cancelled: asyncio.Event


class Session:
    """A live session: its record plus the runtime-only state (inbox, tasks, status).

    ``notify(method, params)`` delivers ``session.event`` and ``session.status`` to the
    agent's listeners, synchronously and in emission order; ``settle(session)`` is called
    whenever work that :meth:`keep` holds ends, so the agent can tell when the session
    has none left (:meth:`has_work`) and give its lease back.

    ``parked`` is the store version the session was left at when this runtime released
    its lease while keeping it in memory (None while the lease is held): a later use
    takes the lease back and checks nothing was written meanwhile.
    """

    def __init__(self, record: SessionRecord, notify: Notify,
                 settle: Callable[[Session], None] = _unsettled) -> None:
        self.record = record
        self.status = Status.IDLE
        self.inbox: deque[dict[str, Any]] = deque()
        self.runner: asyncio.Task[None] | None = None
        self.turn: RunningTurn | None = None  # from turn/start until turn/end
        self.turn_task: asyncio.Task[Any] | None = None
        self.cancel_requested = False
        self.cancelled_prompts: set[str] = set()  # queued prompts cancelled before their turn
        self.failure: Mapping[str, str] | None = None  # ends the running turn with an error
        self.kept = 0  # background work holding the session here (jobs, sub-agents)
        self.parked: tuple[int, int] | None = None
        self.release_timer: asyncio.TimerHandle | None = None
        # The W3C trace context a client sent with a queued prompt, by its message id,
        # until that prompt's turn starts (telemetry makes the turn a child of it).
        self.traces: dict[str, Mapping[str, str]] = {}
        # The user's own shell command and its cancel event (.usershell): turns wait for it.
        self.user_command: tuple[asyncio.Future[Any], asyncio.Event] | None = None
        self._notify = notify
        self._settle = settle

    @property
    def id(self) -> str:
        """The session id."""
        return self.record.session_id

    @property
    def cwd(self) -> str:
        """The absolute working directory."""
        return self.record.cwd

    @property
    def root(self) -> str:
        """The workspace root (real path), fixed at creation."""
        return self.record.root

    def boundary(self, protected: tuple[str, ...]) -> Boundary:
        """What this session's tools may reach now (``protected``: the dsh home and the
        configured protected paths, real paths)."""
        return Boundary(self.record.root, tuple(self.record.granted), protected)

    def grant(self, directories: list[str]) -> None:
        """Add granted roots (real paths); kept with the record, so ``resume`` keeps them."""
        for directory in directories:
            if directory not in self.record.granted:
                self.record.granted.append(directory)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as the model is sent it (without the system message)."""
        return self.record.messages

    def emit(self, type: str, data: Mapping[str, Any],
             extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Log an event with the next ``seq`` and deliver it; returns the event.

        The message of an ``error`` or ``turn/end`` event is diagnostic text: a credential
        inside a URL it names (a provider's ``user:pass@``, an MCP server's ``?key=``) is
        masked before the event is stored or sent (:func:`dsh.core.redact.redact`).
        """
        data = _redacted(type, data)
        event = events.event(type, len(self.record.events), data, extra or {})
        self.record.events.append(event)
        self._notify("session.event", {"sessionId": self.id, "event": event})
        return event

    def set_status(self, status: Status) -> None:
        """Change status and announce it (only actual changes are announced)."""
        if status is not self.status:
            self.status = status
            self._notify("session.status", {"sessionId": self.id, "status": status.value})

    def keep(self) -> Callable[[], None]:
        """Keep this session's lease in this runtime while background work of it lives (a
        job, a sub-agent); returns the function that ends the hold (once, however often
        it is called)."""
        self.kept += 1
        ended = False

        def end() -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.kept -= 1
                self.settle()

        return end

    def settle(self) -> None:
        """Work of this session ended (a turn runner, a hold): the agent checks whether
        any is left and, if none, gives the lease back after its grace."""
        self._settle(self)

    def has_work(self) -> bool:
        """Whether anything still runs or waits here: a turn (its approvals included),
        queued prompts, or held background work."""
        return (self.runner is not None or self.turn is not None or bool(self.inbox)
                or self.kept > 0)

    def waiting(self) -> int:
        """Prompts queued behind the one running (or about to run); the inbox bound.

        Between turns the inbox head is the next turn's prompt, already on its way, so it
        does not count: how many prompts a client may queue does not depend on whether
        the runner task has been scheduled yet.
        """
        if self.turn is not None or not self.inbox:
            return len(self.inbox)
        return len(self.inbox) - 1

    def change_cwd(self, path: str) -> str:
        """Move to ``path`` (relative to the current directory, or absolute).

        Raises NotADirectoryError naming the resolved path when it is not a directory.
        The root stays where it is: whether a move out of it may happen is decided before
        (the ``working_directory`` tool's call is judged like any path argument).
        """
        target = os.path.normpath(os.path.join(self.cwd, path))
        if not os.path.isdir(target):
            raise NotADirectoryError(f"not a directory: {target}")
        self.record.cwd = target
        return target

    def summary(self) -> dict[str, Any]:
        """The listing entry of a session the store does not list (yet): folded from its
        log (see :mod:`.summary`)."""
        record = self.record
        folded = summary.fold(record.events)
        return summary.entry(self.id, record.cwd, record.root, record.title or folded.title,
                             0, folded.updated, folded.turns, folded.usage, folded.cost,
                             status=self.status.value)


def _redacted(type: str, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with its diagnostic message redacted (``error`` and ``turn/end`` only)."""
    if type == events.ERROR and isinstance(data.get("message"), str):
        return {**data, "message": redact(data["message"])}
    if type == events.TURN_END:
        reason = data.get("reason")
        error = reason.get("error") if isinstance(reason, Mapping) else None
        if (isinstance(reason, Mapping) and isinstance(error, Mapping)
                and isinstance(error.get("message"), str)):
            error = {**error, "message": redact(error["message"])}
            return {**data, "reason": {**reason, "error": error}}
    return data
