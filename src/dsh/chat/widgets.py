"""The pieces of the transcript: messages, reasoning, tool calls, diffs, errors, notices.

Each is a Textual widget fed by the app from the session's events. Foreign text enters
only through :mod:`dsh.chat.safety` (cleaned, never markup); the answer, markdown
streamed as deltas arrive, is :mod:`dsh.chat.answer`'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.containers import Vertical
from textual.content import Content, ContentType
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Static

from dsh.chat.safety import clean, line, text

FRAME_S = 1 / 30
"""How often streamed reasoning is redrawn at most."""
RESULT_SHOWN_CHARS = 8000
"""A tool result is shown up to this many characters when opened (the rest is said)."""
DIFF_SHOWN_LINES = 400
ARG_KEYS = ("command", "path", "file_path", "pattern", "url", "query", "cd", "task",
            "prompt", "description", "name", "id")
"""The argument that says most about a call, first found first."""


def key_argument(arguments: Any) -> str:
    """The one argument shown on a tool call's line."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return line(arguments)[:80]
    if not isinstance(args, Mapping):
        return ""
    for key in ARG_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            shown = line(value)
            return shown if len(shown) <= 80 else shown[:79] + "…"
    return ""


class Notice(Static):
    """A line of the chat's own (a hint, a confirmation), or a dim aside."""

    DEFAULT_CSS = "Notice { color: $text-muted; margin: 0 0 1 0; }"

    def __init__(self, said: str | Text, **kwargs: Any) -> None:
        super().__init__(said if isinstance(said, Text) else text(said), **kwargs)


class ErrorLine(Static):
    """An error, in the error colour, with its hint."""

    DEFAULT_CSS = "ErrorLine { color: $error; margin: 0 0 1 0; }"

    def __init__(self, message: str, hint: str | None = None) -> None:
        said = text(f"✗ {clean(message)}", "bold")
        if hint:
            said.append(text(f"\n  {clean(hint)}", ""))
        super().__init__(said)


class UserMessage(Static):
    """What the user sent (and what it attached)."""

    DEFAULT_CSS = """
    UserMessage { color: $text; background: $boost; padding: 0 1; margin: 1 0 0 0; }
    """

    def __init__(self, message: str, attachments: list[str] | None = None,
                 queued: bool = False) -> None:
        said = Text("> ", style="bold")
        said.append(text(message))
        for attached in attachments or ():
            said.append(text(f"\n  + {attached}", "dim"))
        self._queued = queued
        if queued:
            said.append(Text("  (queued)", style="dim italic"))
        self._said = said
        super().__init__(said)

    def started(self) -> None:
        """Its turn began: no longer marked as queued."""
        if self._queued:
            self._queued = False
            self._said.right_crop(len("  (queued)"))
            self.update(self._said)


