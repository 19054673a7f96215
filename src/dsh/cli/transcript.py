"""A stored session's log as a transcript people read: ``dsh sessions show``.

The log is read a page at a time and turned, event by event, into :class:`Block`\\ s (a
prompt, an answer, a tool call, its result, a turn's end with its usage and cost, a
compaction, an error), so a session of 100,000 events is shown in the memory of one page.
What is kept between events is constant: the turn's usage so far. Three renderings of the
same blocks:

* :func:`markdown` (``--markdown``): Markdown source, the answers as the model wrote them;
* :func:`plain`: text for a pipe, or a terminal without ``rich``;
* :class:`RichView`: on a terminal with ``rich`` importable (the ``chat`` extra), answers
  rendered as Markdown; ``rich`` is imported only then.

Every text from the log (a prompt, an answer, a tool's arguments or output, an error, the
title) passes through :func:`dsh.core.termtext.visible` before it is written anywhere, so
no escape sequence in it reaches a terminal; only the styling ``rich`` adds is real.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, NamedTuple

from dsh.core.termtext import visible
from dsh.core.wording import counted

RESULT_LINES = 12
"""Lines of a tool's result shown (the rest counted): a transcript, not a dump."""
RESULT_CHARS = 2000
ARGUMENT_CHARS = 300


class Block(NamedTuple):
    """One piece of the transcript: ``kind`` (``you``, ``assistant``, ``tool``,
    ``result``, ``failed`` (a result that is an error), ``turn``, ``note``, ``error``)
    and its text, already made visible."""

    kind: str
    text: str


def _text(content: Any) -> str:
    """The text blocks of a message's content, joined; images named."""
    parts = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
        elif block.get("type") == "image":
            parts.append(f"[image {block.get('mimeType', '')}]")
    return "".join(parts)


def _cut(text: str, lines: int, chars: int) -> str:
    """``text`` up to ``lines`` lines and ``chars`` characters, saying what was left out."""
    shown = text[:chars]
    kept = shown.split("\n")[:lines]
    out = "\n".join(kept)
    left = text[len(out):].strip("\n")
    if left:
        more = text.count("\n") + 1 - len(kept)
        out += f"\n… ({counted(more, 'more line')})" if more > 0 else "\n… (cut)"
    return out


def money(cost: float) -> str:
    """A cost in US dollars as people read it (``-`` for none)."""
    if cost <= 0:
        return "-"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def tokens(count: int) -> str:
    """A token count with thousands separated."""
    return f"{count:,}"


