"""The status line under the editor: what the chat is using and what it has cost.

``model·effort │ ctx 12% of 128k │ 14.2k tok, 80% cached │ $0.0123 │ ask │ ~/work │
a1b2c3d4 │ sandbox: bubblewrap``, and while a turn runs a spinner with the time it has
taken. Pure functions of a :class:`Status` value, so the line is tested without a screen;
every foreign part (a model name, a path) is cleaned first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text

from dsh.chat.safety import line

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@dataclass
class Status:
    """What the status line shows."""

    provider: str = ""
    model: str = ""
    effort: str | None = None
    policy: str | None = None
    context_tokens: int | None = None
    context_window: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_hit_tokens: int = 0
    cost_usd: float | None = None
    workspace: str = ""
    session_id: str | None = None
    sandbox: str = "…"
    running_since: float | None = None
    queued: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def take_summary(self, entry: dict[str, Any]) -> None:
        """Fold in the session's summary (its ``session/list`` entry): the tokens and cost
        of every model call so far, compactions included. A cost of 0 is none reported
        (an unpriced route reports none), not shown."""
        usage = entry.get("usage")
        used = usage if isinstance(usage, dict) else {}
        self.input_tokens = int(used.get("inputTokens") or 0)
        self.output_tokens = int(used.get("outputTokens") or 0)
        self.cache_hit_tokens = int(used.get("cacheHitTokens") or 0)
        cost = entry.get("costUsd")
        self.cost_usd = float(cost) if isinstance(cost, (int, float)) and cost > 0 else None

    def take_settings(self, settings: dict[str, Any]) -> None:
        """Fold in a ``session/settings/get`` answer."""
        self.provider = str(settings.get("provider") or self.provider)
        self.model = str(settings.get("model") or self.model)
        self.effort = settings.get("reasoningEffort")
        self.policy = settings.get("policy") or settings.get("policyDefault")
        if isinstance(settings.get("contextWindow"), int):
            self.context_window = settings["contextWindow"]


def tokens(count: int) -> str:
    """``950``, ``14.2k``, ``1.3M``."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def short_path(path: str) -> str:
    """``path`` with the user's home as ``~``."""
    home = os.path.expanduser("~")
    if home and home != "/" and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home):]
    return path


def render(status: Status, now: float, *, width: int = 200) -> Text:
    """The status line at time ``now``, cut to ``width`` cells (the least useful last)."""
    parts: list[tuple[str, str]] = []
    if status.running_since is not None:
        elapsed = max(0.0, now - status.running_since)
        frame = SPINNER[int(elapsed * 10) % len(SPINNER)]
        queued = f", {status.queued} queued" if status.queued else ""
        parts.append((f"{frame} working {elapsed:.1f}s{queued}", "bold"))
    model = line(status.model or "?")
    if status.effort:
        model += f"·{line(status.effort)}"
    parts.append((model, "bold"))
    if status.context_window:
        used = status.context_tokens or 0
        share = 100 * used / status.context_window
        parts.append((f"ctx {share:.0f}% of {tokens(status.context_window)}",
                      "red" if share >= 80 else ""))
    total = status.input_tokens + status.output_tokens
    if total:
        cached = (f", {100 * status.cache_hit_tokens / status.input_tokens:.0f}% cached"
                  if status.input_tokens and status.cache_hit_tokens else "")
        parts.append((f"{tokens(total)} tok{cached}", ""))
    if status.cost_usd is not None:
        parts.append((f"${status.cost_usd:.4f}", ""))
    if status.policy:
        parts.append((line(status.policy), "yellow" if status.policy != "ask" else ""))
    parts.append((line(short_path(status.workspace)), "dim"))
    if status.session_id:
        parts.append((line(status.session_id)[:8], "dim"))
    parts.append((f"sandbox: {line(status.sandbox)}", "dim"))
    if status.note:
        parts.insert(1, (line(status.note), "italic"))
    whole = _joined(parts)
    if whole.cell_len <= width:
        return whole
    # Too narrow for one line: where the chat works on a second line, each cut to fit.
    where = sum(1 for said, _ in parts if said.startswith(("sandbox:",))) + 1 + \
        (1 if status.session_id else 0)
    first, second = _joined(parts[:-where]), _joined(parts[-where:])
    for half in (first, second):
        half.truncate(width, overflow="ellipsis")
    return Text("\n").join([first, second])


def _joined(parts: list[tuple[str, str]]) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    for index, (said, style) in enumerate(parts):
        if index:
            out.append(" │ ", style="dim")
        out.append(said, style=style)
    return out


def sandbox_of(doctor: dict[str, Any]) -> str:
    """The sandbox as ``dsh doctor --json`` reports it for the shell row (its message's
    head: ``workspace-write, network off; bubblewrap works here``)."""
    for check in (doctor.get("data") or {}).get("checks") or ():
        if isinstance(check, dict) and str(check.get("id", "")).startswith("sandbox."):
            message = str(check.get("message", ""))
            status = check.get("status")
            said = message.split(" (", 1)[0]
            return said if status == "ok" else f"{status}: {said}"
    return "none (no shell tool)"
