"""The terminal chat: a Textual application that is an SDK client of the chat profile.

Layout, top to bottom: the transcript (scrolls; PageUp/PageDown, the mouse wheel, Ctrl+F
searches it), an approval when one is asked, completion suggestions, the editor
(:mod:`.composer`) and the status line (:mod:`.status`). The runtime is spawned through
the SDK (:mod:`.link`) when the app mounts; every notification of the current session is
queued and handled in order by one task (:mod:`.drawing`), so the transcript is drawn in
the order the runtime spoke, and a slow redraw never reorders it. Slash commands are
:mod:`.slash`'s.

Messages typed while a turn runs are sent at once: the runtime queues them on the
session (its serial queue), and they are shown as queued until their turn starts. A
``!command`` waits for the session to be idle (the runtime runs one thing at a time).

The runtime gives an idle session's lease back after a short grace, so another runtime (a
terminal's ``dsh headless --session-id``, the web page) can continue it; if one does, the
runtime says ``session/moved`` and the transcript says so. The next message takes the
session back: it is opened again (its log replayed, what was said elsewhere included),
then sent.

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
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Input, Markdown, OptionList, Static

from dsh.chat import attach, commands
from dsh.chat.answer import Answer, SettledAnswer
from dsh.chat.composer import Composer
from dsh.chat.drawing import Drawing, Transcript
from dsh.chat.history import History
from dsh.chat.link import Link
from dsh.chat.options import ChatOptions
from dsh.chat.safety import clean, line, text
from dsh.chat.screens import ApprovalPrompt
from dsh.chat.slash import SlashCommands
from dsh.chat.status import Status, render, sandbox_of, short_path
from dsh.chat.widgets import (
    ErrorLine,
    Notice,
    Reasoning,
    ToolCall,
    UserMessage,
)
from dsh.core.errors import DshError
from dsh.core.jsonrpc import Notification
from dsh.sdk import ApprovalAnswer, ApprovalRequest

DOUBLE_PRESS_S = 2.0
"""A second Ctrl+C on an empty editor within this many seconds quits."""


class ChatApp(Drawing, SlashCommands, App[int]):
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
        self.moved = False  # another runtime continued the session (session/moved)
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
        hangup = getattr(signal, "SIGHUP", None)  # POSIX only
        for signum in (signal.SIGTERM, hangup):
            # Asked to end (or the terminal went away): leave as Ctrl+D does, so the
            # terminal is restored and the runtime shut down, with the signal's exit code.
            if signum is None:
                continue
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self._signalled, signum)
        self.theme_changed_signal.subscribe(self, self._restyle)
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
                await self.open_session(await self.link.session_named(o.resume))
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

    def _restyle(self, _theme: Any) -> None:
        """Answers are drawn in the theme's colours: draw them again in the new ones."""
        for answer in self.query(Answer):
            answer.restyle()
        for settled in self.query(SettledAnswer):
            settled.restyle()

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
            elif self.moved:  # take it back, with what the other runtime added to it
                await self.open_session(self.link.session_id)
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
        call.args.display = False  # its line is the command already: open, it is the output
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
