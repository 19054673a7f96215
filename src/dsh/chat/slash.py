"""The chat's slash commands, as the app carries them out (:mod:`dsh.chat.commands` holds
their names and help): model, effort, route and policy switches, the session picker and
resuming, compaction, cost and the session's diff."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.widgets import Markdown, Static

from dsh.chat import commands
from dsh.chat.answer import Answer
from dsh.chat.drawing import MAX_REPLAY_EVENTS, Transcript
from dsh.chat.host import HostApp
from dsh.chat.link import Link
from dsh.chat.options import ChatOptions
from dsh.chat.safety import line, markdown_parser, text
from dsh.chat.screens import SessionPicker
from dsh.chat.status import Status, tokens
from dsh.chat.widgets import ErrorLine, Notice, Reasoning, ToolCall, diff_text
from dsh.core.errors import DshError

if TYPE_CHECKING:
    from textual.widget import Widget

PICKER_SESSIONS = 500
"""The picker lists this many sessions, the ones updated last."""


class SlashCommands(HostApp):
    """``/name argument``, mixed into the app."""

    options: ChatOptions
    link: Link
    status: Status
    transcript: Transcript
    ready: asyncio.Event
    calls: dict[str, ToolCall]
    answer: Answer | None
    reasoning: Reasoning | None
    running: bool
    moved: bool

    if TYPE_CHECKING:  # the app's (and its drawing's) own, which this one calls
        def say(self, widget: Widget, *, under: ToolCall | None = None) -> Widget: ...
        def refresh_status(self) -> None: ...
        async def action_leave(self, code: int = 0) -> None: ...
        async def event(self, event: Mapping[str, Any], *, replay: bool = False) -> None: ...
        async def _settle(self) -> None: ...

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
                await self.open_session(await self.link.session_named(argument))
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
            named, slash, model = argument.partition("/")
            known = {r["provider"] for r in routes}
            if slash and named in known:
                settings = await self.link.choose(provider=named, model=model)
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
        """The session's tokens and cost so far, from its summary (the store keeps it
        current with every event: no log is read)."""
        entry = await self.link.summary()
        if entry is None:
            self.say(Notice("nothing spent yet: no session"))
            return
        self.status.take_summary(entry)
        used = entry.get("usage") or {}
        cost = entry.get("costUsd")
        rows = [("input tokens", tokens(int(used.get("inputTokens") or 0))),
                ("  cache hits", tokens(int(used.get("cacheHitTokens") or 0))),
                ("output tokens", tokens(int(used.get("outputTokens") or 0))),
                ("  reasoning", tokens(int(used.get("reasoningTokens") or 0))),
                ("turns", str(entry.get("turns") or 0)),
                ("cost", f"${cost:.4f}" if isinstance(cost, (int, float)) and cost > 0
                 else "none reported (this route may not be priced)")]
        if self.status.context_window:
            rows.insert(0, ("context", f"{tokens(self.status.context_tokens or 0)} of "
                                       f"{tokens(self.status.context_window)}"))
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
                why = diff.get("omitted") if isinstance(diff, Mapping) else None
                unified = f"(not diffed: {why})" if why else "(no diff recorded for this change)"
            self.say(Static(Text.assemble((f"{line(change.get('tool'))} "
                                           f"{line(change.get('path'))}\n", "bold"),
                                          diff_text(str(unified)))))

    async def _pick(self) -> None:
        """The picker over the sessions updated last (their summaries: no log is read)."""
        rows = await self.link.sessions(limit=PICKER_SESSIONS)
        if not rows:
            self.say(Notice("no sessions yet"))
            return
        chosen = await self.push_screen_wait(SessionPicker(rows, self.link.session_id))
        if chosen:
            await self.open_session(chosen)

    async def _last_here(self) -> str | None:
        """The session of this workspace updated last (``--continue``), as headless's
        ``--continue`` finds it: one narrowed listing of the workspace root."""
        found = await self.link.sessions(workspace=os.path.realpath(self.options.cwd),
                                         limit=1)
        return str(found[0]["sessionId"]) if found else None

    async def open_session(self, session_id: str) -> None:
        """Continue ``session_id``: its transcript drawn again, then live."""
        await self.link.resume(session_id)
        self.moved = False
        await self.transcript.remove_children()
        self.calls.clear()
        self.status = Status(workspace=str(self.options.cwd), sandbox=self.status.sandbox)
        events: deque[dict[str, Any]] = deque(maxlen=MAX_REPLAY_EVENTS)
        async for event in self.link.client.history(session_id):
            events.append(event)
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
        """The status line's totals from the session's summary (compactions included)."""
        with contextlib.suppress(DshError):
            entry = await self.link.summary()
            if entry is not None:
                self.status.take_summary(entry)
        self.refresh_status()
