"""Where the message is typed: a multi-line editor whose Enter sends.

Enter sends; Shift+Enter (where the terminal tells it apart) and Ctrl+J insert a line
break; a paste (the terminal's bracketed paste) is inserted whole and never sends, however
many line breaks it holds. Up and Down walk the input history when the cursor is on the
first or last line; Tab completes the ``/command`` or ``@path`` being typed, from the
suggestions shown above the editor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

from dsh.chat.history import History

Completer = Callable[[str], list[str]]


class Composer(TextArea):
    """The message editor."""

    DEFAULT_CSS = """
    Composer { height: auto; max-height: 12; min-height: 3; border: round $primary-muted;
               padding: 0 1; background: $surface; }
    Composer:focus { border: round $primary; }
    """
    BINDINGS = [
        Binding("ctrl+j", "newline", "new line", show=False),
        Binding("shift+enter", "newline", "new line", show=False),
    ]

    class Submitted(Message):
        """The user sent ``text``."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Typed(Message):
        """The text changed: ``token`` is the word at the cursor (for completion)."""

        def __init__(self, token: str) -> None:
            super().__init__()
            self.token = token

    def __init__(self, history: History, **kwargs: Any) -> None:
        super().__init__("", soft_wrap=True, show_line_numbers=False, tab_behavior="focus",
                         highlight_cursor_line=False,
                         placeholder="Message · Enter sends · Shift+Enter or Ctrl+J: new "
                                     "line · /help", **kwargs)
        self.input_history = history
        self._browsing: int | None = None
        self._draft = ""
        self.suggestions: list[str] = []

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.submit()
            return
        if event.key == "tab" and self.suggestions:
            event.stop()
            event.prevent_default()
            self.complete(self.suggestions[0])
            return
        if event.key in ("up", "down") and self._walk(event.key):
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)

    def action_newline(self) -> None:
        """Insert a line break (Shift+Enter, Ctrl+J)."""
        self.insert("\n")

    def submit(self) -> None:
        """Send what is typed (nothing when it is blank)."""
        typed = self.text
        if not typed.strip():
            return
        self.clear()
        self._browsing = None
        self.post_message(self.Submitted(typed))

    def _walk(self, key: str) -> bool:
        """Up on the first line / Down on the last: the previous / next history entry."""
        row = self.cursor_location[0]
        entries = self.input_history.entries
        if key == "up" and row == 0 and entries:
            if self._browsing is None:
                self._draft, self._browsing = self.text, len(entries)
            if self._browsing == 0:
                return True
            self._browsing -= 1
            self._show(entries[self._browsing], at_end=False)
            return True
        if key == "down" and row == self.document.line_count - 1 and self._browsing is not None:
            self._browsing += 1
            if self._browsing >= len(entries):
                self._browsing = None
                self._show(self._draft)
            else:
                self._show(entries[self._browsing])
            return True
        return False

    def _show(self, value: str, *, at_end: bool = True) -> None:
        self.text = value
        self.move_cursor(self.document.end if at_end else (0, len(value.split("\n", 1)[0])))

    def word(self) -> str:
        """The token being typed at the cursor (from the last space or line start)."""
        row, column = self.cursor_location
        before = self.document[row][:column]
        return before.rsplit(" ", 1)[-1]

    def complete(self, choice: str) -> None:
        """Replace the token at the cursor by ``choice``."""
        row, column = self.cursor_location
        token = self.word()
        self.replace(choice, (row, column - len(token)), (row, column))
        self.suggestions = []

    def _on_text_area_changed(self, event: TextArea.Changed) -> None:
        self.post_message(self.Typed(self.word()))
