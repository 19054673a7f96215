"""Counts as people write them: "1 session", "2 sessions".

Every face prints counts (sessions exported, turns, steps, lines left out); one function
keeps "1 sessions" out of all of them.
"""

from __future__ import annotations

__all__ = ["counted"]


def counted(count: object, noun: str) -> str:
    """``count`` and ``noun``, with an ``s`` unless ``count`` is 1. ``count`` is shown as
    it is: a count read from a file may be anything, and an error quoting it must not fail
    on it."""
    return f"{count} {noun if count == 1 else noun + 's'}"
