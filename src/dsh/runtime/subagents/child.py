"""One sub-agent: a nested dsh runtime, its one session, and what is known about it.

A :class:`Child` owns an SDK client (:class:`dsh.sdk.AsyncDshClient`) and a watcher task
that reads every notification of the child's session, in order, and keeps the facts the
tools report: the status, the last answer, how the last turn ended. The watcher also keeps
the connection flowing (an unread subscription would pause it), and notices a child
runtime that dies: its status becomes ``failed``.

Status, as ``list_agents`` shows it:

``starting``  the runtime is being spawned (only visible to a concurrent call);
``running``   its session is working through its queued messages;
``idle``      every message answered; the runtime lives on and ``send_message`` wakes it;
``finished``  its runtime was closed (its work done, or cut short by the parent);
``failed``    it did not start, its runtime died, or its last turn ended in an error.

The watcher also relays (``relay``) what the parent's clients are shown of the child, as
the original runtime does: every ``session.event`` the child's runtime sends (its own
session's, and those it relays from its own sub-agents) and its ``subagent.*``
notifications, unchanged, so a client that saw ``subagent.started {parentSessionId,
childSessionId}`` can follow the whole tree by ``sessionId``. They are not stored in the
parent's log: the child's own runtime keeps them.

"Done" is counted by inbox receipts: a message is done at the first ``session.status idle``
after its receipt (``agent/inbox/spliced``), which the runtime sends only once its whole
queue is drained. The receipt precedes the ``session/prompt`` answer on the wire, so
:meth:`Child.prompt` waits until the watcher has read it; an ``idle`` read after that is
the right one, never a stale one from an earlier run.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any

logger = logging.getLogger("dsh.subagent")

SESSION_METHODS = ("session.event", "session.status")
NESTED = ("subagent.started", "subagent.finished")
RELAYED = ("session.event", *NESTED, "subagent.status")
"""What a child's runtime sends that the parent passes on to its own clients: its
session's events and what it says about its own sub-agents (their events included)."""
Relay = Callable[[str, dict[str, Any]], None]


class Status(str, enum.Enum):
    """A sub-agent's lifecycle, in the order it is met (see the module docstring)."""

    STARTING = "starting"
    RUNNING = "running"
    IDLE = "idle"
    FINISHED = "finished"
    FAILED = "failed"


LIVE = (Status.STARTING, Status.RUNNING, Status.IDLE)


class Grandchild:
    """A sub-agent of a sub-agent, as its ``subagent.*`` notifications report it."""

    __slots__ = ("session_id", "status")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.status = "running"


