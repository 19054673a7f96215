"""How a session's events become the transcript: the chat's side of the SDK protocol's
notifications.

The app (:mod:`dsh.chat.app`) queues every notification and :meth:`Drawing.handle` draws
them one at a time, in order: the prompt, the reasoning (folded), the answer (markdown,
streamed), each tool call with its result and diff, sub-agents' events under their call,
errors with a hint, and the turn's end. A resumed session's log goes through the same
code (``replay``), its answers drawn whole.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.containers import VerticalScroll

from dsh.chat.answer import LIVE_ANSWERS, Answer, SettledAnswer
from dsh.chat.host import HostApp
from dsh.chat.link import Link
from dsh.chat.safety import line, text
from dsh.chat.status import Status, tokens
from dsh.chat.widgets import (
    ErrorLine,
    Notice,
    Reasoning,
    ToolCall,
    UserMessage,
    fallback_diff,
)
from dsh.core.jsonrpc import Notification

if TYPE_CHECKING:
    from textual.widget import Widget

HINTS = {
    "missing-key": "set the key (the message says where), then send again",
    "invalid-key": "fix the key (the message says where), then send again",
    "auth": "the provider refused the key: check it, or /provider to use another route",
    "insufficient-balance": "top up the account, or /provider to use another route",
    "context-overflow": "/compact summarises the conversation; /new starts afresh",
    "max-steps": "send 'go on' to continue where it stopped",
    "interrupted": "the runtime stopped during this turn; send a message to continue",
    "empty-answer": "ask again, or rephrase",
}
MAX_REPLAY_EVENTS = 20000
"""A resumed session's transcript shows at most its last this many events."""


class Transcript(VerticalScroll):
    """The conversation. Anchored to its end (Textual's anchor): new output stays in view
    until the user scrolls up, and again once they scroll back down to the end."""

    def keep_up(self) -> None:
        """Follow the end again (after the user sent something)."""
        self.anchor()


