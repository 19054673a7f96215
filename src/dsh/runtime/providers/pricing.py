"""What a response cost: a route's price table, and token estimates for silent servers.

A route row may carry ``prices``, USD per million tokens for each model id it serves, or
for a ``*`` pattern of ids (the most specific key wins, as :func:`.catalog.best_match`
says: an exact id, then the pattern with the most literal characters)::

    prices:
      deepseek-flash:
        input_cache_hit: 0.006      # prompt tokens read from the provider's cache
        input_cache_miss: 0.30      # the other prompt tokens
        cache_write: 0.30           # prompt tokens written to the cache (Anthropic)
        output: 1.20                # completion tokens, reasoning included
        off_peak: {input_cache_hit: 0.003, input_cache_miss: 0.15, output: 0.60}
      "claude-sonnet-4-6*": {input_cache_miss: 3, input_cache_hit: 0.30,
                             cache_write: 3.75, output: 15}
    peak_hours_utc: ["01:00-04:00", "06:00-10:00"]

``off_peak`` prices apply outside ``peak_hours_utc`` and all weekend (UTC days), the way
DeepSeek bills; a route without ``off_peak`` prices has one price at all hours. An unset
``cache_write`` costs what ``input_cache_miss`` does. The cost is an estimate: public
holidays, which DeepSeek also bills off-peak, are priced as ordinary days here.

A server that reports no usage at all (some local servers) still gets a :class:`Usage`,
estimated at about four characters a token and marked ``estimated``.

Pure functions and values, no I/O: tested from plain numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from dsh.core.errors import ConfigError
from dsh.runtime.providers.base import ModelRequest, Usage
from dsh.runtime.providers.catalog import best_match

if TYPE_CHECKING:
    import datetime as _dt

CHARS_PER_TOKEN = 4
_PRICE_KEYS = ("input_cache_hit", "input_cache_miss", "cache_write", "output")
_WINDOW = re.compile(r"^(\d\d):(\d\d)-(\d\d):(\d\d)$")

_PRICE_FIELDS: dict[str, Any] = {key: {"type": "number", "minimum": 0} for key in _PRICE_KEYS}
CONFIG_SCHEMA: Mapping[str, Any] = {
    "prices": {
        "type": "object",
        "description": "USD per million tokens, by model id or * pattern "
                       "(see dsh.runtime.providers.pricing)",
        "additionalProperties": {
            "type": "object",
            "properties": {**_PRICE_FIELDS, "off_peak": {
                "type": "object", "properties": _PRICE_FIELDS, "additionalProperties": False}},
            "required": ["input_cache_miss", "output"],
            "additionalProperties": False,
        },
        "default": {},
    },
    "peak_hours_utc": {
        "type": "array", "items": {"type": "string"}, "default": [],
        "description": "HH:MM-HH:MM windows (UTC, Monday to Friday) when the peak prices apply",
    },
}
"""The row config keys this module reads, merged into each HTTP provider's schema."""


class Price(NamedTuple):
    """USD per million tokens of each kind."""

    input_cache_hit: float
    input_cache_miss: float
    cache_write: float
    output: float

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Price:
        """A price from one validated ``prices`` entry (or its ``off_peak`` part)."""
        miss = float(entry["input_cache_miss"])
        return cls(float(entry.get("input_cache_hit", miss)), miss,
                   float(entry.get("cache_write", miss)), float(entry["output"]))


class PriceTable:
    """A route's prices; :meth:`cost` prices one response's usage."""

    def __init__(self, prices: Mapping[str, Mapping[str, Any]],
                 peak_hours_utc: Sequence[str] = (), *, row_id: str = "?") -> None:
        self._peak: dict[str, Price] = {}
        self._off_peak: dict[str, Price] = {}
        for model, entry in prices.items():
            self._peak[model] = Price.of(entry)
            off = entry.get("off_peak")
            if off:
                # A partial off_peak entry takes the peak price for what it leaves out.
                self._off_peak[model] = Price.of({**entry, **off})
        self._windows = [_window(text, row_id) for text in peak_hours_utc]
        self._keys: dict[str, str | None] = {}  # model id -> its price entry's key

    def __bool__(self) -> bool:
        return bool(self._peak)

    def price(self, model: str, at: _dt.datetime) -> Price | None:
        """The price of ``model`` at UTC time ``at``; None when the table has none."""
        if model not in self._keys:
            self._keys[model] = best_match(model, self._peak)
        key = self._keys[model]
        if key is None:
            return None
        if key in self._off_peak and not self.is_peak(at):
            return self._off_peak[key]
        return self._peak[key]

    def is_peak(self, at: _dt.datetime) -> bool:
        """Whether ``at`` (UTC) falls in a peak window: a weekday inside one of the windows
        (every moment is peak when the route names no windows)."""
        if not self._windows:
            return True
        if at.weekday() >= 5:
            return False
        minute = at.hour * 60 + at.minute
        return any(start <= minute < end for start, end in self._windows)

    def cost(self, model: str, usage: Usage, at: _dt.datetime) -> float | None:
        """USD for ``usage`` of ``model`` at ``at`` (UTC); None when it has no price."""
        price = self.price(model, at)
        if price is None:
            return None
        hit = usage.cache_hit_tokens or 0
        write = usage.cache_write_tokens or 0
        miss = max(0, usage.input_tokens - hit - write)
        total = (hit * price.input_cache_hit + miss * price.input_cache_miss
                 + write * price.cache_write + usage.output_tokens * price.output)
        return round(total / 1_000_000, 8)

    def priced(self, model: str, usage: Usage, at: _dt.datetime | None = None) -> Usage:
        """``usage`` with ``cost_usd`` filled in, when the table prices ``model``."""
        if at is None:
            import datetime  # at the first priced response, not at boot

            at = datetime.datetime.now(datetime.timezone.utc)
        cost = self.cost(model, usage, at)
        return usage if cost is None else usage._replace(cost_usd=cost)


def _window(text: Any, row_id: str) -> tuple[int, int]:
    match = _WINDOW.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f"row '{row_id}' config.peak_hours_utc: expected HH:MM-HH:MM windows")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59 or end > 24 * 60 or start >= end:
        raise ConfigError(f"row '{row_id}' config.peak_hours_utc: {text!r} is not a window "
                          "within one day (start before end)")
    return start, end


def tokens(chars: int) -> int:
    """Estimated tokens of ``chars`` characters of text."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def request_chars(request: ModelRequest) -> int:
    """Characters of text a request sends: message text, reasoning, tool calls, schemas."""
    size = 0
    for message in request.messages:
        for block in message.get("content") or ():
            for key in ("text", "arguments", "name"):
                value = block.get(key)
                if isinstance(value, str):
                    size += len(value)
    for tool in request.tools:
        size += len(tool.name) + len(tool.description) + len(str(dict(tool.parameters)))
    return size


def estimated(request: ModelRequest, output_chars: int) -> Usage:
    """The usage of a response whose server reported none, marked as estimated."""
    return Usage(tokens(request_chars(request)), tokens(output_chars), estimated=True)
