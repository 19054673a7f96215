"""The node-based patch reader dsh used to ship beside the event reader, kept as a test
oracle: PyYAML's composed node graph converted into operations, written independently of
:mod:`dsh.config.patchfile`. The property tests compare the two on generated patch files:
the same layer for every file this reading accepts, and an error for every file it refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dsh.config.patchfile import (
    ASSIGN_KEYS,
    REPLACE_KEYS,
    ROW_KEYS,
    InsertedRow,
    Lines,
    Operation,
)
from dsh.config.tags import KNOWN_TAGS, EnvRef, HomeRef, PathRef
from dsh.config.yamlreader import MAX_ALIAS_NODES
from dsh.core.errors import PatchError


def _yaml() -> Any:
    return yaml


def _read_nodes(text: str, loader: type, source: str, base: Path | None
                ) -> tuple[Operation, ...]:
    """PyYAML's node graph converted by :class:`_Reader`."""
    yaml = _yaml()
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise PatchError(f"{where}: not valid YAML ({problem})") from exc
    reader = _Reader(source, base if base is not None else Path.cwd())
    if root is None:
        return ()
    _check_aliases(root, source)
    if not isinstance(root, yaml.SequenceNode):
        raise PatchError(f"{source}:{root.start_mark.line + 1}: a patch file must be a YAML list")
    try:
        return tuple(reader.operation(node) for node in root.value)
    except RecursionError as exc:  # absurd depth (recursive aliases are refused above)
        raise PatchError(f"{source}: the YAML nests too deeply") from exc


