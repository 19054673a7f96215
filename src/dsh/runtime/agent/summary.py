"""A session's summary: what a listing shows of it, kept current event by event.

Listing 10,000 sessions must read no log, so every store keeps one summary per session
beside its log (the SQL stores as columns of the session row) and updates it in the same
transaction as each appended event that changes it. The rule of what changes it is
written once, here, as :func:`delta`; the stores apply a delta as one ``UPDATE``
(:mod:`dsh.runtime.sessions.summaries`), the in-memory store folds it in Python, and a
store migrated from before summaries folds every stored log once (:func:`fold`).

The events that count:

* ``turn/start``: ``turns`` is the highest turn number seen;
* ``session/title``: the title, the first one kept (as a reload does);
* ``assistant/message`` and ``context/compacted`` with ``usage``: tokens and ``costUsd``
  added (a compaction's summary is a model call that costs too);
* those and ``turn/end``: ``updatedAt`` moves to the event's time.

Everything else (deltas, tool events) leaves the summary as it was, so the stream of a
model's answer costs no more than before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from dsh.runtime.agent import events
from dsh.runtime.agent.compaction import COMPACTED

USAGE_KEYS = ("inputTokens", "outputTokens", "cacheHitTokens", "cacheMissTokens",
              "reasoningTokens")
"""The token counts a summary adds up, in the wire spelling and in this order."""


class Delta(NamedTuple):
    """What one event (or a batch of them) changes in a summary.

    ``turn``: the highest turn started (0: none); ``title``: a title to keep if the
    session has none yet (empty: none); ``usage``: tokens to add, in :data:`USAGE_KEYS`
    order; ``cost``: USD to add; ``time``: the latest event time (epoch ms).
    """

    turn: int = 0
    title: str = ""
    usage: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    cost: float = 0.0
    time: int = 0

    def then(self, later: Delta) -> Delta:
        """This delta followed by ``later``: one ``UPDATE`` for a batch of events."""
        return Delta(max(self.turn, later.turn), self.title or later.title,
                     tuple(a + b for a, b in zip(self.usage, later.usage, strict=True)),  # type: ignore[arg-type]
                     self.cost + later.cost, max(self.time, later.time))


class Summary(NamedTuple):
    """A session's summary as a store keeps it."""

    title: str = ""
    turns: int = 0
    usage: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    cost: float = 0.0
    updated: int = 0

    def as_delta(self) -> Delta:
        """This summary as one change from nothing (a migration's backfill writes it so)."""
        return Delta(self.turns, self.title, self.usage, self.cost, self.updated)

    def plus(self, change: Delta) -> Summary:
        """This summary with ``change`` applied (what the SQL ``UPDATE`` does)."""
        return Summary(self.title or change.title, max(self.turns, change.turn),
                       tuple(a + b for a, b in zip(self.usage, change.usage, strict=True)),  # type: ignore[arg-type]
                       self.cost + change.cost, max(self.updated, change.time))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(data: Mapping[str, Any]) -> tuple[tuple[int, int, int, int, int], float]:
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        return (0, 0, 0, 0, 0), 0.0
    counts = tuple(_count(usage.get(key)) for key in USAGE_KEYS)
    cost = usage.get("costUsd")
    spent = float(cost) if isinstance(cost, (int, float)) and not isinstance(
        cost, bool) and cost > 0 else 0.0
    return counts, spent  # type: ignore[return-value]


def delta(event: Mapping[str, Any]) -> Delta | None:
    """What ``event`` changes in its session's summary; None when nothing (most events)."""
    kind = event.get("type")
    data = event.get("data")
    if not isinstance(data, Mapping):
        data = {}
    when = event.get("time")
    time = when if isinstance(when, int) and not isinstance(when, bool) else 0
    if kind == events.TURN_START:
        return Delta(turn=_count(data.get("turn")), time=time)
    if kind == events.SESSION_TITLE:
        title = data.get("title")
        return Delta(title=title if isinstance(title, str) else "") if title else None
    if kind in (events.ASSISTANT_MESSAGE, COMPACTED):
        usage, cost = _usage(data)
        return Delta(usage=usage, cost=cost, time=time)
    if kind == events.TURN_END:
        return Delta(time=time)
    return None


def combine(log: Iterable[Mapping[str, Any]]) -> Delta | None:
    """The one delta of a batch of events (None when none of them changes anything)."""
    total: Delta | None = None
    for event in log:
        change = delta(event)
        if change is not None:
            total = change if total is None else total.then(change)
    return total


def fold(log: Iterable[Mapping[str, Any]]) -> Summary:
    """The summary of a whole log: what the stores keep, recomputed."""
    change = combine(log)
    return Summary() if change is None else Summary().plus(change)


def entry(session_id: str, cwd: str, workspace: str, title: str, created: int,
          updated: int, turns: int, usage: Sequence[int], cost: float,
          **more: Any) -> dict[str, Any]:
    """A listing entry in the wire spelling (``session/list``, the web's list, ``dsh
    sessions list --json``): ``sessionId, cwd, workspace, title, createdAt, updatedAt,
    turns, usage: {inputTokens, ...}, costUsd`` and ``more`` (``status``, ``profile``).

    ``usage`` is in :data:`USAGE_KEYS` order; ``costUsd`` is rounded to a millionth of a
    dollar, as summed floats drift below that. A listing builds 10,000 of these, so this
    is plain positional work.
    """
    return {"sessionId": session_id, "cwd": cwd, "workspace": workspace, "title": title,
            "createdAt": created, "updatedAt": updated if updated > created else created,
            "turns": turns,
            "usage": {"inputTokens": usage[0], "outputTokens": usage[1],
                      "cacheHitTokens": usage[2], "cacheMissTokens": usage[3],
                      "reasoningTokens": usage[4]},
            "costUsd": round(cost, 6) if cost else 0.0, **more}
