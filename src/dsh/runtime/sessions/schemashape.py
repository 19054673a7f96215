"""What a session store's tables must hold at a schema version, read from its own DDL.

A store refuses, at open and before it migrates anything, a database that is not what
its version number says: another program's file or schema (tables, no dsh version),
one whose tables or columns were dropped, or a version newer than this dsh. Used at
face value, such a database fails later, on use, with an internal error ("no such
table: events") in the middle of a turn; migrated, another program's file would be
half dsh's.

The shape a version must have is derived from the very statements that create it (each
store's numbered steps: ``CREATE TABLE`` column lists, ``ALTER TABLE ... ADD COLUMN``),
so it cannot drift from them. Each store reads what its database holds with one query
(SQLite's ``pragma_table_info``, PostgreSQL's ``information_schema.columns``) and asks
:func:`problems`. Extra tables and columns are allowed (an index or a column a user
added breaks nothing); a missing one is not.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

Shape = dict[str, frozenset[str]]
"""Table name → the column names it must have."""

_CREATE = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:\{s\}\.)?(\w+)\s*"
                     r"\((.*)\)[^()]*$", re.IGNORECASE | re.DOTALL)
_ADD = re.compile(r"^\s*ALTER\s+TABLE\s+(?:\{s\}\.)?(\w+)\s+ADD\s+COLUMN\s+(\w+)",
                  re.IGNORECASE)
_CONSTRAINTS = {"PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT"}


@functools.cache
def shape(statements: tuple[str, ...]) -> Shape:
    """The tables and columns ``statements`` (applied in order) create; ``{s}.`` (the
    PostgreSQL store's schema placeholder) is allowed before a table's name."""
    found: dict[str, set[str]] = {}
    for statement in statements:
        created = _CREATE.match(statement)
        if created is not None:
            found[created.group(1)] = {item.split()[0].strip('"') for item in
                                       _top_level(created.group(2))
                                       if item.split()[0].upper() not in _CONSTRAINTS}
            continue
        added = _ADD.match(statement)
        if added is not None:
            found.setdefault(added.group(1), set()).add(added.group(2))
    return {table: frozenset(columns) for table, columns in found.items()}


def problems(expected: Mapping[str, frozenset[str]],
             present: Mapping[str, Iterable[str]]) -> list[str]:
    """What ``present`` (table → columns, as the database holds them) lacks of
    ``expected``, each a short phrase (``table events is missing``, ``table sessions
    lacks column turns``); empty when nothing is missing."""
    out: list[str] = []
    for table in sorted(expected):
        if table not in present:
            out.append(f"table {table} is missing")
            continue
        missing = sorted(expected[table] - set(present[table]))
        if missing:
            out.append(f"table {table} lacks column{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(missing)}")
    return out


def _top_level(body: str) -> list[str]:
    """The comma-separated items of a column list, commas inside parentheses kept."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in body:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]