class _Turn:
    """What a turn used so far (its ``assistant/message`` usages), for its footer."""

    def __init__(self) -> None:
        self.input = self.output = self.cached = 0
        self.cost = 0.0

    def add(self, usage: Any) -> None:
        if not isinstance(usage, Mapping):
            return
        self.input += _count(usage.get("inputTokens"))
        self.output += _count(usage.get("outputTokens"))
        self.cached += _count(usage.get("cacheHitTokens"))
        cost = usage.get("costUsd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            self.cost += float(cost)

    def line(self) -> str:
        if not (self.input or self.output):
            return ""
        cached = f" ({tokens(self.cached)} cached)" if self.cached else ""
        cost = f", {money(self.cost)}" if self.cost > 0 else ""
        return f"{tokens(self.input)} in{cached}, {tokens(self.output)} out{cost}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def blocks(log: Iterable[Mapping[str, Any]]) -> Iterator[Block]:
    """The transcript's blocks, event by event (constant memory between events)."""
    turn = _Turn()
    for event in log:
        kind = event.get("type")
        data = event.get("data")
        if not isinstance(data, Mapping):
            continue
        if kind == "turn/start":
            turn = _Turn()
        elif kind == "user/message":
            source = data.get("source")
            if isinstance(source, Mapping) and source.get("kind") == "user":
                yield Block("you", visible(_text(data.get("content"))))
        elif kind == "assistant/message":
            message = data.get("message")
            turn.add(data.get("usage"))
            text = _text(message.get("content")) if isinstance(message, Mapping) else ""
            if text.strip():
                yield Block("assistant", visible(text))
        elif kind == "tool/call":
            arguments = str(data.get("arguments") or "")
            if len(arguments) > ARGUMENT_CHARS:
                arguments = arguments[:ARGUMENT_CHARS] + "…"
            yield Block("tool", visible(f"{data.get('name')} {arguments}", one_line=True))
        elif kind == "tool/result":
            message = data.get("message")
            if isinstance(message, Mapping):
                text = _cut(_text(message.get("content")), RESULT_LINES, RESULT_CHARS)
                yield Block("failed" if message.get("isError") else "result", visible(text))
        elif kind == "context/compacted":
            turn.add(data.get("usage"))
            yield Block("note", f"compacted {_count(data.get('removedCount'))} earlier "
                                "messages into a summary")
        elif kind == "error":
            yield Block("error", visible(str(data.get("message") or "error"), one_line=True))
        elif kind == "turn/end":
            yield Block("turn", visible(_turn_end(data, turn), one_line=True))


def _turn_end(data: Mapping[str, Any], turn: _Turn) -> str:
    reason = data.get("reason")
    reason = reason if isinstance(reason, Mapping) else {}
    kind = str(reason.get("kind") or "ended")
    words = f"turn {_count(data.get('turn'))} {kind}"
    error = reason.get("error")
    if isinstance(error, Mapping) and error.get("message"):
        code = f" ({error['code']})" if error.get("code") else ""
        words += f": {error['message']}{code}"
    used = turn.line()
    return f"{words} · {used}" if used else words


def age(then_ms: int, now_ms: int | None = None) -> str:
    """How long ago ``then_ms`` (epoch ms) was, as people say it: ``5m ago``."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    seconds = max(0, (now - then_ms) // 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now" if seconds < 10 else f"{seconds}s ago"


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000)) if ms else "-"


def header(entry: Mapping[str, Any], held: str | None) -> list[tuple[str, str]]:
    """The facts shown above a transcript, as ``(label, value)``, made visible."""
    usage = entry.get("usage") or {}
    facts = [("session", visible(str(entry["sessionId"]), one_line=True)),
             ("workspace", visible(str(entry.get("workspace") or ""), one_line=True)),
             ("created", _when(int(entry.get("createdAt") or 0))),
             ("updated", f"{_when(int(entry.get('updatedAt') or 0))} "
                         f"({age(int(entry.get('updatedAt') or 0))})"),
             ("turns", str(entry.get("turns", 0))),
             ("tokens", f"{tokens(_count(usage.get('inputTokens')))} in, "
                        f"{tokens(_count(usage.get('outputTokens')))} out"),
             ("cost", money(float(entry.get("costUsd") or 0)))]
    if held:
        facts.append(("running", visible(held, one_line=True)))
    return facts


def title_of(entry: Mapping[str, Any]) -> str:
    """The session's title made visible on one line (``(untitled)`` for none)."""
    return visible(str(entry.get("title") or ""), one_line=True) or "(untitled)"


# -- renderings ------------------------------------------------------------------------


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``."""
    run = longest = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def markdown(entry: Mapping[str, Any], held: str | None,
             parts: Iterable[Block]) -> Iterator[str]:
    """The transcript as Markdown source, a piece at a time."""
    yield f"# {title_of(entry)}\n\n"
    yield "".join(f"- {label}: {value}\n" for label, value in header(entry, held)) + "\n"
    for block in parts:
        if block.kind == "you":
            yield f"## You\n\n{block.text}\n\n"
        elif block.kind == "assistant":
            yield f"## Assistant\n\n{block.text}\n\n"
        elif block.kind == "tool":
            fence = _fence(block.text)
            yield f"**Tool call**\n\n{fence}\n{block.text}\n{fence}\n\n"
        elif block.kind in ("result", "failed"):
            fence = _fence(block.text)
            label = "Tool error" if block.kind == "failed" else "Result"
            yield f"**{label}**\n\n{fence}\n{block.text}\n{fence}\n\n"
        else:
            yield f"*{block.text}*\n\n"


_LABELS = {"you": "You", "assistant": "Assistant", "tool": "→", "result": "←",
           "failed": "← error:", "note": "·", "error": "error:", "turn": "──"}


def plain(entry: Mapping[str, Any], held: str | None,
          parts: Iterable[Block]) -> Iterator[str]:
    """The transcript as plain text, a piece at a time."""
    yield f"{title_of(entry)}\n"
    yield "".join(f"  {label}: {value}\n" for label, value in header(entry, held)) + "\n"
    for block in parts:
        label = _LABELS[block.kind]
        if block.kind in ("you", "assistant"):
            yield f"{label}:\n{block.text}\n\n"
        elif block.kind in ("result", "failed"):
            yield f"{label} " + block.text.replace("\n", "\n  ") + "\n\n"
        elif block.kind == "turn":
            yield f"{label} {block.text}\n\n"
        else:
            yield f"{label} {block.text}\n"


class RichView:
    """The transcript on a terminal through ``rich`` (answers rendered as Markdown)."""

    def __init__(self, out: IO[str]) -> None:
        from rich.console import Console

        self._console = Console(file=out, highlight=False, emoji=False, markup=False)

    def write(self, entry: Mapping[str, Any], held: str | None,
              parts: Iterable[Block]) -> None:
        """Print the header, then each block as it comes."""
        from rich.markdown import Markdown
        from rich.text import Text

        console = self._console
        console.print(Text(title_of(entry), style="bold"))
        for label, value in header(entry, held):
            console.print(Text.assemble((f"  {label}: ", "dim"), value))
        console.print()
        styles = {"tool": "cyan", "result": "dim", "failed": "red", "note": "dim italic",
                  "error": "bold red", "turn": "dim"}
        for block in parts:
            if block.kind in ("you", "assistant"):
                console.print(Text("You" if block.kind == "you" else "Assistant",
                                   style="bold green" if block.kind == "you" else "bold blue"))
                if block.kind == "assistant":
                    console.print(Markdown(block.text, hyperlinks=False))
                else:
                    console.print(Text(block.text))
                console.print()
            else:
                text = f"{_LABELS[block.kind]} {block.text}"
                console.print(Text(text, style=styles[block.kind]))
                if block.kind == "turn":
                    console.print()


def json_lines(events: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """Each event as one line of ASCII JSON (controls escaped, so even a terminal is
    safe), for the streamed ``--json`` document."""
    for event in events:
        yield json.dumps(event, ensure_ascii=True, separators=(",", ":"))