class Reasoning(Collapsible):
    """The model's reasoning: dimmed, folded to one line, opened on demand."""

    # Textual types Collapsible's title as str, yet hands it to CollapsibleTitle's label,
    # which takes Content (and draws it styled): the title here is Content.
    title: Reactive[ContentType]  # type: ignore[assignment]

    DEFAULT_CSS = """
    Reasoning { color: $text-muted; border: none; padding: 0; margin: 0; }
    Reasoning > Contents { padding: 0 0 0 2; }
    Reasoning CollapsibleTitle { color: $text-muted; text-style: italic; padding: 0; }
    """

    def __init__(self) -> None:
        self.body = Static(Text(""), classes="reasoning-body")
        self._said = ""
        self._pending: list[str] = []
        self._timer: Any = None
        super().__init__(self.body,
                         title=Content("thinking…"),  # type: ignore[arg-type]  # see title
                         collapsed=True)

    @property
    def text(self) -> str:
        """The reasoning so far."""
        return self._said + "".join(self._pending)

    def add(self, delta: str) -> None:
        """Take a streamed piece of reasoning; the folded line shows its last words from
        the next frame on (deltas are only collected: a long reasoning costs a redraw a
        frame, not one a delta)."""
        self._pending.append(delta)
        if self._timer is None and self.is_mounted:
            self._timer = self.set_interval(FRAME_S, self._flush)

    def _flush(self) -> None:
        if not self._pending:
            return
        self._said += "".join(self._pending)
        self._pending.clear()
        self.body.update(text(self._said, "dim italic"))
        last = " ".join(self._said[-400:].split())[-70:]
        self.title = Content.styled(f"thinking… {line(last)}", "italic")

    def done(self, seconds: float | None = None) -> None:
        """Reasoning finished."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._flush()
        took = f" for {seconds:.1f}s" if seconds is not None else ""
        words = len(self._said.split())
        self.title = Content.styled(f"thought{took} ({words} words)", "italic")


class DiffView(Static):
    """A unified diff, coloured by line."""

    DEFAULT_CSS = "DiffView { margin: 0 0 0 2; }"

    def __init__(self, unified: str, *, truncated: bool = False) -> None:
        super().__init__(diff_text(unified, truncated=truncated))


def diff_text(unified: str, *, truncated: bool = False) -> Text:
    """``unified`` as coloured Text: additions green, removals red, hunks cyan."""
    out = Text()
    lines = clean(unified).splitlines()
    for raw in lines[:DIFF_SHOWN_LINES]:
        if raw.startswith(("+++", "---")):
            style = "bold"
        elif raw.startswith("+"):
            style = "green"
        elif raw.startswith("-"):
            style = "red"
        elif raw.startswith("@@"):
            style = "cyan"
        else:
            style = "dim"
        out.append(raw + "\n", style=style)
    if len(lines) > DIFF_SHOWN_LINES or truncated:
        out.append(f"… the diff goes on ({len(lines)} lines shown of more)\n", style="dim")
    return out


def fallback_diff(name: str, arguments: Any) -> str | None:
    """A diff made from a write's or an edit's own arguments, for a runtime that sends no
    ``data.diff``: the new text of ``write_file``, the replaced text of ``edit_file``."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return None
    if not isinstance(args, Mapping) or not isinstance(args.get("path"), str):
        return None
    path = args["path"]
    if name == "write_file" and isinstance(args.get("content"), str):
        new = args["content"].splitlines()
        return "\n".join([f"+++ b/{path}", f"@@ +1,{len(new)} @@", *(f"+{x}" for x in new)])
    if name == "edit_file" and isinstance(args.get("old_string"), str):
        old = args["old_string"].splitlines()
        new = str(args.get("new_string", "")).splitlines()
        return "\n".join([f"--- a/{path}", f"+++ b/{path}", "@@ @@",
                          *(f"-{x}" for x in old), *(f"+{x}" for x in new)])
    return None