def _check_aliases(root: Any, source: str) -> None:
    """Refuse a file whose aliases expand beyond :data:`MAX_ALIAS_NODES` extra nodes, or
    refer to themselves, before anything is expanded.

    Composed YAML is a graph: an alias is the anchored node itself, shared. The expanded
    size of each node is counted once (post-order, iteratively, so depth costs no
    recursion), which takes time in the number of distinct nodes, however large the
    expansion they describe.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise PatchError(f"{source}: a recursive YAML alias (an alias inside the node "
                             "it names)")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    extra = sizes[id(root)] - len(sizes)
    if extra > MAX_ALIAS_NODES:
        raise PatchError(f"{source}: YAML aliases would expand this file by {extra} nodes, "
                         f"over the limit of {MAX_ALIAS_NODES} (write the values out, or "
                         "use fewer aliases)")


def _children(node: Any) -> list[Any]:
    """The nodes directly under a composed node (a mapping's keys and values)."""
    value = node.value
    if not isinstance(value, list):
        return []
    if value and isinstance(value[0], tuple):
        return [part for pair in value for part in pair]
    return value


class _Reader:
    """Converts composed YAML nodes into values and operations for one file."""

    def __init__(self, source: str, base: Path) -> None:
        yaml = _yaml()
        self.yaml = yaml
        self.source = source
        self.base = base
        ctor = yaml.constructor.SafeConstructor()
        self.scalar = {
            "tag:yaml.org,2002:str": ctor.construct_yaml_str,
            "tag:yaml.org,2002:int": ctor.construct_yaml_int,
            "tag:yaml.org,2002:float": ctor.construct_yaml_float,
            "tag:yaml.org,2002:bool": ctor.construct_yaml_bool,
            "tag:yaml.org,2002:null": ctor.construct_yaml_null,
            "tag:yaml.org,2002:timestamp": lambda n: n.value,
        }

    def fail(self, node: Any, message: str) -> PatchError:
        return PatchError(f"{self.source}:{node.start_mark.line + 1}: {message}")

    def value(self, node: Any) -> Any:
        yaml = self.yaml
        tag = node.tag
        if tag.startswith("!"):
            return self.tag(node)
        if isinstance(node, yaml.ScalarNode):
            convert = self.scalar.get(tag)
            if convert is None:
                raise self.fail(node, f"unsupported YAML tag {tag}")
            return convert(node)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item) for item in node.value]
        return {key: self.value(v) for key, v, _ in self.pairs(node)}

    def pairs(self, node: Any) -> list[tuple[str, Any, int]]:
        """A mapping's (key, value node, line) triples; keys must be unique strings."""
        if not isinstance(node, self.yaml.MappingNode):
            raise self.fail(node, "expected a mapping")
        seen: set[str] = set()
        out = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, self.yaml.ScalarNode) or key_node.tag.startswith("!"):
                raise self.fail(key_node, "mapping keys must be plain strings")
            key = str(key_node.value)
            if key in seen:
                raise self.fail(key_node, f"duplicate key {key!r}")
            seen.add(key)
            out.append((key, value_node, key_node.start_mark.line + 1))
        return out

    def key_lines(self, node: Any, prefix: str) -> Lines:
        """``{"config.key": line}`` for each top-level key of a mapping node."""
        if not isinstance(node, self.yaml.MappingNode):
            return {}
        return {f"{prefix}.{k.value}": k.start_mark.line + 1 for k, _ in node.value}

    def nested_lines(self, node: Any, prefix: str) -> Lines:
        """``{"config.a.b": line}`` for every key of nested mappings (merge provenance)."""
        out: Lines = {}
        if isinstance(node, self.yaml.MappingNode):
            for key_node, value_node in node.value:
                path = f"{prefix}.{key_node.value}"
                out[path] = key_node.start_mark.line + 1
                out.update(self.nested_lines(value_node, path))
        return out

    def tag(self, node: Any) -> Any:
        yaml = self.yaml
        tag = node.tag
        if tag not in KNOWN_TAGS:
            raise self.fail(node, f"unknown tag {tag} (known: {', '.join(KNOWN_TAGS)})")
        if tag == "!env":
            if isinstance(node, yaml.ScalarNode) and node.value:
                return EnvRef(node.value)
            if isinstance(node, yaml.SequenceNode) and len(node.value) == 2:
                name, default = (self.value(n) for n in node.value)
                if isinstance(name, str) and name:
                    return EnvRef(name, None if default is None else str(default))
            raise self.fail(node, "!env takes NAME or [NAME, default]")
        if not isinstance(node, yaml.ScalarNode) or not node.value:
            raise self.fail(node, f"{tag} takes a relative path")
        if tag == "!home":
            return HomeRef(node.value)
        return PathRef(str((self.base / node.value).resolve()), node.value)

    def row(self, node: Any) -> InsertedRow:
        if not isinstance(node, self.yaml.MappingNode):
            raise self.fail(node, "each inserted row must be a mapping")
        values: dict[str, Any] = {}
        lines: Lines = {}
        children: tuple[InsertedRow, ...] | None = None
        config_node = None
        for key, value_node, line in self.pairs(node):
            if key not in ROW_KEYS:
                raise self.fail(value_node, f"unknown row key {key!r} (allowed: "
                                f"{', '.join(sorted(ROW_KEYS))})")
            lines[key] = line
            if key == "config":
                config_node = value_node
                continue
            values[key] = self.value(value_node)
        _check_row_types(values, lambda msg: self.fail(node, msg))
        row_id = values.get("id")
        if not isinstance(row_id, str) or not row_id or ":" in row_id:
            raise self.fail(node, "a row needs an 'id': a non-empty string without ':'")
        if values.get("group"):
            if config_node is not None:
                if not isinstance(config_node, self.yaml.SequenceNode):
                    raise self.fail(config_node, f"group row {row_id!r}: config must be a "
                                    "list of child rows")
                children = tuple(self.row(child) for child in config_node.value)
            else:
                children = ()
        else:
            if "name" not in values:
                raise self.fail(node, f"row {row_id!r} needs a 'name' (a plugin reference)")
            if config_node is not None:
                config = self.value(config_node)
                if config is not None and not isinstance(config, dict):
                    raise self.fail(config_node, f"row {row_id!r}: config must be a mapping")
                values["config"] = config or {}
                lines.update(self.key_lines(config_node, "config"))
        return InsertedRow(values, lines, children)

    def operation(self, node: Any) -> Operation:
        if not isinstance(node, self.yaml.MappingNode):
            raise self.fail(node, "each patch entry must be a mapping (an operation)")
        line = node.start_mark.line + 1
        target = guard = None
        assign: dict[str, Any] = {}
        assign_lines: Lines = {}
        merge: dict[str, Any] = {}
        merge_lines: Lines = {}
        insert: tuple[InsertedRow, ...] = ()
        group_children: tuple[InsertedRow, ...] | None = None
        replace: dict[str, Any] | None = None
        replace_lines: Lines | None = None
        for key, value_node, key_line in self.pairs(node):
            if key == "id":
                target = self.value(value_node)
                if not isinstance(target, str) or not target:
                    raise self.fail(value_node, "'id' must be a non-empty string")
            elif key == "insert":
                if not isinstance(value_node, self.yaml.SequenceNode):
                    raise self.fail(value_node, "'insert' must be a list of rows")
                insert = tuple(self.row(r) for r in value_node.value)
            elif key == "merge":
                for mkey, mnode, mline in self.pairs(value_node):
                    if mkey not in ASSIGN_KEYS - {"name"}:
                        raise self.fail(mnode, f"cannot merge key {mkey!r}")
                    merge[mkey] = self.value(mnode)
                    if not isinstance(merge[mkey], dict):
                        raise self.fail(mnode, f"merge.{mkey} must be a mapping")
                    merge_lines[mkey] = mline
                    merge_lines.update(self.nested_lines(mnode, mkey))
            elif key == "replace":
                replace, replace_lines = self.replacement(value_node, key_line)
            elif key == "name":
                guard = self.value(value_node)
                if not isinstance(guard, str):
                    raise self.fail(value_node, "'name' (the guard) must be a string")
            elif key in ASSIGN_KEYS:
                if key == "config" and isinstance(value_node, self.yaml.SequenceNode):
                    group_children = tuple(self.row(r) for r in value_node.value)
                    assign[key] = None
                else:
                    assign[key] = self.value(value_node)
                    if key == "config":
                        assign_lines.update(self.key_lines(value_node, "config"))
                assign_lines[key] = key_line
            else:
                raise self.fail(value_node, f"unknown operation key {key!r}")
        _check_row_types(assign, lambda msg: self.fail(node, msg))
        if target is None and (assign or merge or guard is not None or replace is not None):
            raise self.fail(node, "an operation that sets keys needs an 'id'")
        if target is None and not insert:
            raise self.fail(node, "an operation needs 'insert' or an 'id'")
        return Operation(line, target, guard, assign, assign_lines, merge, merge_lines,
                         insert, group_children, replace, replace_lines)

    def replacement(self, node: Any, line: int) -> tuple[dict[str, Any], Lines]:
        """``replace: {name, config?, inject?, disabled?}``: the row's new plugin."""
        values: dict[str, Any] = {}
        lines: Lines = {"replace": line}
        for key, value_node, key_line in self.pairs(node):
            if key not in REPLACE_KEYS:
                raise self.fail(value_node, f"cannot replace key {key!r} (allowed: "
                                f"{', '.join(sorted(REPLACE_KEYS))})")
            values[key] = self.value(value_node)
            lines[key] = key_line
            if key == "config":
                if values[key] is not None and not isinstance(values[key], dict):
                    raise self.fail(value_node, "replace.config must be a mapping")
                lines.update(self.key_lines(value_node, "config"))
        _check_row_types(values, lambda msg: self.fail(node, msg))
        if "name" not in values:
            raise self.fail(node, "'replace' needs 'name': the plugin the row runs from now on")
        values["config"] = values.get("config") or {}
        return values, lines


def _check_row_types(values: dict[str, Any], fail: Any) -> None:
    """Type checks shared by inserted rows and assignments."""
    for key in ("disabled", "group"):
        if key in values and not isinstance(values[key], bool):
            raise fail(f"'{key}' must be true or false")
    if "name" in values and (not isinstance(values["name"], str) or not values["name"]):
        raise fail("'name' must be a non-empty string (a plugin reference)")
    inject = values.get("inject")
    if inject is not None and (
        not isinstance(inject, list) or not all(isinstance(s, str) and s for s in inject)
    ):
        raise fail("'inject' must be a list of service names")
