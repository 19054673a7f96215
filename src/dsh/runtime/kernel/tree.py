"""The config tree as data: rows, how two trees differ, and the order rows start in.

Everything here is pure (no plugins, no I/O), so the kernel's decisions about what to
start, update, replace and dispose can be tested on plain values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError


class RowSpec(NamedTuple):
    """One row of the flat tree the launcher hands over, checked for shape."""

    id: str
    name: str
    config: Mapping[str, Any]
    disabled: bool = False
    inject: tuple[str, ...] = ()

    @classmethod
    def from_row(cls, row: Any) -> RowSpec:
        """Check a row dict (``id``, ``name``, ``config``, ``disabled``, ``inject``)."""
        if not isinstance(row, Mapping):
            raise ConfigError(f"a row must be a mapping, got {type(row).__name__}")
        row_id = row.get("id")
        if not isinstance(row_id, str) or not row_id:
            raise ConfigError(f"a row has no valid 'id' (name {row.get('name')!r})")
        name = row.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"row '{row_id}': 'name' must be a non-empty string")
        config = row.get("config") or {}
        if not isinstance(config, Mapping):
            raise ConfigError(f"row '{row_id}' config: expected object")
        disabled = row.get("disabled", False)
        if not isinstance(disabled, bool):
            raise ConfigError(f"row '{row_id}' disabled: expected boolean")
        inject = row.get("inject") or ()
        if isinstance(inject, str) or not all(isinstance(s, str) and s for s in inject):
            raise ConfigError(f"row '{row_id}' inject: expected a list of service names")
        return cls(row_id, name, config, disabled, tuple(inject))


class RowDiff(NamedTuple):
    """How a new tree differs from the running one, by row id (enabled rows only)."""

    kept: frozenset[str] = frozenset()
    updated: frozenset[str] = frozenset()
    replaced: frozenset[str] = frozenset()
    added: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()


def diff_rows(old: Mapping[str, RowSpec], new: Mapping[str, RowSpec]) -> RowDiff:
    """Classify enabled rows: same → kept; only ``config`` differs → updated; another
    field differs → replaced; only in ``new`` → added; only in ``old`` → removed.

    Disabling a row therefore removes it, and enabling one adds it.
    """
    kept, updated, replaced = set(), set(), set()
    for row_id in old.keys() & new.keys():
        before, after = old[row_id], new[row_id]
        if before == after:
            kept.add(row_id)
        elif (before.name, before.inject) == (after.name, after.inject):
            updated.add(row_id)
        else:
            replaced.add(row_id)
    return RowDiff(frozenset(kept), frozenset(updated), frozenset(replaced),
                   frozenset(new.keys() - old.keys()), frozenset(old.keys() - new.keys()))


def parse_rows(rows: Iterable[Any]) -> tuple[RowSpec, ...]:
    """Check every row's shape and that ids are unique (ConfigError otherwise)."""
    specs = tuple(RowSpec.from_row(row) for row in rows)
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise ConfigError(f"row id '{spec.id}' appears twice in the tree")
        seen.add(spec.id)
    return specs


class StartPlan(NamedTuple):
    """Start order (providers first) and, per row, the rows whose services it needs."""

    order: tuple[str, ...] = ()
    deps: Mapping[str, frozenset[str]] = MappingProxyType({})

    def dependents(self, roots: Iterable[str]) -> set[str]:
        """Rows that need, directly or transitively, a service of a row in ``roots``."""
        found: set[str] = set()
        frontier = set(roots)
        while frontier:
            frontier = {r for r, d in self.deps.items() if d & frontier and r not in found}
            found |= frontier
        return found


def plan_start(rows: Mapping[str, tuple[Sequence[str], Sequence[str]]]) -> StartPlan:
    """Order rows (id → (services it provides, services it needs)) so providers start
    first; ConfigError on a missing, doubled or cyclic provider. Among independent rows,
    tree order (the mapping's order) is kept."""
    providers: dict[str, str] = {}
    for row_id, (provides, _) in rows.items():
        for service in provides:
            other = providers.setdefault(service, row_id)
            if other != row_id:
                raise ConfigError(
                    f"service '{service}' is provided by both row '{other}' and row '{row_id}'"
                )
    deps: dict[str, frozenset[str]] = {}
    for row_id, (_, needs) in rows.items():
        needed = []
        for service in needs:
            if service not in providers:
                raise ConfigError(
                    f"row '{row_id}' needs service '{service}', but no enabled row provides it"
                )
            needed.append(providers[service])
        deps[row_id] = frozenset(needed)

    position = {row_id: i for i, row_id in enumerate(rows)}
    order: list[str] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(row_id: str) -> None:
        if row_id in done:
            return
        if row_id in path:
            cycle = [*path[path.index(row_id):], row_id]
            raise ConfigError("service dependency cycle between rows: "
                              + " -> ".join(f"'{r}'" for r in cycle))
        path.append(row_id)
        for dep in sorted(deps[row_id], key=position.__getitem__):
            visit(dep)
        path.pop()
        done.add(row_id)
        order.append(row_id)

    for row_id in rows:
        visit(row_id)
    return StartPlan(tuple(order), deps)
