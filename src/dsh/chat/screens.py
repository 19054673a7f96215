"""The chat's interruptions: an approval asked inline, the session picker, the search.

:class:`ApprovalPrompt` stops the turn at a guarded call with the exact command or path,
why it is guarded and the choices, each a key: ``a`` allow once, ``A`` allow always for
this session, ``d`` deny, ``n`` deny with a note the model reads. :class:`SessionPicker`
lists sessions (title, age, turns, workspace, cost) to continue one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from dsh.chat.safety import clean, line, text
from dsh.chat.status import short_path
from dsh.chat.widgets import diff_text, fallback_diff
from dsh.core.wording import counted

CHOICES = (("a", "allow once"), ("A", "always, this session"), ("d", "deny"),
           ("n", "deny with a note"))
SHOWN_ARGUMENT_CHARS = 2000
SHOWN_ARGUMENT_LINES = 12
FIRST = ("command", "path", "workdir", "url", "cd")
"""The arguments an approval shows first: what is run or touched."""


class ApprovalPrompt(Vertical, can_focus=True):
    """One guarded call waiting for the user's answer; ``answer`` resolves to
    ``(decision, remember, note)``."""

    DEFAULT_CSS = """
    ApprovalPrompt { height: auto; border: heavy $warning; padding: 0 1; margin: 0 0 0 0; }
    ApprovalPrompt:focus { border: heavy $accent; }
    ApprovalPrompt Input { margin: 0; }
    """

    def __init__(self, tool_call: Mapping[str, Any]) -> None:
        super().__init__()
        self.tool_call = tool_call
        self.answer: asyncio.Future[tuple[str, bool, str]] = \
            asyncio.get_running_loop().create_future()
        self._note: Input | None = None

    def compose(self) -> ComposeResult:
        yield Static(describe(self.tool_call))
        choices = Text()
        for key, what in CHOICES:
            choices.append(f" {key} ", style="reverse bold")
            choices.append(f" {what}  ")
        yield Static(choices, id="choices")

    def on_key(self, event: events.Key) -> None:
        if self._note is not None or self.answer.done():
            return
        picked = {"a": ("allow", False), "A": ("allow", True), "d": ("deny", False),
                  "y": ("allow", False), "escape": ("deny", False)}.get(
            event.character if event.character in ("a", "A", "d", "n", "y") else event.key)
        if event.character == "n":
            event.stop()
            self._note = Input(placeholder="why not, or what to do instead (Enter sends)")
            self.mount(self._note)
            self._note.focus()
            return
        if picked is not None:
            event.stop()
            self.answer.set_result((*picked, ""))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if not self.answer.done():
            self.answer.set_result(("deny", False, event.value))


def describe(tool_call: Mapping[str, Any]) -> Text:
    """What is asked: the tool, the exact command or path, why it is guarded."""
    name = line(tool_call.get("name", "?"))
    try:
        args = json.loads(tool_call.get("arguments") or "{}")
    except (TypeError, ValueError):
        args = tool_call.get("arguments")
    said = Text("Allow ", style="bold")
    said.append(name, style="bold yellow")
    said.append("?\n")
    change = fallback_diff(name, args) if isinstance(args, Mapping) else None
    if change is not None:  # a write or an edit: what it would change, as a diff
        said.append("  path: ", style="dim")
        said.append(line(args["path"]) + "\n", style="bold")
        diffed = diff_text(change)
        diffed.truncate(SHOWN_ARGUMENT_CHARS)
        said.append(Text("\n").join(Text("    ") + x for x in diffed.split("\n")
                                     if x.plain.strip()))
        said.append("\n")
        args = {}
    if isinstance(args, Mapping):
        ordered = sorted(args, key=lambda k: (k not in FIRST, FIRST.index(k)
                                              if k in FIRST else 0, k))
        for key in ordered:
            value = args[key]
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            if len(shown) > SHOWN_ARGUMENT_CHARS:
                shown = shown[:SHOWN_ARGUMENT_CHARS] + f"… ({len(shown)} characters)"
            said.append(f"  {line(key)}: ", style="dim")
            lines = clean(shown).split("\n")
            if len(lines) > SHOWN_ARGUMENT_LINES:
                lines = [*lines[:SHOWN_ARGUMENT_LINES],
                         _more(len(lines) - SHOWN_ARGUMENT_LINES)]
            body = lines[0] if len(lines) == 1 else "\n" + "\n".join(
                f"    │ {x}" for x in lines)
            said.append(body + "\n", style="bold" if key in ("command", "path") else "")
    outside = tool_call.get("outside")
    if outside:
        said.append("  outside the workspace: " + ", ".join(line(p) for p in outside) + "\n",
                    style="red")
    reason = tool_call.get("reason")
    if reason:
        said.append(text(f"  why asked: {reason}", "italic"))
    return said


def age(ms: Any, now: float | None = None) -> str:
    """``3m``, ``5h``, ``2d`` since ``ms`` (epoch milliseconds); ``?`` unknown."""
    if not isinstance(ms, (int, float)):
        return "?"
    seconds = max(0.0, (now or time.time()) - ms / 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def session_row(entry: Mapping[str, Any], now: float | None = None, *,
                width: int = 120) -> Text:
    """One picker line (``width`` cells, the title taking what the rest leaves): title,
    age, turns, cost, id, workspace (cut first when narrow)."""
    title = line(entry.get("title") or "(untitled)")
    cost = entry.get("costUsd")
    room = max(24, min(60, width - 36))  # what is left after age, turns, cost, id
    if len(title) > room:
        title = title[:room - 1] + "…"
    row = Text(no_wrap=True, overflow="ellipsis")
    row.append(f"{title:<{room}}", style="bold")
    row.append(f"  {age(entry.get('updatedAt'), now):>4}")
    turns = entry.get("turns")
    noun = "turn " if turns == 1 else "turns"  # padded: the columns after it stay put
    row.append(f"  {turns if isinstance(turns, int) else '?':>3} {noun}")
    shown = f"${cost:.4f}" if isinstance(cost, (int, float)) and cost > 0 else "-"
    row.append(f"  {shown:>8}")
    row.append(f"  {line(entry.get('sessionId', ''))[:8]}", style="dim")
    where = entry.get("workspace") or entry.get("cwd") or ""
    row.append(f"  {line(short_path(str(where)))}", style="dim")
    return row


class SessionPicker(ModalScreen[str | None]):
    """Pick a session to continue; Escape leaves."""

    DEFAULT_CSS = """
    SessionPicker { align: center middle; }
    SessionPicker > Vertical { width: 95%; height: 80%; border: round $primary;
                               background: $surface; padding: 0 1; }
    SessionPicker OptionList { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "dismiss_none", "back")]

    def __init__(self, sessions: Sequence[Mapping[str, Any]], current: str | None) -> None:
        super().__init__()
        self.sessions = sessions
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("Sessions (newest first) · Enter continues one · Esc goes back",
                              style="bold"))
            width = max(40, self.app.size.width - 12)
            options = [Option(session_row(s, width=width), id=str(s.get("sessionId")))
                       for s in self.sessions]
            yield OptionList(*options, markup=False)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def _more(count: int) -> str:
    """What a cut argument says of the lines left out."""
    return f"… {counted(count, 'more line')}"