class ToolCall(Collapsible):
    """One tool call: a compact line (tool, the argument that matters, outcome, time),
    opened to its full arguments, result, diff, images and sub-agent events."""

    # Textual types Collapsible's title as str, yet hands it to CollapsibleTitle's label,
    # which takes Content (and draws it styled): the title here is Content.
    title: Reactive[ContentType]  # type: ignore[assignment]

    DEFAULT_CSS = """
    ToolCall { border: none; padding: 0; margin: 0; background: transparent; }
    ToolCall > Contents { padding: 0 0 0 2; height: auto; }
    ToolCall CollapsibleTitle { padding: 0; }
    ToolCall .tool-args { color: $text-muted; }
    ToolCall .tool-result { color: $text; }
    ToolCall .tool-error { color: $error; }
    ToolCall .children { height: auto; padding: 0 0 0 1; border-left: solid $primary-muted; }
    """

    def __init__(self, call_id: str, name: str, arguments: Any) -> None:
        self.call_id = call_id
        self.name_ = name
        self.arguments = arguments
        self.started = time.monotonic()
        self.outcome: str | None = None
        self.children_box = Vertical(classes="children")
        self.children_box.display = False
        self.args = Static(text(_pretty(arguments)), classes="tool-args")
        self.decision = ""
        self.result = Static(Text(""), classes="tool-result")
        self.extra = Vertical()
        self.extra.styles.height = "auto"
        super().__init__(self.args, self.extra, self.result, self.children_box,
                         title=self._headline("…"),  # type: ignore[arg-type]  # see title
                         collapsed=True)

    def _headline(self, outcome: str, style: str = "") -> Content:
        decision = (f"  · {self.decision}", "dim italic") if self.decision else ""
        return Content.assemble(
            (f"{line(self.name_)}", "bold"), "  ", (key_argument(self.arguments), "italic"),
            "  ", (outcome, style), decision)

    def decided(self, said: str) -> None:
        """The user's answer to its approval, shown on its line."""
        self.decision = line(said)
        self.started = time.monotonic()  # its time is the tool's, not the wait for you
        self.title = self._headline("…")

    def waiting(self, why: str) -> None:
        """The call waits for an approval."""
        self.title = self._headline(f"? {line(why)}", "yellow")

    def finish(self, data: Mapping[str, Any]) -> None:
        """Its ``tool/result``: outcome, time, result text, diff and images."""
        message = data.get("message") or {}
        failed = bool(message.get("isError"))
        took = time.monotonic() - self.started
        error = data.get("error") or {}
        code = f" [{line(error.get('code'))}]" if isinstance(error, Mapping) and \
            error.get("code") else ""
        body = "".join(b.get("text", "") for b in message.get("content", ())
                       if isinstance(b, Mapping) and b.get("type") == "text")
        first = line(body.strip().split("\n", 1)[0])[:70] if body.strip() else ""
        self.outcome = "error" if failed else "ok"
        if failed:
            self.title = self._headline(f"✗{code} {first}  {took:.1f}s", "red")
        else:
            lines = body.count("\n") + 1 if body else 0
            diff = data.get("diff")
            said = (f"+{diff.get('added')} -{diff.get('removed')}"
                    if isinstance(diff, Mapping) and isinstance(diff.get("added"), int)
                    else f"{lines} line{'s' * (lines != 1)}")
            self.title = self._headline(f"✓ {said}  {took:.1f}s", "green")
        shown = body if len(body) <= RESULT_SHOWN_CHARS else (
            body[:RESULT_SHOWN_CHARS] + f"\n… {len(body) - RESULT_SHOWN_CHARS} more characters")
        self.result.update(text(shown, "" if not failed else "red"))
        self.result.set_class(failed, "tool-error")
        images = [b for b in message.get("content", ())
                  if isinstance(b, Mapping) and b.get("type") == "image"]
        for image in images:
            self.extra.mount(Static(text(image_placeholder(image), "italic")))

    def diff(self, unified: str, *, truncated: bool = False) -> DiffView:
        """Show the call's change as a diff (open, since that is what one wants to see),
        in place of its arguments, which the diff says better."""
        view = DiffView(unified, truncated=truncated)
        self.extra.mount(view)
        self.args.display = False
        self.collapsed = False
        if self.outcome == "ok" and "+" not in str(self.title):
            added = sum(1 for x in unified.splitlines()
                        if x.startswith("+") and not x.startswith("+++"))
            removed = sum(1 for x in unified.splitlines()
                          if x.startswith("-") and not x.startswith("---"))
            took = time.monotonic() - self.started
            self.title = self._headline(f"✓ +{added} -{removed}  {took:.1f}s", "green")
        return view

    def scroll_visible(self, *args: Any, **kwargs: Any) -> None:
        """Opening a call (a click, or its diff shown) reveals it, unless the transcript
        follows the output: then the end stays in view. Revealing would let go of the
        end (Textual releases the anchor of a container scrolled for a widget), and what
        comes next would be drawn out of sight."""
        following = next((a for a in self.ancestors if isinstance(a, Widget)
                          and a.is_anchored), None)
        if following is not None and following.is_vertical_scroll_end:
            return
        super().scroll_visible(*args, **kwargs)

    def nest(self, widget: Any) -> None:
        """A sub-agent's or job's event, under this call."""
        self.children_box.display = True
        self.children_box.mount(widget)


def image_placeholder(block: Mapping[str, Any]) -> str:
    """``[image image/png, 12.3 KB]``: an image is never drawn, its size is said."""
    data = block.get("data")
    size = len(data) * 3 // 4 if isinstance(data, str) else 0
    return f"[image {line(block.get('mimeType', 'image'))}, {size / 1024:.1f} KB]"


def _pretty(arguments: Any) -> str:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return str(arguments)
