"""Naming a stored thing by the start of its id, as git takes a commit's.

Session ids are 36-character UUIDs: people copy the first few characters from a listing.
``dsh sessions show|rm``, headless ``--session-id`` and the chat's ``/resume`` read an id
the same way: an id that is one of them names itself; otherwise a start of at least
:data:`MIN_PREFIX` characters names the one id it begins, and one that begins several is
refused saying how many. Protocol requests (``session/resume`` and the rest) take whole
ids only: a client names what it was given.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MIN_PREFIX", "ambiguous", "named"]

MIN_PREFIX = 4
"""The shortest start taken for a whole id: a shorter one would name a session by chance
(one hex digit in 16 sessions)."""


def named(given: str, ids: Iterable[str]) -> list[str]:
    """The ids ``given`` names among ``ids`` (in their order): itself alone when it is one
    of them, else every id it begins; none when it is shorter than :data:`MIN_PREFIX`."""
    ids = list(ids)
    if given in ids:
        return [given]
    if len(given) < MIN_PREFIX:
        return []
    return [i for i in ids if i.startswith(given)]


def ambiguous(given: str, matches: list[str]) -> str:
    """The one-line refusal of a start that begins several ids (the first three shown)."""
    shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
    return f"{given!r} begins {len(matches)} session ids ({shown}): give more of it"