class Child:
    """One sub-agent of a parent session (``agent-N``), from spawn to close.

    A plain class, not a dataclass: this module is imported on every boot, and generating
    a dataclass's methods costs about a millisecond there (issue 3's target).
    """

    def __init__(self, id: str, parent: str, description: str, cwd: str, background: bool,
                 forked: bool, *, on_settled: Callable[[Child], None] | None = None,
                 on_status: Callable[[Child], None] | None = None) -> None:
        self.id = id
        self.parent = parent
        self.description = description
        self.cwd = cwd
        self.background = background
        self.forked = forked
        self.on_settled = on_settled
        self.on_status = on_status
        self.status = Status.STARTING
        self.session_id: str | None = None
        self.last_text = ""
        self.stop_reason: str | None = None
        self.error = ""
        self.runs = 0
        self.pid: int | None = None
        self.grandchildren: dict[str, Grandchild] = {}
        self._client: Any = None
        self._relay: Relay | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._receipts: set[str] = set()
        self._received = 0
        self._done = 0
        self._turn_running = False
        self._changed = asyncio.Condition()
        self._closing = False

    # -- starting -------------------------------------------------------------------------

    async def start(self, client: Any, *, history: list[dict[str, Any]] | None,
                    relay: Relay | None = None, root: str | None = None) -> None:
        """Spawn the runtime and open the session (seeded with ``history`` for a fork);
        from then on the notifications in :data:`RELAYED` are handed to ``relay``.

        The session is created at ``root`` (the parent's workspace root, which becomes
        the child's, default its cwd) and then moved to its cwd, so the child's tools
        reach what the parent's reach. Raises what the SDK raised; the caller closes the
        child then.
        """
        self._client = client
        self._relay = relay
        await client.start()
        self.pid = client.pid
        session = await client.new_session(cwd=root or self.cwd, history=history)
        self.session_id = session.id
        if root is not None and root != self.cwd:
            await client.request("session/working-directory/set",
                                 {"sessionId": session.id, "path": self.cwd})
        subscription = client.subscribe(self._mine)
        self._watcher = asyncio.create_task(self._watch(subscription),
                                            name=f"dsh-subagent-{self.id}")

    async def prompt(self, text: str, *, bound: float,
                     trace: Mapping[str, str] | None = None) -> int:
        """Queue ``text`` on the child's session; returns the receipt count to wait for.

        ``trace`` (the calling tool's W3C trace context) goes as the request's ``_meta``,
        so the child's turn is part of the parent's trace. Returns once the watcher has
        read the message's receipt and, when no turn was running, the turn it starts (so
        an ``interrupt_agent`` right after finds it).
        """
        params: dict[str, Any] = {"sessionId": self.session_id,
                                  "contentBlocks": [{"type": "text", "text": text}]}
        if trace:
            params["_meta"] = dict(trace)
        answer = await self._client.request("session/prompt", params)
        message_id = answer["messageId"]
        await self._until(lambda: message_id in self._receipts or self._gone(), bound)
        target = self._received
        await self._until(lambda: self._turn_running or self._done >= target or self._gone(),
                          bound)
        return target

    async def settled(self, target: int) -> None:
        """Wait (unbounded: the caller's turn bounds it) until receipt ``target`` is done."""
        await self._until(lambda: self._done >= target or self._gone(), None)

    async def cancel(self) -> bool:
        """Cancel the running turn (``session/cancel``); False when none was running."""
        answer = await self._client.request("session/cancel", {"sessionId": self.session_id})
        return bool(answer.get("cancelled")) if isinstance(answer, Mapping) else False

    # -- closing --------------------------------------------------------------------------

    async def close(self) -> str:
        """Close the runtime (its whole process group goes); returns the outcome.

        The outcome is what ``subagent.finished`` reports: how its last turn ended when it
        was idle, ``cancelled`` when it was cut short, ``error`` when it never started or
        its runtime had died. Call once (the registry does).
        """
        if self.status is Status.IDLE:
            outcome = self.stop_reason or "completed"
        elif self.status is Status.FAILED or self.session_id is None:
            outcome = "error"
        else:
            outcome = "cancelled"
        self._closing = True
        try:
            if self._client is not None:
                await self._client.close()
        finally:
            if self._watcher is not None:
                self._watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._watcher
            if self.status in LIVE:
                self.status = Status.FAILED if outcome == "error" else Status.FINISHED
        return outcome

    # -- watching -------------------------------------------------------------------------

    def _mine(self, note: Any) -> bool:
        return note.method in RELAYED or self._own(note.method, note.params)

    def _own(self, method: str, params: Any) -> bool:
        """Whether a notification is about this child's own session (or its sub-agents)."""
        if method in NESTED:
            return True
        return (method in SESSION_METHODS and isinstance(params, dict)
                and params.get("sessionId") == self.session_id)

    def _gone(self) -> bool:
        return self.status not in LIVE

    async def _until(self, ready: Callable[[], bool], bound: float | None) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(ready), bound)

    async def _watch(self, subscription: Any) -> None:
        with subscription:
            try:
                async for note in subscription:
                    params = note.params if isinstance(note.params, dict) else {}
                    if self._relay is not None and note.method in RELAYED:
                        self._pass_on(note.method, params)
                    if self._own(note.method, params):
                        self._read(note.method, params)
                    async with self._changed:
                        self._changed.notify_all()
            except Exception as exc:
                if not self._closing:
                    logger.warning("sub-agent %s lost its runtime: %s", self.id, exc)
                    self.error = f"its runtime ended unexpectedly: {exc}"
                    self._set(Status.FAILED)
                    self._report()
            finally:
                async with self._changed:
                    self._changed.notify_all()

    def _read(self, method: str, params: dict[str, Any]) -> None:
        if method in NESTED:
            child = params.get("childSessionId")
            if params.get("parentSessionId") == self.session_id and isinstance(child, str):
                known = self.grandchildren.setdefault(child, Grandchild(child))
                if method == NESTED[1]:
                    known.status = str(params.get("status", "error"))
            return
        if method == "session.status":
            if params.get("status") == "running":
                self._set(Status.RUNNING)
            elif params.get("status") == "idle" and self._received > self._done:
                self._done = self._received
                self.runs += 1
                self._set(Status.IDLE)
                self._report()
            return
        event = params.get("event")
        if not isinstance(event, dict):
            return
        kind, data = event.get("type"), event.get("data")
        data = data if isinstance(data, dict) else {}
        if kind == "agent/inbox/spliced":
            for item in data.get("inserted") or ():
                if isinstance(item, dict) and isinstance(item.get("id"), str):
                    self._receipts.add(item["id"])
                    self._received += 1
        elif kind == "turn/start":
            self._turn_running = True
            self.error = ""
        elif kind == "assistant/message":
            self.last_text = _text(data.get("message"))
        elif kind == "turn/end":
            self._turn_running = False
            reason = got if isinstance(got := data.get("reason"), dict) else {}
            self.stop_reason = str(reason.get("kind", "error"))
            problem = got if isinstance(got := reason.get("error"), dict) else {}
            self.error = str(problem.get("message", ""))

    def _pass_on(self, method: str, params: dict[str, Any]) -> None:
        try:
            self._relay(method, params)  # type: ignore[misc]
        except Exception:
            logger.exception("sub-agent %s: relaying %s failed", self.id, method)

    def _set(self, status: Status) -> None:
        """Change the status; a live change is told to ``on_status``."""
        if status is self.status:
            return
        self.status = status
        if self.on_status is not None:
            try:
                self.on_status(self)
            except Exception:
                logger.exception("sub-agent %s: status listener failed", self.id)

    def _report(self) -> None:
        if self.on_settled is not None:
            try:
                self.on_settled(self)
            except Exception:
                logger.exception("sub-agent %s: report failed", self.id)


def _text(message: Any) -> str:
    """The joined text blocks of an ``assistant/message``'s message."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("text") or "") for b in content
                   if isinstance(b, dict) and b.get("type") == "text")
