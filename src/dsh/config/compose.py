"""Composition: ordered patch layers applied over an empty root into one config tree.

:func:`compose` is a pure function of its layers. It builds a fresh working tree on every
call, copies every value it takes from a layer, and never mutates or writes back a
:class:`~dsh.config.patchfile.PatchLayer`; so the same cached layers can be recomposed on every
live reload, and property tests can check determinism directly.

Every key of every row remembers the layer and line that last set it (its provenance),
which is what ``--dump-config`` shows next to the value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from dsh.config import tags
from dsh.config.patchfile import InsertedRow, Operation, PatchLayer

_CONTAINERS = (dict, list)


def _copy(value: Any) -> Any:
    """Copy plain YAML data (tags are frozen and shared).

    Containers are copied whole, then only their container items copied again: no call
    per leaf, which matters when composition copies every row of every layer.
    """
    if isinstance(value, dict):
        value = dict(value)
        for key, item in value.items():
            if isinstance(item, _CONTAINERS):
                value[key] = _copy(item)
    elif isinstance(value, list):
        value = list(value)
        for index, item in enumerate(value):
            if isinstance(item, _CONTAINERS):
                value[index] = _copy(item)
    return value


class _Node:
    """A row of the working tree while layers are applied.

    ``prov`` maps each key to ``"file:line"``, or to a bare line number in ``where`` (the
    layer that inserted the row): most keys are never set again, so their text is only
    built if someone reads it (see :class:`Provenance`).
    """

    __slots__ = ("children", "full_id", "prov", "values", "where")

    def __init__(self, full_id: str, values: dict[str, Any], prov: dict[str, str | int],
                 where: str, children: list[_Node] | None) -> None:
        self.full_id = full_id
        self.values = values
        self.prov = prov
        self.where = where
        self.children = children


class Provenance(Mapping[str, str]):
    """A composed row's ``{key: "file:line"}``, formatted when read (a read-only view)."""

    __slots__ = ("_entries", "_where")

    def __init__(self, entries: Mapping[str, str | int], where: str) -> None:
        self._entries = entries
        self._where = where

    def __getitem__(self, key: str) -> str:
        entry = self._entries[key]
        return entry if isinstance(entry, str) else f"{self._where}:{entry}"

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return repr(dict(self))


class Row(NamedTuple):
    """A composed row: values, provenance per key, children for a group row."""

    id: str
    values: Mapping[str, Any]
    provenance: Mapping[str, str]
    children: tuple[Row, ...] | None

    @property
    def name(self) -> str | None:
        """The plugin reference (None for a group without one)."""
        return self.values.get("name")

    @property
    def disabled(self) -> bool:
        """Whether the row itself is switched off."""
        return bool(self.values.get("disabled", False))

    def to_json(self) -> dict[str, Any]:
        """The row in the ``--dump-config --json`` shape (children nested in config)."""
        out: dict[str, Any] = {"id": self.id}
        for key in ("name", "disabled", "group", "inject"):
            if key in self.values:
                out[key] = self.values[key]
        if self.children is not None:
            out["group"] = True
            out["config"] = [child.to_json() for child in self.children]
        elif "config" in self.values:
            out["config"] = tags.to_json(self.values["config"])
        out["provenance"] = dict(sorted(self.provenance.items()))
        return out


class ComposedTree(NamedTuple):
    """The result of composition: rows in order, the layers used, and warnings."""

    layers: tuple[PatchLayer, ...]
    rows: tuple[Row, ...]
    warnings: tuple[str, ...]

    def walk(self) -> Iterator[tuple[Row, bool]]:
        """Every row depth-first with its effective disabled flag (a group's wins)."""

        def visit(rows: Sequence[Row], off: bool) -> Iterator[tuple[Row, bool]]:
            for row in rows:
                disabled = off or row.disabled
                yield row, disabled
                if row.children is not None:
                    yield from visit(row.children, disabled)

        return visit(self.rows, False)

    def flat_rows(self, env: Mapping[str, str], home: Path) -> tuple[dict[str, Any], ...]:
        """The kernel's input: leaf rows with full ids, tags resolved."""
        flat = []
        for row, disabled in self.walk():
            if row.children is not None:
                continue
            flat.append({
                "id": row.id,
                "name": row.name,
                "config": tags.resolve(row.values.get("config") or {}, env, home),
                "disabled": disabled,
                "inject": list(row.values.get("inject", [])),
            })
        return tuple(flat)

    def routing_names(self) -> frozenset[str]:
        """Variables the enabled rows' configs read to decide where to connect
        (:func:`dsh.config.tags.routing_names`)."""
        return frozenset(name for row, disabled in self.walk()
                         if row.children is None and not disabled
                         for name in tags.routing_names(row.values.get("config") or {}))

    def to_json(self, profile: str, patch_reload: str) -> dict[str, Any]:
        """The ``--dump-config --json`` document (``docs/contracts.md``, "Patch files",
        dumps)."""
        return {
            "profile": profile,
            "patchReload": patch_reload,
            "layers": [{"kind": layer.kind, "source": layer.source} for layer in self.layers],
            "rows": [row.to_json() for row in self.rows],
            "warnings": list(self.warnings),
        }


