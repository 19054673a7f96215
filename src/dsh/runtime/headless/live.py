"""The headless run on a terminal (stderr a TTY): the turn shown while it happens.

stderr gets the progress lines the quiet view prints (tool calls, results, errors) and,
below them, one transient status line redrawn every :data:`TICK`: a spinner, what is
going on (``thinking``, ``running bash``, ``writing``) and for how long, and while the
model thinks the latest of its reasoning as one dim line. At the end that line gives way
to one line of usage (:meth:`dsh.runtime.headless.tally.Tally.line`): model, steps, input
tokens with the cached share, output tokens, cost, time.

stdout gets the answer. When it is a terminal too, the text streams as the model writes
it, the model's remarks before its tool calls included (they are the same conversation on
the same screen). When it is not (``dsh ... > answer.txt``), it gets exactly what a run
without a terminal writes: the final answer once, at the end, byte for byte.

Nothing from the model, a file or a tool is written raw: streamed text goes through
:func:`dsh.core.termtext.visible` (a ``CR`` at the end of one delta is held back until
the next shows whether it was half of a ``CR LF``); the status line is clipped to the
terminal's width in cells, so it never wraps and ``CR`` plus erase-line always rewrites
it. The only escape codes written are dsh's own (:mod:`dsh.core.termstyle` and
:data:`ERASE_LINE`). This module is imported only when stderr is a terminal, so a piped
run pays nothing for it (pinned by ``tests/headless/test_headless_imports.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from dsh.core.termstyle import Style
from dsh.core.termtext import visible
from dsh.runtime.headless.progress import Progress, has_tool_calls, message_text
from dsh.runtime.headless.tally import Tally
from dsh.runtime.headless.views import Sink, TerminalOut, write_all

TICK = 0.1
"""Seconds between redraws of the status line."""
FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ERASE_LINE = "\r\x1b[K"
"""Back to the line's start and erase it: how the status line is rewritten or removed."""
REASONING_KEEP = 2000
"""Characters of reasoning kept for the status line (only its end is ever shown)."""


def cells(char: str) -> int:
    """Columns ``char`` takes on a terminal: 2 for wide East Asian forms, 0 for
    combining marks, 1 otherwise."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def head(text: str, width: int) -> str:
    """The start of ``text`` that fits ``width`` columns, ``…`` marking a cut."""
    if sum(map(cells, text)) <= width:
        return text
    used, end = 0, 0
    while end < len(text) and used + cells(text[end]) <= width - 1:
        used += cells(text[end])
        end += 1
    return text[:end] + "…" if width > 0 else ""


def tail(text: str, width: int) -> str:
    """The end of ``text`` that fits ``width`` columns, ``…`` marking a cut."""
    if sum(map(cells, text)) <= width:
        return text
    used, start = 0, len(text)
    while start > 0 and used + cells(text[start - 1]) <= width - 1:
        used += cells(text[start - 1])
        start -= 1
    return "…" + text[start:] if width > 0 else ""


class _Visible:
    """:func:`visible` over a stream of deltas: a ``CR`` ending one delta waits for the next."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        text = self._held + text
        self._held = "\r" if text.endswith("\r") else ""
        return visible(text[:-1] if self._held else text)

    def flush(self) -> str:
        held, self._held = self._held, ""
        return visible(held)


