"""Reading one patch file into frozen operations that remember their lines.

A patch file is a YAML list of operations (DESIGN.md section 5). It is parsed once into
:class:`PatchLayer`, a value the composer only reads: the same layer can be applied any
number of times (live reload caches the bundle layers) and is never written back.

YAML is composed into nodes (libyaml's C parser when present) and converted here rather
than by PyYAML's constructor, because provenance needs the line of every key and the tags
must become :mod:`dsh.tags` references instead of code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.errors import PatchError
from dsh.tags import KNOWN_TAGS, EnvRef, HomeRef, PathRef

ROW_KEYS = frozenset({"id", "name", "config", "disabled", "group", "inject"})
ASSIGN_KEYS = frozenset({"name", "config", "disabled", "group", "inject"})

Lines = dict[str, int]


@dataclass(frozen=True)
class RowSpec:
    """A row to insert: its values, the line of each key, and child rows for groups."""

    values: dict[str, Any]
    lines: Lines
    children: tuple[RowSpec, ...] | None


@dataclass(frozen=True)
class Operation:
    """One patch operation.

    ``target`` is the row id (None for a root insert); ``guard`` the optional ``name``
    that must match; ``assign`` keys set wholesale; ``merge`` keys deep-merged;
    ``insert`` rows appended (into ``target`` when it is set).
    """

    line: int
    target: str | None
    guard: str | None
    assign: dict[str, Any]
    assign_lines: Lines
    merge: dict[str, Any]
    merge_lines: Lines
    insert: tuple[RowSpec, ...]
    group_children: tuple[RowSpec, ...] | None = None


@dataclass(frozen=True)
class PatchLayer:
    """A parsed patch file: ``kind`` (bundle/profile/home/patch), ``source`` label, ops."""

    kind: str
    source: str
    path: Path | None
    operations: tuple[Operation, ...]


def _yaml():
    import yaml

    return yaml


def load_layer(path: Path, *, kind: str, source: str | None = None) -> PatchLayer:
    """Parse patch file ``path``; every error names the file (and line) and exits 2."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PatchError(f"{path}: patch file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchError(f"{path}: cannot read patch file ({exc})") from exc
    return parse_layer(text, path=path, kind=kind, source=source or str(path))


def parse_layer(text: str, *, path: Path | None, kind: str, source: str) -> PatchLayer:
    """Parse patch text (``path`` anchors ``!path`` tags and names the file in errors)."""
    yaml = _yaml()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise PatchError(f"{where}: not valid YAML ({problem})") from exc
    reader = _Reader(source, path.parent if path is not None else Path.cwd())
    if root is None:
        return PatchLayer(kind, source, path, ())
    if not isinstance(root, yaml.SequenceNode):
        raise PatchError(f"{source}:{root.start_mark.line + 1}: a patch file must be a YAML list")
    try:
        ops = tuple(reader.operation(node) for node in root.value)
    except RecursionError as exc:  # an alias inside its own anchor (&a [*a]), or absurd depth
        raise PatchError(f"{source}: a recursive YAML alias or too deep nesting") from exc
    return PatchLayer(kind, source, path, ops)


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
        return PathRef(str((self.base / node.value).resolve()))

    def row(self, node: Any) -> RowSpec:
        if not isinstance(node, self.yaml.MappingNode):
            raise self.fail(node, "each inserted row must be a mapping")
        values: dict[str, Any] = {}
        lines: Lines = {}
        children: tuple[RowSpec, ...] | None = None
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
        return RowSpec(values, lines, children)

    def operation(self, node: Any) -> Operation:
        if not isinstance(node, self.yaml.MappingNode):
            raise self.fail(node, "each patch entry must be a mapping (an operation)")
        line = node.start_mark.line + 1
        target = guard = None
        assign: dict[str, Any] = {}
        assign_lines: Lines = {}
        merge: dict[str, Any] = {}
        merge_lines: Lines = {}
        insert: tuple[RowSpec, ...] = ()
        group_children: tuple[RowSpec, ...] | None = None
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
        if target is None and (assign or merge or guard is not None):
            raise self.fail(node, "an operation that sets keys needs an 'id'")
        if target is None and not insert:
            raise self.fail(node, "an operation needs 'insert' or an 'id'")
        return Operation(line, target, guard, assign, assign_lines, merge, merge_lines,
                         insert, group_children)


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