class _Composer:
    def __init__(self) -> None:
        self.root: list[_Node] = []
        self.index: dict[str, _Node] = {}
        self.warnings: list[str] = []

    def new_node(self, spec: InsertedRow, parent: _Node | None, where: str) -> _Node:
        local_id = spec.values["id"]
        full_id = f"{parent.full_id}:{local_id}" if parent is not None else local_id
        values = _copy(spec.values)
        del values["id"]
        prov: dict[str, str | int] = dict(spec.lines)
        prov.pop("id", None)
        node = _Node(full_id, values, prov, where, None if spec.children is None else [])
        self.place(node, parent, where, spec)
        if spec.children is not None:
            for child in spec.children:
                self.new_node(child, node, where)
        return node

    def place(self, node: _Node, parent: _Node | None, where: str, spec: InsertedRow) -> None:
        siblings = self.root if parent is None else parent.children
        assert siblings is not None
        existing = self.index.get(node.full_id)
        if existing is not None and existing in siblings:
            line = spec.lines.get("id", 0)
            self.warnings.append(f"{where}:{line}: row {node.full_id!r} inserted again; "
                                 "the new row replaces it in place")
            self.drop_index(existing)
            siblings[siblings.index(existing)] = node
        else:
            siblings.append(node)
        self.index[node.full_id] = node

    def drop_index(self, node: _Node) -> None:
        self.index.pop(node.full_id, None)
        for child in node.children or ():
            self.drop_index(child)

    def apply(self, layer: PatchLayer) -> None:
        for op in layer.operations:
            self.apply_op(op, layer.source)

    def apply_op(self, op: Operation, where: str) -> None:
        if op.target is None:
            for spec in op.insert:
                self.new_node(spec, None, where)
            return
        node = self.index.get(op.target)
        if node is None:
            self.warnings.append(f"{where}:{op.line}: unknown row id {op.target!r}")
            return
        if op.guard is not None and node.values.get("name") != op.guard:
            self.warnings.append(
                f"{where}:{op.line}: row {op.target!r} is {node.values.get('name')!r}, "
                f"not {op.guard!r}; operation skipped"
            )
            return
        if op.replace is not None and not self.replace(node, op, where):
            return
        for key, value in op.assign.items():
            self.assign(node, key, value, op, where)
        for key, value in op.merge.items():
            if node.children is not None and key == "config":
                self.warnings.append(f"{where}:{op.merge_lines[key]}: cannot merge into the "
                                     f"children of group {op.target!r}; use insert")
                continue
            base = node.values.get(key)
            node.values[key] = _merge(base if isinstance(base, dict) else {}, value,
                                      node.prov, key, where, op.merge_lines)
        if op.insert:
            if node.children is None:
                self.warnings.append(f"{where}:{op.line}: row {op.target!r} is not a group; "
                                     "insert skipped")
            else:
                for spec in op.insert:
                    self.new_node(spec, node, where)

    def replace(self, node: _Node, op: Operation, where: str) -> bool:
        """Give the row a new plugin, keeping its id and place (and ``inject`` and
        ``disabled`` unless given); the old plugin's config goes with it. False (with a
        warning, the operation skipped) for a group row, which runs no plugin."""
        assert op.replace is not None and op.replace_lines is not None
        lines = op.replace_lines
        if node.children is not None:
            self.warnings.append(f"{where}:{lines['replace']}: group {op.target!r} runs no "
                                 "plugin to replace; operation skipped")
            return False
        for stale in [k for k in node.prov if k.startswith("config.")]:
            del node.prov[stale]
        for key, value in op.replace.items():
            node.values[key] = _copy(value)
            node.prov[key] = f"{where}:{lines.get(key, lines['replace'])}"
        node.prov.update({k: f"{where}:{n}" for k, n in lines.items()
                          if k.startswith("config.")})
        return True

    def assign(self, node: _Node, key: str, value: Any, op: Operation, where: str) -> None:
        line = f"{where}:{op.assign_lines[key]}"
        if key == "config" and node.children is not None:
            if op.group_children is None:
                self.warnings.append(f"{line}: group {op.target!r} config must be a list of "
                                     "rows; assignment skipped")
                return
            for child in node.children:
                self.drop_index(child)
            node.children = []
            for spec in op.group_children:
                self.new_node(spec, node, where)
        elif key == "config":
            if op.group_children is not None or not isinstance(value, (dict, type(None))):
                self.warnings.append(f"{line}: row {op.target!r} config must be a mapping; "
                                     "assignment skipped")
                return
            node.values["config"] = _copy(value) or {}
            for stale in [k for k in node.prov if k.startswith("config.")]:
                del node.prov[stale]
            node.prov.update({k: f"{where}:{n}" for k, n in op.assign_lines.items()
                              if k.startswith("config.")})
        elif key == "group":
            self.warnings.append(f"{line}: cannot change whether row {op.target!r} is a group")
            return
        else:
            node.values[key] = _copy(value)
        node.prov[key] = line


def _merge(base: dict[str, Any], patch: Mapping[str, Any], prov: dict[str, str | int],
           path: str, where: str, lines: Mapping[str, int]) -> dict[str, Any]:
    """Deep-merge ``patch`` into a copy of ``base``, recording each key's file and line."""
    out = dict(base)
    prov[path] = f"{where}:{lines[path]}"
    for key, value in patch.items():
        sub = f"{path}.{key}"
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, prov, sub, where, lines)
        else:
            out[key] = _copy(value)
            for stale in [k for k in prov if k.startswith(f"{sub}.")]:
                del prov[stale]  # the subtree they described was replaced
            prov[sub] = f"{where}:{lines.get(sub, lines[path])}"
    return out


def _freeze(node: _Node) -> Row:
    children = None if node.children is None else tuple(_freeze(c) for c in node.children)
    return Row(node.full_id, node.values, Provenance(node.prov, node.where), children)


def compose(layers: Sequence[PatchLayer]) -> ComposedTree:
    """Apply ``layers`` in order over an empty root (last write wins)."""
    composer = _Composer()
    for layer in layers:
        composer.apply(layer)
    rows = tuple(_freeze(node) for node in composer.root)
    return ComposedTree(tuple(layers), rows, tuple(composer.warnings))