class LiveView:
    """Shows one run on a terminal (see the module docstring)."""

    def __init__(self, out: Sink, style: Style, *, answer_to_terminal: TerminalOut | None,
                 err_fd: int = 2, clock: Callable[[], float] = time.monotonic,
                 columns: Callable[[], int] | None = None) -> None:
        self._out = out
        self._term = answer_to_terminal
        self._style = style
        self._err_fd = err_fd
        self._clock = clock
        self._columns = columns or self._terminal_columns
        self._progress = Progress(style.paint)
        self._tally = Tally()
        self._begun = clock()
        self._phase: str | None = None
        self._since = self._begun
        self._reasoning = ""
        self._written = 0
        self._status_shown = False
        self._streaming = False
        self._stream_ends_line = True
        self._streamed_step = False
        self._stream_text = _Visible()
        self._lines_before = False  # progress lines since the model last wrote text
        self._frame = 0
        self._ticker: asyncio.Task[None] | None = None

    # -- the view protocol ---------------------------------------------------------------

    def started(self, session_id: str) -> None:
        self._line(self._style.paint(f"dsh: session {session_id}", "dim"))
        self._set_phase("starting")
        with contextlib.suppress(RuntimeError):  # no running loop: drawn on events only
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    def event(self, event: Mapping[str, Any]) -> None:
        self._tally.add(event)
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "step/start":
            self._streamed_step = False
            self._reasoning = ""
            self._set_phase("thinking")
        elif kind == "assistant/reasoning-delta":
            self._reasoning = (self._reasoning + str(data.get("text", "")))[-REASONING_KEEP:]
            self._draw()
        elif kind == "assistant/delta":
            self._delta(str(data.get("text", "")))
        elif kind == "assistant/retry":
            self._end_stream()
            reason = (data.get("reason") or {}).get("message") or "the stream broke off"
            self._line(self._style.paint(
                f"↻ {visible(str(reason), one_line=True)}; asking the model again", "yellow"))
            self._set_phase("thinking")
        elif kind == "assistant/message":
            self._message(event, data.get("message") or {})
        elif kind in ("tool/call", "tool/result", "error"):
            line = self._progress.line(event)
            if line is not None:
                self._line(line)
            if kind == "tool/call":
                name = visible(str(data.get("name", "tool")), one_line=True)
                self._set_phase(f"running {name}")
            elif kind == "tool/result":
                self._set_phase("working")
        elif kind == "turn/end":
            self._stop()

    def note(self, text: str, *, error: bool = False) -> None:
        self._end_stream()
        self._line(self._style.paint(text, "red") if error else text)

    def finished(self, reason: Mapping[str, Any], answer: str) -> None:
        self._stop()
        self._end_stream()
        if self._term is None and reason.get("kind") == "completed" and answer:
            self._out.write_line(answer.rstrip("\n"))  # not a terminal: as the quiet view
        self._line(self._style.paint(self._tally.line(self._clock() - self._begun), "dim"))

    def close(self) -> None:
        self._stop()

    # -- the answer ----------------------------------------------------------------------

    def _delta(self, text: str) -> None:
        if self._term is None:
            self._written += len(text)
            if self._phase != "writing":
                self._set_phase("writing")
            return
        self._streamed_step = True
        self._stream(text)

    def _stream(self, text: str) -> None:
        assert self._term is not None
        shown = self._stream_text.feed(text)
        if not shown:
            return
        if not self._streaming:
            self._clear_status()
            if self._lines_before:  # the model speaks again: set off from the tool lines
                self._err("\n")
                self._lines_before = False
            self._streaming = True
        self._term.write(shown)
        self._stream_ends_line = shown.endswith("\n")

    def _end_stream(self) -> None:
        """Close the streamed text's line, so the status line can come back below it."""
        if not self._streaming or self._term is None:
            return
        rest = self._stream_text.flush()
        if rest:
            self._term.write(rest)
            self._stream_ends_line = rest.endswith("\n")
        if not self._stream_ends_line:
            self._term.write("\n")
        self._streaming = False
        self._stream_ends_line = True

    def _message(self, event: Mapping[str, Any], message: Mapping[str, Any]) -> None:
        if self._term is not None:
            text = message_text(message)
            if text and not self._streamed_step:  # a route that did not stream its text
                self._stream(text)
            self._end_stream()
        line = self._progress.line(event, remarks=self._term is None)
        if line is not None:
            self._line(line)
        self._set_phase("working" if has_tool_calls(message) else None)

    # -- stderr --------------------------------------------------------------------------

    def _err(self, text: str) -> None:
        write_all(self._err_fd, text)

    def _line(self, line: str) -> None:
        """A permanent line on stderr, above the status line."""
        self._end_stream()
        self._clear_status()
        self._err(line + "\n")
        self._lines_before = True
        self._draw()

    def _set_phase(self, phase: str | None) -> None:
        self._phase = phase
        self._since = self._clock()
        self._draw()

    def _clear_status(self) -> None:
        if self._status_shown:
            self._err(ERASE_LINE)
            self._status_shown = False

    def _draw(self) -> None:
        if self._phase is None or self._streaming:
            self._clear_status()
            return
        width = max(10, self._columns() - 1)  # the last column would wrap on some terminals
        paint = self._style.paint
        frame = FRAMES[self._frame % len(FRAMES)]
        label = f"{frame} {self._phase} {self._clock() - self._since:.1f}s"
        if self._phase == "writing":
            label += f" ({self._written:,} characters)"
        label = head(label, width)
        shown = f"{paint(frame, 'cyan')}{label[len(frame):]}"
        room = width - sum(map(cells, label)) - 2
        thought = " ".join(self._reasoning.split())
        if thought and room > 8 and self._phase == "thinking":
            shown += "  " + paint(tail(visible(thought, one_line=True), room), "dim")
        self._err(ERASE_LINE + shown)
        self._status_shown = True

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self._frame += 1
            self._draw()

    def _stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        self._phase = None
        self._clear_status()

    @staticmethod
    def _terminal_columns() -> int:
        try:
            return os.get_terminal_size(2).columns
        except OSError:
            return 80
