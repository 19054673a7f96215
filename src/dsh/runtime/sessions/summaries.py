"""The summary columns of the ``sessions`` rows, the same in both SQL stores.

What a summary holds and which events change it is :mod:`dsh.runtime.agent.summary`'s;
this module turns it into SQL once for both dialects: the ``UPDATE`` a store runs in the
transaction of each event (or batch of events) that changes the summary, the columns a
listing selects and their entries, and the backfill of a store migrated from before
summaries (every stored log folded once, a session at a time, so memory stays bounded).

Columns (all ``NOT NULL``, zero for a session that has none yet): ``workspace`` (the
workspace root, fixed when the session is created), ``turns``, ``input_tokens``,
``output_tokens``, ``cache_hit_tokens``, ``cache_miss_tokens``, ``reasoning_tokens``,
``cost_usd``, and ``revision`` (bumped by every save, the first half of a session's
:data:`~dsh.runtime.agent.store.Version`). ``updated_at`` moves to the time of each
event that changes the summary, or of a save.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from dsh.runtime.agent import summary
from dsh.runtime.agent.summary import Delta, Summary

USAGE_COLUMNS = ("input_tokens", "output_tokens", "cache_hit_tokens", "cache_miss_tokens",
                 "reasoning_tokens")
"""The token columns, in :data:`~dsh.runtime.agent.summary.USAGE_KEYS` order."""

LISTED = ("id, cwd, workspace, title, status, profile, created_at, updated_at, turns, "
          + ", ".join(USAGE_COLUMNS) + ", cost_usd")
"""The columns a listing selects, in the order :func:`entry_of` reads them."""


def update_sql(table: str, *, greatest: str, mark: str, also: str = "") -> str:
    """The ``UPDATE`` that applies one :class:`Delta` to the row of one session, in a
    dialect: ``greatest`` is its two-argument maximum (``max``, ``GREATEST``), ``mark``
    its parameter placeholder (``?``, ``%s``); ``also`` is added to its ``WHERE``.
    Parameters: :func:`update_params`."""
    adds = ", ".join(f"{c} = {c} + {mark}" for c in USAGE_COLUMNS)
    return (f"UPDATE {table} SET turns = {greatest}(turns, {mark}), "
            f"title = CASE WHEN title = '' THEN {mark} ELSE title END, {adds}, "
            f"cost_usd = cost_usd + {mark}, updated_at = {greatest}(updated_at, {mark}) "
            f"WHERE id = {mark}{also}")


def update_params(session_id: str, change: Delta) -> tuple[Any, ...]:
    """The parameters of :func:`update_sql` for ``change`` to ``session_id``."""
    return (change.turn, change.title, *change.usage, change.cost, change.time, session_id)


def entry_of(row: Sequence[Any]) -> dict[str, Any]:
    """The listing entry of a row selected as :data:`LISTED`."""
    (session_id, cwd, workspace, title, status, profile, created, updated, turns,
     tokens_in, tokens_out, hit, miss, reasoning, cost) = row
    return summary.entry(session_id, cwd, workspace or cwd, title, created, updated, turns,
                         (tokens_in, tokens_out, hit, miss, reasoning), cost,
                         status=status, profile=profile)


def backfill(log: Iterable[tuple[str, str]]) -> Iterator[tuple[str, Summary]]:
    """The summary of each session of ``log``: ``(session_id, event JSON)`` rows ordered
    by session and seq, folded one session at a time (a migration's one pass)."""
    current: str | None = None
    folded = Summary()
    for session_id, body in log:
        if session_id != current:
            if current is not None:
                yield current, folded
            current, folded = session_id, Summary()
        change = summary.delta(json.loads(body))
        if change is not None:
            folded = folded.plus(change)
    if current is not None:
        yield current, folded


def workspace_of(cwd: str, state_text: str | None) -> str:
    """A stored row's workspace root: its state's ``root``, else its ``cwd`` (a session
    stored before roots were kept took its cwd as its root)."""
    try:
        state = json.loads(state_text or "{}")
    except ValueError:
        state = {}
    root = state.get("root") if isinstance(state, dict) else None
    return root if isinstance(root, str) and root else cwd
