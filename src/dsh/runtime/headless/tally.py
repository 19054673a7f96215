"""What one turn used, summed from its events: the model, steps, tokens, cost.

Every ``assistant/message`` carries the ``usage`` of its response (input tokens counting
the whole prompt, cached or not; the cached part where the API says; output and
reasoning tokens; ``costUsd`` where the route has prices; ``estimated`` where the server
reported nothing and the counts were guessed from the text). :class:`Tally` adds them up
for the terminal's last line and for ``--json-format codex``'s ``turn.completed``. Pure:
events in, figures out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.core.wording import counted


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class Tally:
    """The running sums of one turn (fed every event of it, in order)."""

    def __init__(self) -> None:
        self.model = ""
        self.steps = 0
        self.input_tokens = 0
        self.cached_tokens: int | None = None
        self.cache_write_tokens = 0
        self.output_tokens = 0
        self.reasoning_tokens = 0
        self.cost_usd: float | None = None
        self.estimated = False

    def add(self, event: Mapping[str, Any]) -> None:
        """Count what ``event`` adds (most events add nothing)."""
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "step/start":
            self.steps += 1
        elif kind == "request/context" and isinstance(data.get("model"), str):
            self.model = data["model"]
        elif kind == "assistant/message":
            source = (data.get("message") or {}).get("source") or {}
            if isinstance(source.get("model"), str) and source["model"]:
                self.model = source["model"]
            usage = data.get("usage")
            if isinstance(usage, Mapping):
                self._add_usage(usage)

    def _add_usage(self, usage: Mapping[str, Any]) -> None:
        self.input_tokens += _count(usage.get("inputTokens"))
        self.output_tokens += _count(usage.get("outputTokens"))
        self.cache_write_tokens += _count(usage.get("cacheWriteTokens"))
        self.reasoning_tokens += _count(usage.get("reasoningTokens"))
        if "cacheHitTokens" in usage:
            self.cached_tokens = (self.cached_tokens or 0) + _count(usage["cacheHitTokens"])
        cost = usage.get("costUsd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            self.cost_usd = (self.cost_usd or 0.0) + float(cost)
        self.estimated = self.estimated or usage.get("estimated") is True

    def line(self, seconds: float) -> str:
        """One line for a person: ``model · N steps · in (cached share) · out · cost · time``.

        Estimated counts are marked ``~``; a cached share or cost the API never reported
        is said to be unknown rather than shown as zero.
        """
        mark = "~" if self.estimated else ""
        tokens_in = f"{mark}{self.input_tokens:,} in"
        if self.cached_tokens is not None and self.input_tokens:
            tokens_in += f" ({self.cached_tokens * 100 // self.input_tokens}% cached)"
        parts = [self.model or "model unknown",
                 counted(self.steps, "step"),
                 tokens_in, f"{mark}{self.output_tokens:,} out",
                 "cost unknown" if self.cost_usd is None else money(self.cost_usd),
                 duration(seconds)]
        return " · ".join(parts)


def money(usd: float) -> str:
    """A cost in dollars: cents for a dollar and more, four decimals below (a turn's cost
    is often a fraction of a cent)."""
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.4f}"


def duration(seconds: float) -> str:
    """``4.2s``, or ``3m 05s`` from a minute on."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m {rest:02d}s"
