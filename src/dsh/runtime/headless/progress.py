"""Human-readable one-line progress for the headless runner's stderr.

:class:`Progress` turns the session's events into short lines (what the model said on
its way, which tool it called, how that went) so a person watching a long task can follow
it without the JSON stream. It is pure: events in, lines out, no I/O, so it is tested
directly. Long values are cut to :data:`WIDTH` characters; only the first line of a tool
result is shown, with a count of the rest.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

WIDTH = 160


def _clip(text: str, width: int = WIDTH) -> str:
    text = " ".join(text.split()) if "\n" not in text else text
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


class Progress:
    """Remembers tool names by call id, so a result line can say which tool it was."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}

    def line(self, event: Mapping[str, Any]) -> str | None:
        """The progress line for one event, or ``None`` for events not worth a line."""
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "assistant/message":
            message = data.get("message") or {}
            text = message_text(message).strip()
            # The final answer goes to stdout; only the model's remarks on its way get here.
            return f"· {_first_line(text)}" if text and has_tool_calls(message) else None
        if kind == "tool/call":
            name = str(data.get("name", "?"))
            self._names[str(data.get("callId", ""))] = name
            return f"→ {name} {_arguments(data.get('arguments', '{}'))}"
        if kind == "tool/result":
            message = data.get("message") or {}
            name = self._names.get(str(message.get("toolCallId", "")), "tool")
            text = message_text(message)
            if message.get("isError"):
                code = (data.get("error") or {}).get("code")
                label = f"{name} failed" + (f" [{code}]" if code else "")
                return f"← {label}: {_first_line(text)}"
            return f"← {name}: {_first_line(text)}"
        if kind == "error":
            return f"! {_clip(str(data.get('message', 'error')))}"
        if kind == "warning":
            return f"! warning: {_clip(str(data.get('message', 'warning')))}"
        return None
