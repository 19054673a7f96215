"""Human-readable one-line progress for the headless runner's stderr.

:class:`Progress` turns the session's events into short lines (what the model said on
its way, which tool it called, how that went) so a person watching a long task can follow
it without the JSON stream. It is pure: events in, lines out, no I/O, so it is tested
directly. Long values are cut to :data:`WIDTH` characters; only the first line of a tool
result is shown, with a count of the rest.

Every piece of a line that came from elsewhere (the model's remark, a tool's name,
arguments and output, an error message) goes through :func:`dsh.core.termtext.visible`
first, so no control character of theirs reaches the terminal; a ``paint`` function
(:meth:`dsh.core.termstyle.Style.paint` when stderr is coloured) styles the pieces after.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from dsh.core.termtext import visible

WIDTH = 160

Paint = Callable[..., str]
"""``paint(text, *names)``: ``text`` styled with named attributes (or left as it is)."""


def plain(text: str, *names: str) -> str:
    """The ``paint`` of uncoloured output."""
    return text


def _clip(text: str, width: int = WIDTH) -> str:
    """``text`` on one line, its controls shown, cut to ``width`` characters."""
    text = visible(" ".join(text.split()), one_line=True)
    return text if len(text) <= width else text[: width - 3] + "..."


def _first_line(text: str) -> str:
    """The first non-empty line, with how many more follow (so a summary stays honest)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return "(no output)"
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return _clip(lines[0].strip()) + more


def _arguments(text: Any) -> str:
    """Tool arguments as compact JSON (the model's own text when it is not JSON)."""
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False)
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), ensure_ascii=False, separators=(", ", ": "))
    return _clip(text)


def message_text(message: Mapping[str, Any]) -> str:
    """The text blocks of a message, joined (tool-call blocks left out)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
    )


def has_tool_calls(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message asks for tools (so it is not the final answer)."""
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool-call" for b in content
    )


def _diff_counts(data: Mapping[str, Any]) -> str:
    """`` (+A -R)`` for a result that changed a file (``data.diff``), else nothing."""
    diff = data.get("diff")
    if not isinstance(diff, Mapping) or not isinstance(diff.get("added"), int):
        return ""
    return f" (+{diff['added']} -{diff.get('removed', 0)})"


class Progress:
    """Remembers tool names by call id, so a result line can say which tool it was."""

    def __init__(self, paint: Paint = plain) -> None:
        self._names: dict[str, str] = {}
        self._paint = paint

    def line(self, event: Mapping[str, Any], *, remarks: bool = True) -> str | None:
        """The progress line for one event, or ``None`` for events not worth a line;
        ``remarks=False`` leaves out the model's remarks (shown elsewhere)."""
        paint = self._paint
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "assistant/message":
            message = data.get("message") or {}
            text = message_text(message).strip()
            # The final answer goes to stdout; only the model's remarks on its way get here.
            if not remarks or not text or not has_tool_calls(message):
                return None
            return paint(f"· {_first_line(text)}", "dim")
        if kind == "tool/call":
            name = _clip(str(data.get("name", "?")), 60)
            self._names[str(data.get("callId", ""))] = name
            return (f"{paint('→', 'dim')} {paint(name, 'bold', 'cyan')} "
                    f"{_arguments(data.get('arguments', '{}'))}")
        if kind == "tool/result":
            message = data.get("message") or {}
            name = self._names.get(str(message.get("toolCallId", "")), "tool")
            text = message_text(message)
            if message.get("isError"):
                code = (data.get("error") or {}).get("code")
                label = f"{name} failed" + (f" [{_clip(str(code), 40)}]" if code else "")
                return f"{paint('←', 'dim')} {paint(label, 'red')}: {_first_line(text)}"
            return (f"{paint('←', 'dim')} {paint(name, 'green')}: {_first_line(text)}"
                    f"{paint(_diff_counts(data), 'dim')}")
        if kind == "error":
            return paint(f"! {_clip(str(data.get('message', 'error')))}", "red")
        if kind == "warning":
            return paint(f"! warning: {_clip(str(data.get('message', 'warning')))}", "yellow")
        return None
