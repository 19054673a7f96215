"""How a headless run is shown: the event sinks the runner chooses between.

The runner (:mod:`dsh.runtime.headless.runner`) owns the run (session, prompt, exit
code); a view only shows it. It gets the session id once, every event of the session in
order, notes of the runner's own (compaction, interruption, the final error), and at the
end the turn's outcome with its answer. Four views, one per kind of reader:

* :class:`JsonView` (``--json``): every event as one JSON line on stdout, nothing else.
* :class:`~dsh.runtime.headless.codexjson.CodexView` (``--json-format codex``): the
  events ``codex exec --json`` prints.
* :class:`QuietView` (stderr not a terminal): one line per tool call, result and
  error on stderr, the answer once on stdout at the end, byte for byte as the model
  wrote it when stdout is not a terminal either (a program reads it).
* :class:`~dsh.runtime.headless.live.LiveView` (stderr a terminal): a spinner, the
  reasoning as one line, the answer streamed, usage at the end. Imported only then.

Whatever a view writes to stderr has been through :func:`dsh.core.termtext.visible`,
and so has the answer when stdout is a terminal.
"""

from __future__ import annotations

import json
import os
import select
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dsh.core.termtext import visible
from dsh.runtime.headless.progress import Paint, Progress, plain


class Sink(Protocol):
    """The reserved stdout as the runner opened it: whole lines, never blocking."""

    def write_line(self, line: str) -> None:
        """Queue one line (newline added)."""
        ...


class View(Protocol):
    """What the runner tells whoever shows the run."""

    def started(self, session_id: str) -> None:
        """The session the task runs in is open."""

    def event(self, event: Mapping[str, Any]) -> None:
        """One event of that session, in order."""

    def note(self, text: str, *, error: bool = False) -> None:
        """A line of the runner's own for stderr (``error``: the run failed)."""

    def finished(self, reason: Mapping[str, Any], answer: str) -> None:
        """The turn ended (``turn/end``'s reason); ``answer`` is its final text."""

    def close(self) -> None:
        """Stop anything still running (a ticker); called once, whatever happened."""


def write_all(fd: int, text: str) -> None:
    """Write ``text`` whole to ``fd``, waiting while a terminal another process switched to
    non-blocking is full (EAGAIN) rather than losing output or raising."""
    data = text.encode("utf-8", "replace")
    while data:
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
        except OSError:
            return  # the terminal went away: nobody is left to read it


class TerminalOut:
    """The reserved stdout when it is a terminal: blocking writes, in order with stderr.

    A terminal is shared with the shell, and usually with stderr: the loop's pipe
    transport would switch it to non-blocking under both, and would let a line written to
    stderr overtake answer text still queued for stdout.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, text: str) -> None:
        """Write ``text`` as it is (the caller made it visible)."""
        write_all(self.fd, text)

    def write_line(self, line: str) -> None:
        """Write one line (newline added)."""
        write_all(self.fd, line + "\n")


# JSON escapes C0 controls itself; these it leaves raw, and a terminal may obey them.
_JSON_TERMINAL = {code: f"\\u{code:04x}" for code in
                  (*range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def json_line(value: Any, *, terminal: bool) -> str:
    """``value`` as one compact JSON line; for a terminal, DEL, C1 and bidi controls are
    escaped too (still the same JSON value), so none reaches the screen raw."""
    line = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return line.translate(_JSON_TERMINAL) if terminal else line


class JsonView:
    """``--json``: each event as one JSON object on stdout, its ``sessionId`` added."""

    def __init__(self, out: Sink, err: Callable[[str], None], *,
                 out_terminal: bool = False) -> None:
        self._out = out
        self._err = err
        self._terminal = out_terminal
        self._session_id = ""

    def started(self, session_id: str) -> None:
        self._session_id = session_id

    def event(self, event: Mapping[str, Any]) -> None:
        self._out.write_line(json_line({"sessionId": self._session_id, **event},
                                       terminal=self._terminal))

    def note(self, text: str, *, error: bool = False) -> None:
        if error:  # the stream says the rest; stderr only says why the run failed
            self._err(text)

    def finished(self, reason: Mapping[str, Any], answer: str) -> None:
        pass

    def close(self) -> None:
        pass


class QuietView:
    """stderr not a terminal: progress lines on stderr, the answer once at the end."""

    def __init__(self, out: Sink, err: Callable[[str], None], paint: Paint = plain, *,
                 out_terminal: bool = False) -> None:
        self._out = out
        self._err = err
        self._paint = paint
        self._progress = Progress(paint)
        self._out_terminal = out_terminal

    def started(self, session_id: str) -> None:
        self._err(self._paint(f"dsh: session {session_id}", "dim"))

    def event(self, event: Mapping[str, Any]) -> None:
        line = self._progress.line(event)
        if line is not None:
            self._err(line)

    def note(self, text: str, *, error: bool = False) -> None:
        self._err(self._paint(text, "red") if error else text)

    def finished(self, reason: Mapping[str, Any], answer: str) -> None:
        if reason.get("kind") == "completed" and answer:
            text = answer.rstrip("\n")
            self._out.write_line(visible(text) if self._out_terminal else text)

    def close(self) -> None:
        pass
