"""The terminal chat: a Textual application that is an SDK client of the chat profile.

Layout, top to bottom: the transcript (scrolls; PageUp/PageDown, the mouse wheel, Ctrl+F
searches it), an approval when one is asked, completion suggestions, the editor
(:mod:`.composer`) and the status line (:mod:`.status`). The runtime is spawned through
the SDK (:mod:`.link`) when the app mounts; every notification of the current session is
queued and handled in order by one task, so the transcript is drawn in the order the
runtime spoke, and a slow redraw never reorders it.

Messages typed while a turn runs are sent at once: the runtime queues them on the
session (its serial queue), and they are shown as queued until their turn starts. A
``!command`` waits for the session to be idle (the runtime runs one thing at a time).

Ctrl+C cancels the running turn (the runtime stops the tool's process group); on an idle,
empty editor it asks for a second press and then quits; Ctrl+D quits. Quitting shuts the
runtime down and says how to continue the session. Textual restores the terminal however
the app ends; the runtime has stored every event as it happened, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Markdown, OptionList, Static

from dsh.chat import attach, commands
from dsh.chat.composer import Composer
from dsh.chat.history import History
from dsh.chat.launch import ChatOptions
from dsh.chat.link import Link
from dsh.chat.safety import clean, line, markdown_parser, text
from dsh.chat.screens import ApprovalPrompt, SessionPicker
from dsh.chat.status import Status, render, sandbox_of, short_path, tokens
from dsh.chat.widgets import (
    LIVE_ANSWERS,
    Answer,
    ErrorLine,
    Notice,
    Reasoning,
    SettledAnswer,
    ToolCall,
    UserMessage,
    diff_text,
    fallback_diff,
)
from dsh.core.errors import DshError
from dsh.core.jsonrpc import Notification
from dsh.sdk import ApprovalAnswer, ApprovalRequest

DOUBLE_PRESS_S = 2.0
"""A second Ctrl+C on an empty editor within this many seconds quits."""
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


class ChatApp(App[int]):
    """The chat on ``options``' profile."""

    TITLE = "dsh chat"
    CSS = """
    Screen { layout: vertical; }
    #transcript { height: 1fr; padding: 0 1; scrollbar-size-vertical: 1; }
    #approvals { height: auto; }
    #suggest { height: auto; max-height: 8; display: none; border: none; }
    #search { display: none; }
    #status { height: auto; max-height: 2; padding: 0 1; background: $panel;
              color: $text; }
    .found { background: $accent 30%; }
    """
    BINDINGS = [
        Binding("ctrl+c", "interrupt", "cancel / quit", priority=True, show=False),
        Binding("ctrl+d", "leave", "quit", priority=True, show=False),
        Binding("ctrl+o", "toggle_last", "open the last call", show=False),
        Binding("ctrl+f", "search", "search", show=False),
        Binding("pageup", "page(-1)", show=False, priority=True),
        Binding("pagedown", "page(1)", show=False, priority=True),
        Binding("escape", "close_panels", show=False),
    ]

    def __init__(self, options: ChatOptions) -> None:
        # NO_COLOR: Textual's NoColor filter (no colour at all; bold, italic and reverse
        # still mark things), which it applies to native ANSI colours.
        super().__init__(ansi_color=True if "NO_COLOR" in os.environ else None)
        self.options = options
        self.history = History(options.home, options.profile)
        self.status = Status(workspace=str(options.cwd))
        self.link = Link(options, self._heard, self._ask, self._runtime_gone)
        self.inbox: asyncio.Queue[Notification] = asyncio.Queue()
        self.answer: Answer | None = None
        self.reasoning: Reasoning | None = None
        self.reasoning_since: float | None = None
        self.calls: dict[str, ToolCall] = {}
        self.last_call: ToolCall | Reasoning | None = None
        self.sent: dict[str, UserMessage] = {}
        self.pending_shell: list[str] = []
        self.subagents: dict[str, ToolCall] = {}
        self.running = False
        self.handling = False
        self.ready = asyncio.Event()
        self.dead: str | None = None
        self.last_interrupt = 0.0
        self.exit_note = ""
        if _light_terminal():
            self.theme = "textual-light"

    # -- layout and start -------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Transcript(id="transcript")
        yield Vertical(id="approvals")
        yield OptionList(id="suggest", markup=False)
        yield Input(id="search", placeholder="search the transcript (Enter: next, Esc: close)")
        yield Composer(self.history, id="composer")
        yield Static(id="status")

    async def on_mount(self) -> None:
        self.transcript = self.query_one("#transcript", Transcript)
        self.composer = self.query_one(Composer)
        self.composer.focus()
        self.transcript.anchor()
        self.status.note = "starting the runtime…"
        self.refresh_status()
        self.set_interval(0.1, self._tick)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP):
            # Asked to end (or the terminal went away): leave as Ctrl+D does, so the
            # terminal is restored and the runtime shut down, with the signal's exit code.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self._signalled, signum)
        self.run_worker(self._consume(), name="events", exclusive=False)
        self.run_worker(self._boot(), name="boot", exclusive=False)

    async def _boot(self) -> None:
        try:
            await self.link.start()
        except DshError as exc:
            self.say(ErrorLine(f"the runtime did not start: {exc}",
                               getattr(exc, "hint", None) or _tail(self.link.stderr)))
            self.status.note = "no runtime"
            self.refresh_status()
            return
        self.status.note = ""
        self.ready.set()
        self.run_worker(self._sandbox(), name="doctor")
        o = self.options
        try:
            if o.resume:
                await self.open_session(o.resume)
            elif o.continue_last:
                last = await self._last_here()
                if last is None:
                    self.say(Notice("no earlier session in this workspace: this is a new one"))
                else:
                    await self.open_session(last)
        except DshError as exc:
            self.say(ErrorLine(str(exc), "/sessions lists the sessions you can continue"))
        if self.link.session_id is None:
            self.say(Notice(Text.assemble(
                ("dsh chat", "bold"), f" · profile {line(o.profile)} · ",
                (line(short_path(str(o.cwd))), "dim"),
                " · /help for commands, @file to attach, !cmd to run one yourself")))
        await self._refresh_settings()

    async def _sandbox(self) -> None:
        """The sandbox in force, as ``dsh doctor`` reports it (off the event loop)."""
        from dsh.core import process

        o = self.options
        argv = [*process.python_command("dsh"), "--home", str(o.home), "doctor",
                "--profile", o.profile, "--json"]
        env = {k: v for k, v in os.environ.items() if k != "DSH_SERVE"}
        try:
            done = await asyncio.to_thread(process.run, argv, cwd=str(o.cwd), env=env,
                                           timeout=30, text=True)
            self.status.sandbox = sandbox_of(json.loads(done.stdout))
        except (OSError, ValueError, DshError):
            self.status.sandbox = "unknown (dsh doctor did not answer)"
        self.refresh_status()

    # -- the transcript ---------------------------------------------------------------------

    def say(self, widget: Widget, *, under: ToolCall | None = None) -> Widget:
        """Add ``widget`` to the transcript (or under a call) and keep the end in view."""
        if under is not None:
            under.nest(widget)
        else:
            self.transcript.mount(widget)
        return widget

    def refresh_status(self) -> None:
        self.status.session_id = self.link.session_id
        width = self.size.width - 2 if self.size.width else 200
        self.query_one("#status", Static).update(render(self.status, time.monotonic(),
                                                        width=width))

    def on_resize(self, event: Any) -> None:
        self.call_after_refresh(self.refresh_status)

    def _tick(self) -> None:
        if self.status.running_since is not None:
            self.refresh_status()

    # -- notifications ------------------------------------------------------------------

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
                self.say(self.answer)
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
            shown = "\n".join(f"{marks.get(e.get('status'), '[ ]')} {line(e.get('content'))}"
                              for e in entries if isinstance(e, Mapping))
            self.say(Notice(text(f"plan:\n{shown}" if shown else "plan cleared")))
        elif kind == "mode/update":
            self.say(Notice(f"mode: {line(data.get('mode'))}"))
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
                self.say(SettledAnswer(final, light=self.theme == "textual-light"))
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
        if isinstance(used, Mapping) and not replay:
            self._fold_usage(used)

    def _retire_answers(self) -> None:
        """Answers before the last few become one widget each (:class:`SettledAnswer`)."""
        live = [w for w in self.transcript.children if isinstance(w, Answer)]
        for old in live[:-LIVE_ANSWERS]:
            if old is self.answer:
                continue
            settled = SettledAnswer(old.text, light=self.theme == "textual-light")
            self.transcript.mount(settled, after=old)
            old.remove()

    def _fold_usage(self, used: Mapping[str, Any]) -> None:
        s = self.status
        s.input_tokens += int(used.get("inputTokens") or 0)
        s.output_tokens += int(used.get("outputTokens") or 0)
        s.cache_hit_tokens += int(used.get("cacheHitTokens") or 0)
        if isinstance(used.get("costUsd"), (int, float)):
            s.cost_usd = (s.cost_usd or 0.0) + float(used["costUsd"])
        if isinstance(used.get("inputTokens"), int):
            s.context_tokens = used["inputTokens"]

    def _tool_result(self, data: Mapping[str, Any]) -> None:
        message = data.get("message") or {}
        call = self.calls.pop(str(message.get("toolCallId")), None)
        if call is None:
            return
        call.finish(data)
        if message.get("isError"):
            return
        diff = data.get("diff")
        if isinstance(diff, Mapping) and diff.get("unified"):
            call.diff(str(diff["unified"]), truncated=bool(diff.get("truncated")))
        elif isinstance(diff, str) and diff:
            call.diff(diff)
        elif call.name_ in ("write_file", "edit_file"):
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

    # -- approvals ----------------------------------------------------------------------

    async def _ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        """The runtime asks about a guarded call: ask the user inline, by key."""
        # The call's own event was sent before the question: let it be drawn first.
        for _ in range(200):
            if self.inbox.empty() and not self.handling:
                break
            await asyncio.sleep(0.005)
        call = self.calls.get(str(request.tool_call.get("callId")))
        if call is not None:
            call.waiting("waiting for your answer")
        prompt = ApprovalPrompt(request.tool_call)
        box = self.query_one("#approvals", Vertical)
        await box.mount(prompt)
        prompt.focus()
        self.refresh_status()
        try:
            decision, remember, note = await prompt.answer
        finally:
            await prompt.remove()
            self.composer.focus()
        said = {("allow", False): "allowed once", ("allow", True): "allowed for this session",
                ("deny", False): "denied", ("deny", True): "denied for this session"}[
            (decision, remember)]
        if note:
            said += f": {note}"
        if call is not None:
            call.decided(said)
        else:
            self.say(Notice(text(f"{line(request.tool_call.get('name'))}: {said}", "italic")))
        return ApprovalAnswer(decision, remember=remember, note=note or None)  # type: ignore[arg-type]

    # -- input --------------------------------------------------------------------------

    async def on_composer_submitted(self, message: Composer.Submitted) -> None:
        typed = message.text
        self._hide_suggestions()
        command = commands.parse(typed.strip())
        self.history.add(typed)
        if isinstance(command, str):
            self.say(ErrorLine(command))
        elif command is not None:
            self.run_worker(self.run_command(command), group="command")
        elif typed.startswith("!") and typed[1:].strip():
            if self.running:
                self.pending_shell.append(typed[1:].strip())
                self.say(Notice(f"queued: !{line(typed[1:].strip())}"))
            else:
                self.run_worker(self._run_shell(typed[1:].strip()), group="shell")
        else:
            self.run_worker(self.send(typed[1:] if typed.startswith("//") else typed),
                            group="send")

    async def send(self, typed: str) -> None:
        """Send a message (with its @attachments), starting the runtime again if it died."""
        await self.ready.wait()
        blocks: list[dict[str, Any]] = [{"type": "text", "text": typed}]
        shown: list[str] = []
        for mention in attach.mentions(typed):
            try:
                root, cwd = await self._where()
                found = attach.attach(root, cwd, mention)
            except attach.AttachError as exc:
                self.say(ErrorLine(str(exc), "nothing was sent; fix the @path or remove it"))
                return
            except OSError as exc:
                self.say(ErrorLine(f"@{mention}: {exc.strerror or exc}", "nothing was sent"))
                return
            blocks.append(found.block)
            shown.append(found.said)
        try:
            if self.dead is not None:
                self.say(Notice("starting a new runtime…"))
                await self.link.restart()
                self.dead = None
                self.status.note = ""
            if self.link.session_id is None:
                problem = await self.link.route_problem()
                if problem:
                    self.say(ErrorLine(problem))
                    return
            view = UserMessage(typed, shown, queued=self.running)
            self.transcript.keep_up()
            self.say(view)
            fresh = self.link.session_id is None
            message_id = await self.link.prompt(blocks)
            if fresh:
                self.run_worker(self._refresh_settings(), group="settings")
        except DshError as exc:
            self.say(ErrorLine(str(exc), getattr(exc, "hint", None)))
            return
        self.sent[message_id] = view
        if self.running:
            self.status.queued += 1
        elif self.status.running_since is None:
            self.status.running_since = time.monotonic()
        self.refresh_status()

    async def _where(self) -> tuple[str, str]:
        """The workspace root and working directory for @paths."""
        if self.link.session_id is not None:
            answer = await self.link.request("session/working-directory/get")
            return str(self.options.cwd), str(answer.get("cwd") or self.options.cwd)
        return str(self.options.cwd), str(self.options.cwd)

    async def _run_shell(self, command: str) -> None:
        await self.ready.wait()
        try:
            if self.dead is not None:
                await self.link.restart()
                self.dead = None
            await self.link.ensure_session()
            self.status.running_since = time.monotonic()
            self.status.note = f"!{command}"
            self.refresh_status()
            ran = await self.link.request("session/shell", command=command)
        except DshError as exc:
            self.say(ErrorLine(f"!{command}: {exc}"))
            return
        finally:
            self.status.running_since = None
            self.status.note = ""
            self.refresh_status()
        self._shell_shown(command, ran)

    def _shell_shown(self, command: str, ran: Mapping[str, Any]) -> None:
        call = ToolCall("shell", "!", json.dumps({"command": command}))
        self.say(call)
        call.finish({"message": {"isError": bool(ran.get("isError")),
                                 "content": [{"type": "text", "text": str(ran.get("output"))}]}})
        call.collapsed = False
        self.last_call = call

    def on_composer_typed(self, message: Composer.Typed) -> None:
        word = message.token
        found: list[str] = []
        if word.startswith("/") and self.composer.text.startswith("/") and " " not in \
                self.composer.text:
            found = commands.completions(word)
        elif word.startswith("@"):
            root = str(self.options.cwd)
            found = ["@" + c for c in attach.candidates(root, root, word[1:])][:50]
        self.composer.suggestions = found
        suggest = self.query_one("#suggest", OptionList)
        suggest.clear_options()
        if found and found != [word]:
            suggest.add_options([clean(f) for f in found])
            suggest.display = True
        else:
            suggest.display = False

    def _hide_suggestions(self) -> None:
        self.query_one("#suggest", OptionList).display = False
        self.composer.suggestions = []

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list.id == "suggest":
            self.composer.complete(str(event.option.prompt))
            self._hide_suggestions()
            self.composer.focus()

    # -- slash commands -----------------------------------------------------------------

    async def run_command(self, command: commands.Command) -> None:
        """Do what ``/name argument`` asks."""
        name, argument = command.spec.name, command.argument
        if name == "quit":
            await self.action_leave()
            return
        if name == "help":
            self.say(Markdown(commands.help_text(), parser_factory=markdown_parser))
            return
        if name == "clear":
            await self.transcript.remove_children()
            return
        if name == "theme":
            wanted = argument or ("textual-light" if self.theme == "textual-dark" else "dark")
            self.theme = "textual-light" if "light" in wanted else "textual-dark"
            return
        await self.ready.wait()
        try:
            if name == "new":
                self.link.leave()
                await self.transcript.remove_children()
                self.status = Status(workspace=str(self.options.cwd),
                                     sandbox=self.status.sandbox)
                self.say(Notice("a new session starts with your next message"))
                await self._refresh_settings()
            elif name == "sessions" or (name == "resume" and not argument):
                await self._pick()
            elif name == "resume":
                await self.open_session(argument)
            elif name in ("model", "effort", "provider"):
                await self._choose(name, argument)
            elif name == "approval":
                await self._approval(argument)
            elif name == "compact":
                done = await self.link.request("session/compact")
                self.say(Notice(f"compacted: {done.get('removedCount')} messages summarised, "
                                f"{tokens(int(done.get('tokensBefore') or 0))} → "
                                f"{tokens(int(done.get('tokensAfter') or 0))} tokens"
                                if done.get("compacted") else "nothing to compact yet"))
            elif name == "cost":
                await self._cost()
            elif name == "diff":
                await self._diff()
        except DshError as exc:
            self.say(ErrorLine(str(exc), getattr(exc, "hint", None)))
        self.refresh_status()

    async def _choose(self, name: str, argument: str) -> None:
        routes = await self.link.client.models()
        if not argument:
            current = f"{self.status.provider}/{self.status.model}"
            said = [f"now: {current}" + (f", effort {self.status.effort}"
                                         if self.status.effort else "")]
            for route in routes:
                flag = " (default)" if route.get("default") else ""
                problem = f" — {route['problem']}" if route.get("problem") else ""
                said.append(f"  {route['provider']}{flag}: {', '.join(route['models'])}"
                            f"{problem}")
            if name == "effort":
                said.append("  efforts: none, minimal, low, medium, high, xhigh, max, default")
            self.say(Notice(text("\n".join(said))))
            return
        value: Any = None if argument == "default" else argument
        if name == "model":
            route, slash, model = argument.partition("/")
            known = {r["provider"] for r in routes}
            if slash and route in known:
                settings = await self.link.choose(provider=route, model=model)
            else:
                settings = await self.link.choose(model=value)
        elif name == "effort":
            settings = await self.link.choose(reasoning_effort=value)
        else:
            settings = await self.link.choose(provider=value)
        self.status.take_settings(settings)
        dropped = settings.get("effortDropped")
        self.say(Notice(f"from the next turn: {settings['provider']}/{settings['model']}"
                        + (f", effort {settings['reasoningEffort']}"
                           if settings.get("reasoningEffort") else "")
                        + (f" (effort {dropped} is not sent on this route)" if dropped
                           else "")))

    async def _approval(self, argument: str) -> None:
        await self.link.ensure_session()
        if not argument:
            settings = await self.link.request("session/settings/get")
            remembered = settings.get("remembered") or {}
            said = (f"approvals: {settings.get('policy') or settings.get('policyDefault')}"
                    f" (modes: {', '.join(settings.get('policyModes') or [])}, default)")
            if remembered:
                said += "\nremembered: " + ", ".join(f"{k}: {v}" for k, v in remembered.items())
            self.say(Notice(text(said)))
            return
        if argument == "forget":
            await self.link.request("session/approvals/forget")
            self.say(Notice("remembered answers forgotten"))
            return
        settings = await self.link.request("session/policy/set",
                                           mode=None if argument == "default" else argument)
        self.status.take_settings(settings)
        self.say(Notice(f"approvals: {settings.get('policy') or settings.get('policyDefault')}"
                        " from the next tool call"))

    async def _cost(self) -> None:
        if self.link.session_id is None:
            self.say(Notice("nothing spent yet: no session"))
            return
        used = await self.link.request("session/usage")
        self.status.take_usage(used)
        cost = used.get("costUsd")
        rows = [("input tokens", tokens(int(used.get("inputTokens") or 0))),
                ("  cache hits", tokens(int(used.get("cacheHitTokens") or 0))),
                ("output tokens", tokens(int(used.get("outputTokens") or 0))),
                ("  reasoning", tokens(int(used.get("reasoningTokens") or 0))),
                ("turns", str(used.get("turns") or 0)),
                ("cost", f"${cost:.4f}" if isinstance(cost, (int, float))
                 else "not priced on this route")]
        if used.get("estimated"):
            rows.append(("", "(some counts are estimates)"))
        self.say(Notice(text("\n".join(f"{k:<14} {v}" for k, v in rows))))

    async def _diff(self) -> None:
        if self.link.session_id is None:
            self.say(Notice("no changes: no session yet"))
            return
        found = await self.link.request("session/changes")
        changes = found.get("changes") or []
        if not changes:
            self.say(Notice("this session changed no file"))
            return
        self.say(Notice(f"{len(found.get('files') or [])} files changed: "
                        + ", ".join(line(f) for f in found.get("files") or [])))
        for change in changes:
            diff = change.get("diff")
            unified = diff.get("unified") if isinstance(diff, Mapping) else diff
            if not unified:
                unified = "(no diff recorded for this change)"
            self.say(Static(Text.assemble((f"{line(change.get('tool'))} "
                                           f"{line(change.get('path'))}\n", "bold"),
                                          diff_text(str(unified)))))

    async def _pick(self) -> None:
        listed = await self.link.sessions()
        rows = await self._with_summaries(listed)
        if not rows:
            self.say(Notice("no sessions yet"))
            return
        chosen = await self.push_screen_wait(SessionPicker(rows, self.link.session_id))
        if chosen:
            await self.open_session(chosen)

    async def _with_summaries(self, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Sessions with age, turns and cost: from the listing when the runtime gives them,
        else from each session's usage. Newest first."""
        rows = []
        for entry in listed[:200]:
            row = dict(entry)
            if "updatedAt" not in row or "turns" not in row:
                with contextlib.suppress(DshError):
                    used = await self.link.client.request(
                        "session/usage", {"sessionId": entry["sessionId"]})
                    for key in ("updatedAt", "turns", "costUsd"):
                        row.setdefault(key, used.get(key))
            rows.append(row)
        rows.sort(key=lambda r: r.get("updatedAt") or 0, reverse=True)
        return rows

    async def _last_here(self) -> str | None:
        here = os.path.realpath(self.options.cwd)
        rows = await self._with_summaries([
            s for s in await self.link.sessions()
            if os.path.realpath(str(s.get("cwd") or "")) == here])
        return str(rows[0]["sessionId"]) if rows else None

    async def open_session(self, session_id: str) -> None:
        """Continue ``session_id``: its transcript drawn again, then live."""
        await self.link.resume(session_id)
        await self.transcript.remove_children()
        self.calls.clear()
        self.status = Status(workspace=str(self.options.cwd), sandbox=self.status.sandbox)
        events: list[dict[str, Any]] = []
        async for event in self.link.client.history(session_id):
            events.append(event)
            del events[:-MAX_REPLAY_EVENTS]
        for event in events:
            await self.event(event, replay=True)
        await self._settle()
        self.answer = self.reasoning = None
        self.running = False
        self.calls.clear()
        self.transcript.keep_up()
        self.say(Notice(f"continuing session {line(session_id)}"))
        await self._refresh_settings()
        await self._refresh_usage()

    async def _refresh_settings(self) -> None:
        if not self.link.alive:
            return
        if self.link.session_id is None:  # what a first message would use
            o = self.options
            with contextlib.suppress(DshError):
                for route in await self.link.client.models():
                    if route["provider"] == o.provider or (o.provider is None
                                                           and route.get("default")):
                        self.status.provider = route["provider"]
                        self.status.model = o.model or route["models"][0]
                        self.status.effort = o.effort
            self.refresh_status()
            return
        with contextlib.suppress(DshError):
            self.status.take_settings(await self.link.request("session/settings/get"))
        self.refresh_status()

    async def _refresh_usage(self) -> None:
        with contextlib.suppress(DshError):
            self.status.take_usage(await self.link.request("session/usage"))
        self.refresh_status()

    # -- keys ---------------------------------------------------------------------------

    async def action_interrupt(self) -> None:
        """Ctrl+C: cancel the running turn; else clear the editor; twice: quit."""
        approvals = self.query(ApprovalPrompt)
        for prompt in approvals:
            if not prompt.answer.done():
                prompt.answer.set_result(("deny", False, ""))
        if self.status.running_since is not None or self.running:
            self.say(Notice("cancelling…"))
            with contextlib.suppress(DshError):
                await self.link.cancel()
            self.pending_shell.clear()
            return
        if self.composer.text:
            self.composer.clear()
            return
        now = time.monotonic()
        if now - self.last_interrupt < DOUBLE_PRESS_S:
            await self.action_leave()
            return
        self.last_interrupt = now
        self.say(Notice("press Ctrl+C again to quit (or Ctrl+D)"))

    async def action_leave(self, code: int = 0) -> None:
        """Quit: shut the runtime down and say how to come back."""
        session = self.link.session_id
        if session is not None:
            self.exit_note = (f"session {session}: continue it with `dsh chat --resume "
                              f"{session}` (or `dsh chat --continue` here)")
        await self.link.close()
        self.exit(code)

    def _signalled(self, signum: int) -> None:
        self.run_worker(self.action_leave(128 + signum), name="leave")

    def action_toggle_last(self) -> None:
        if self.last_call is not None:
            self.last_call.collapsed = not self.last_call.collapsed

    def action_page(self, direction: int) -> None:
        if direction < 0:
            self.transcript.scroll_page_up(animate=False)
        else:
            self.transcript.scroll_page_down(animate=False)

    def action_search(self) -> None:
        search = self.query_one("#search", Input)
        search.display = True
        search.focus()

    def action_close_panels(self) -> None:
        search = self.query_one("#search", Input)
        if search.display:
            search.display = False
            for found in self.query(".found"):
                found.remove_class("found")
            self.composer.focus()
        self._hide_suggestions()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "search":
            return
        query = event.value.lower()
        if not query:
            return
        widgets = list(self.transcript.children)
        start = next((i + 1 for i, w in enumerate(widgets) if w.has_class("found")), 0)
        for widget in self.query(".found"):
            widget.remove_class("found")
        order = widgets[start:] + widgets[:start]
        for widget in order:
            if query in _plain(widget).lower():
                widget.add_class("found")
                self.transcript.scroll_to_widget(widget, animate=False, top=True)
                return
        self.notify(f"not found: {event.value}", severity="warning")

    # -- the runtime going away ---------------------------------------------------------

    def _runtime_gone(self, error: BaseException | None) -> None:
        code = self.link.exit_code
        session = self.link.session_id
        self.dead = f"exit {code}" if code is not None else "gone"
        self.running = False
        self.status.running_since = None
        self.status.note = "runtime stopped"
        how = (f"session {session} is stored: send a message to continue it in a new "
               f"runtime, or later `dsh chat --resume {session}`" if session else
               "send a message to start a new runtime")
        self.say(ErrorLine(f"the runtime stopped ({self.dead})"
                           + (f": {error}" if error else ""), how))
        self.refresh_status()


def _plain(widget: Widget) -> str:
    """The text a transcript widget shows (for search)."""
    for attribute in ("text", "_said"):
        value = getattr(widget, attribute, None)
        if isinstance(value, (str, Text)):
            return str(value)
    if isinstance(widget, Markdown):
        return widget.source
    try:
        return str(widget.render())
    except Exception:
        return ""


def _tail(lines: list[str]) -> str | None:
    return "\n".join(lines[-5:]) if lines else None


def _light_terminal() -> bool:
    """Whether the terminal says its background is light (``COLORFGBG``: fg;bg, where a
    background of 7 or 15 is light)."""
    value = os.environ.get("COLORFGBG", "")
    return value.rsplit(";", 1)[-1] in ("7", "15")


def main(options: ChatOptions) -> int:
    """Run the chat to its end; the exit code. However it ends (a crash included: Textual
    restores the terminal and prints the error), the session is in the store, and the
    last line says how to continue it."""
    app = ChatApp(options)
    code = app.run()
    session = app.link.session_id
    if not app.exit_note and session is not None:
        app.exit_note = f"session {session} is stored: `dsh chat --resume {session}`"
    if app.exit_note:
        sys.stdout.write(app.exit_note + "\n")
    if isinstance(code, int):
        return code
    return app.return_code if app.return_code is not None else 1