class Drawing(HostApp):
    """The transcript's drawing, mixed into the app (whose state it uses: ``transcript``,
    ``status``, ``link``, ``say``)."""

    inbox: asyncio.Queue[Notification]
    transcript: Transcript
    status: Status
    answer: Answer | None
    reasoning: Reasoning | None
    reasoning_since: float | None
    calls: dict[str, ToolCall]
    last_call: ToolCall | Reasoning | None
    sent: dict[str, UserMessage]
    subagents: dict[str, ToolCall]
    pending_shell: list[str]
    running: bool
    moved: bool
    handling: bool
    link: Link

    if TYPE_CHECKING:  # the app's (and its slash commands') own, which this one calls
        def say(self, widget: Widget, *, under: ToolCall | None = None) -> Widget: ...
        def refresh_status(self) -> None: ...
        async def _run_shell(self, command: str) -> None: ...
        def _shell_shown(self, command: str, ran: Mapping[str, Any]) -> None: ...
        async def _refresh_settings(self) -> None: ...
        async def _refresh_usage(self) -> None: ...

    def _heard(self, notification: Notification) -> None:
        self.inbox.put_nowait(notification)

    async def _consume(self) -> None:
        while True:
            notification = await self.inbox.get()
            self.handling = True
            try:
                await self.handle(notification)
            except Exception as exc:  # one bad event must not stop the transcript
                self.say(ErrorLine(f"could not show an event: {type(exc).__name__}: {exc}"))
            finally:
                self.handling = False

    async def handle(self, notification: Notification, *, replay: bool = False) -> None:
        """Draw one notification of the current session (or of its sub-agents)."""
        params = notification.params if isinstance(notification.params, dict) else {}
        method = notification.method
        session = self.link.session_id
        if method == "session.status":
            if params.get("sessionId") == session and params.get("status") == "idle":
                await self._idle()
            return
        if method in ("subagent.started", "subagent.finished"):
            if params.get("parentSessionId") == session:
                self._subagent(method, params)
            return
        if method != "session.event":
            return
        event = params.get("event") or {}
        owner = params.get("sessionId")
        if owner != session:
            parent = self.subagents.get(str(owner))
            if parent is not None:
                self._nested(parent, event)
            return
        await self.event(event, replay=replay)

    async def event(self, event: Mapping[str, Any], *, replay: bool = False) -> None:
        """One event of the current session."""
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "turn/start":
            self.running = True
            if not replay:
                self.status.running_since = time.monotonic()
            self.answer = self.reasoning = None
        elif kind == "step/start":
            await self._settle()
            self.answer = self.reasoning = None
        elif kind == "user/message":
            self._user_message(data, replay=replay)
        elif kind == "assistant/reasoning-delta" and not replay:
            if self.reasoning is None:
                self.reasoning = Reasoning()
                self.reasoning_since = time.monotonic()
                self.last_call = self.reasoning
                self.say(self.reasoning)
            self.reasoning.add(str(data.get("text", "")))
        elif kind == "assistant/delta" and not replay:
            if self.answer is None:
                self.answer = Answer()
                await self.transcript.mount(self.answer)  # its parts take text once mounted
            self.answer.add(str(data.get("text", "")))
        elif kind == "assistant/retry" and not replay:
            if self.answer is not None:
                await self.answer.reset()
            self.say(Notice("the stream broke off; asking the model again"))
        elif kind == "assistant/message":
            await self._assistant(data, replay=replay)
        elif kind == "tool/call":
            await self._settle()
            call = ToolCall(str(data.get("callId")), str(data.get("name")),
                            data.get("arguments"))
            self.calls[call.call_id] = call
            self.last_call = call
            self.say(call)
        elif kind == "tool/result":
            self._tool_result(data)
        elif kind == "user/shell":
            if replay:
                self._shell_shown(str(data.get("command")), data)
        elif kind == "error":
            self.say(ErrorLine(str(data.get("message", "error")), data.get("hint")))
        elif kind == "turn/end":
            await self._turn_end(data)
        elif kind == "context/compacted":
            self.say(Notice(f"compacted: {data.get('removedCount')} earlier messages "
                            f"summarised ({tokens(int(data.get('tokensBefore') or 0))} → "
                            f"{tokens(int(data.get('tokensAfter') or 0))} tokens)"))
        elif kind == "session/settings" and not replay:
            self.run_worker(self._refresh_settings(), group="settings", exclusive=True)
        elif kind == "request/context":
            if isinstance(data.get("contextWindow"), int):
                self.status.context_window = data["contextWindow"]
        elif kind == "plan/update":
            entries = data.get("entries") or []
            marks = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}
            shown = "\n".join(f"{marks.get(str(e.get('status')), '[ ]')} {line(e.get('content'))}"
                              for e in entries if isinstance(e, Mapping))
            self.say(Notice(text(f"plan:\n{shown}" if shown else "plan cleared")))
        elif kind == "mode/update":
            self.say(Notice(f"mode: {line(data.get('mode'))}"))
        elif kind == "session/moved" and not replay:
            self._moved(data)
        if not replay and kind not in ("assistant/delta", "assistant/reasoning-delta"):
            self.refresh_status()  # a spinner tick redraws it while deltas stream

    def _user_message(self, data: Mapping[str, Any], *, replay: bool) -> None:
        source = data.get("source") or {}
        if source.get("kind") != "user":
            return
        shown = self.sent.pop(str(data.get("id")), None)
        if shown is not None:
            shown.started()
        elif replay:
            said = "".join(b.get("text", "") for b in data.get("content", ())
                           if isinstance(b, Mapping) and b.get("type") == "text")
            images = [b for b in data.get("content", ())
                      if isinstance(b, Mapping) and b.get("type") == "image"]
            self.say(UserMessage(said, [f"image ({b.get('mimeType')})" for b in images]))

    async def _settle(self) -> None:
        if self.answer is not None:
            await self.answer.settle()
        if self.reasoning is not None and self.reasoning_since is not None:
            self.reasoning.done(time.monotonic() - self.reasoning_since)
            self.reasoning_since = None

    async def _assistant(self, data: Mapping[str, Any], *, replay: bool) -> None:
        message = data.get("message") or {}
        content = [b for b in message.get("content", ()) if isinstance(b, Mapping)]
        final = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        thought = "".join(str(b.get("text", "")) for b in content
                          if b.get("type") == "reasoning")
        if thought and (replay or self.reasoning is None):
            self.reasoning = Reasoning()
            self.say(self.reasoning)
            self.reasoning.add(thought)
        if self.reasoning is not None:
            self.reasoning.done(None if self.reasoning_since is None
                                else time.monotonic() - self.reasoning_since)
            self.reasoning_since = None
        if final:
            if self.answer is None and replay:
                self.say(SettledAnswer(final))
            elif self.answer is None:
                self.answer = Answer(final)
                self.say(self.answer)
                self._retire_answers()
            else:
                await self.answer.settle(final)
                self._retire_answers()
        elif self.answer is not None:
            await self.answer.settle()
        used = data.get("usage")
        if isinstance(used, Mapping):
            self._fold_usage(used, totals=not replay)

    def _retire_answers(self) -> None:
        """Answers before the last few become one widget each (:class:`SettledAnswer`)."""
        live = [w for w in self.transcript.children if isinstance(w, Answer)]
        for old in live[:-LIVE_ANSWERS]:
            if old is self.answer:
                continue
            settled = SettledAnswer(old.text)
            self.transcript.mount(settled, after=old)
            old.remove()

    def _fold_usage(self, used: Mapping[str, Any], *, totals: bool = True) -> None:
        """A model call's usage: the context it filled, and (live, not in a replay, whose
        totals come from the session's summary) the running totals."""
        s = self.status
        if isinstance(used.get("inputTokens"), int):
            s.context_tokens = used["inputTokens"]
        if not totals:
            return
        s.input_tokens += int(used.get("inputTokens") or 0)
        s.output_tokens += int(used.get("outputTokens") or 0)
        s.cache_hit_tokens += int(used.get("cacheHitTokens") or 0)
        cost = used.get("costUsd")
        if isinstance(cost, (int, float)) and cost > 0:
            s.cost_usd = (s.cost_usd or 0.0) + float(cost)

    def _moved(self, data: Mapping[str, Any]) -> None:
        """Another runtime continued the session this chat's runtime had given back: say
        so; the next message takes it back (and redraws what happened there)."""
        holder = data.get("holder")
        where = (f" (pid {line(holder.get('pid'))} on {line(holder.get('host'))})"
                 if isinstance(holder, Mapping) else "")
        self.moved = True
        self.running = False
        self.status.running_since = None
        self.say(Notice(text(f"this session was continued in another runtime{where}; your "
                             "next message takes it back here, with what was said there",
                             "italic")))

    def _tool_result(self, data: Mapping[str, Any]) -> None:
        message = data.get("message") or {}
        call = self.calls.pop(str(message.get("toolCallId")), None)
        if call is None:
            return
        call.finish(data)
        if message.get("isError"):
            return
        diff = data.get("diff")
        if isinstance(diff, Mapping):  # the tool's own diff (data.diff), context and all
            if diff.get("unified"):
                call.diff(str(diff["unified"]), truncated=bool(diff.get("truncated")))
            elif diff.get("omitted"):
                call.nest(Notice(f"not diffed: {line(diff['omitted'])}"))
        elif call.name_ in ("write_file", "edit_file"):
            # A runtime whose tools report no diff: what the arguments say (no context).
            made = fallback_diff(call.name_, call.arguments)
            if made:
                call.diff(made)

    async def _turn_end(self, data: Mapping[str, Any]) -> None:
        await self._settle()
        reason = data.get("reason") or {}
        kind = reason.get("kind")
        if kind == "error":
            error = reason.get("error") or {}
            code = str(error.get("code") or "")
            self.say(ErrorLine(str(error.get("message") or "the turn failed"),
                               HINTS.get(code)))
        elif kind == "cancelled":
            self.say(Notice("cancelled"))
        elif kind == "max-tokens":
            self.say(Notice("the answer reached the model's token limit; send 'go on' to "
                            "continue"))
        for call in self.calls.values():
            if call.outcome is None:
                call.finish({"message": {"isError": True, "content": [
                    {"type": "text", "text": "not run"}]}})
        self.calls.clear()
        self.answer = self.reasoning = None

    async def _idle(self) -> None:
        self.running = False
        self.status.running_since = None
        self.status.queued = 0
        self.refresh_status()
        if self.link.session_id is not None:
            self.run_worker(self._refresh_usage(), group="usage", exclusive=True)
        while self.pending_shell and not self.running:
            await self._run_shell(self.pending_shell.pop(0))

    def _subagent(self, method: str, params: Mapping[str, Any]) -> None:
        child = str(params.get("childSessionId"))
        parent = next((c for c in reversed(list(self.calls.values()))
                       if c.name_.startswith("subagent")), None)
        if method == "subagent.started" and parent is not None:
            self.subagents[child] = parent
            parent.nest(Notice(f"sub-agent {line(child)[:8]} started"))
        elif method == "subagent.finished":
            owner = self.subagents.pop(child, None)
            if owner is not None:
                owner.nest(Notice(f"sub-agent {line(child)[:8]} "
                                  f"{line(params.get('status', 'finished'))}"))

    def _nested(self, parent: ToolCall, event: Mapping[str, Any]) -> None:
        kind, data = event.get("type"), event.get("data") or {}
        if kind == "tool/call":
            parent.nest(Notice(Text.assemble(("→ ", "dim"), (line(data.get("name")), "bold"),
                                             " ", (line(data.get("arguments"))[:80], "dim"))))
        elif kind == "assistant/message":
            said = "".join(b.get("text", "") for b in (data.get("message") or {}).get(
                "content", ()) if isinstance(b, Mapping) and b.get("type") == "text")
            if said:
                parent.nest(Notice(text(said[:400])))
        elif kind == "turn/end":
            parent.nest(Notice(f"sub-agent turn: {line((data.get('reason') or {}).get('kind'))}"))
