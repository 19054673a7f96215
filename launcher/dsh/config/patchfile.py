"""Reading one patch file into frozen operations that remember their lines.

A patch file is a YAML list of operations (DESIGN.md section 5). It is parsed once into
:class:`PatchLayer`, a value the composer only reads: the same layer can be applied any
number of times (live reload caches the bundle layers) and is never written back.

YAML is composed into nodes (libyaml's C parser when present) and converted here rather
than by PyYAML's constructor, because provenance needs the line of every key and the tags
must become :mod:`dsh.config.tags` references instead of code.

Aliases are expanded by that conversion (a patch layer is plain data, no shared objects),
so a file whose aliases would add more than :data:`MAX_ALIAS_NODES` nodes (a "billion
laughs" file: a few lines asking for billions of values) is refused before any expansion,
with one line naming the file. The quick reader never expands aliases: it hands every file
with an anchor to the composed reading, where that budget is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from dsh.config.tags import KNOWN_TAGS, EnvRef, HomeRef, PathRef
from dsh.config.yamlreader import Unsupported, read
from dsh.core.errors import PatchError

MAX_ALIAS_NODES = 100_000
"""Nodes the aliases of one patch file may add to it as written: room for any real reuse
(a 100-node config repeated on a thousand rows), and converted in well under a second."""

ROW_KEYS = frozenset({"id", "name", "config", "disabled", "group", "inject"})
ASSIGN_KEYS = frozenset({"name", "config", "disabled", "group", "inject"})
REPLACE_KEYS = frozenset({"name", "config", "disabled", "inject"})
"""What ``replace`` may set: a new plugin (``name``, required), its ``config`` (else
``{}``: the old plugin's config is never carried over), and ``inject``/``disabled``
(else kept)."""

Lines = dict[str, int]


class InsertedRow(NamedTuple):
    """A row to insert: its values, the line of each key, and child rows for groups."""

    values: dict[str, Any]
    lines: Lines
    children: tuple[InsertedRow, ...] | None


class Operation(NamedTuple):
    """One patch operation.

    ``target`` is the row id (None for a root insert); ``guard`` the optional ``name``
    that must match; ``replace`` a new plugin for the row (applied first, keeping its id
    and place); ``assign`` keys set wholesale; ``merge`` keys deep-merged; ``insert`` rows
    appended (into ``target`` when it is set).
    """

    line: int
    target: str | None
    guard: str | None
    assign: dict[str, Any]
    assign_lines: Lines
    merge: dict[str, Any]
    merge_lines: Lines
    insert: tuple[InsertedRow, ...]
    group_children: tuple[InsertedRow, ...] | None = None
    replace: dict[str, Any] | None = None
    replace_lines: Lines | None = None


class PatchLayer(NamedTuple):
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
    return parse_layer(read_layer_text(path), path=path, kind=kind, source=source or str(path))


def read_layer_text(path: Path) -> str:
    """The text of patch file ``path`` (UTF-8); a missing or unreadable file exits 2."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PatchError(f"{path}: patch file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchError(f"{path}: cannot read patch file ({exc})") from exc


def parse_layer(text: str, *, path: Path | None, kind: str, source: str) -> PatchLayer:
    """Parse patch text (``path`` anchors ``!path`` tags and names the file in errors).

    :class:`_QuickReader` reads valid files in one pass over the parser's events; any
    file it declines (every invalid one among them) is read by :func:`_read_nodes`, the
    reference that owns the error messages. Both give the same layer for every file the
    quick reader accepts (pinned by property tests).
    """
    yaml = _yaml()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    base = path.parent if path is not None else None
    try:
        operations = _QuickReader(base).operations(text, loader)
    except Unsupported:
        operations = _read_nodes(text, loader, source, base)
    return PatchLayer(kind, source, path, operations)


def _read_nodes(text: str, loader: type, source: str, base: Path | None
                ) -> tuple[Operation, ...]:
    """The reference reading: PyYAML's node graph converted by :class:`_Reader`."""
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


class _QuickReader:
    """Operations straight from :func:`dsh.config.yamlreader.read`'s values, for valid files.

    Mirrors :class:`_Reader` check for check, but raises :class:`Unsupported` wherever
    the reference would raise an error (or might, as for a tag where it expects a list).
    """

    def __init__(self, base: Path | None) -> None:
        self.base = base
        self.lines: dict[int, Lines] = {}  # id() of each mapping read -> its key lines

    def operations(self, text: str, loader: type) -> tuple[Operation, ...]:
        doc = read(text, loader, {"!env": _env, "!home": _home, "!path": self.path},
                   {"!env": _env_with_default})
        if type(doc.root) is not list:  # empty files too: "---" alone is an error
            raise Unsupported("not a list")
        self.lines = doc.key_lines
        pairs = zip(doc.root, doc.item_lines, strict=True)
        return tuple([self.operation(op, line) for op, line in pairs])

    def path(self, value: str) -> PathRef:
        if not value:
            raise Unsupported("!path")
        try:
            return PathRef(str(((self.base or Path.cwd()) / value).resolve()), value)
        except Exception as exc:  # the reference meets the same failure in its own order
            raise Unsupported("!path") from exc

    def row(self, values: Any) -> InsertedRow:
        if type(values) is not dict or not ROW_KEYS.issuperset(values):
            raise Unsupported("row")
        lines = self.lines[id(values)]
        config = values.pop("config", _ABSENT)
        if "disabled" in values or "group" in values or "inject" in values:
            _check_row_types(values, Unsupported)
        row_id = values.get("id")
        if type(row_id) is not str or not row_id or ":" in row_id:
            raise Unsupported("row id")
        children: tuple[InsertedRow, ...] | None = None
        if values.get("group"):
            if config is _ABSENT:
                children = ()
            elif type(config) is list:
                children = tuple([self.row(child) for child in config])
            else:
                raise Unsupported("group config")
        else:
            name = values.get("name")
            if type(name) is not str or not name:
                raise Unsupported("row name")
            if config is not _ABSENT:
                if config is not None and type(config) is not dict:
                    raise Unsupported("row config")
                values["config"] = config or {}
                if config:
                    for key, line in self.lines[id(config)].items():
                        lines["config." + key] = line
        return InsertedRow(values, lines, children)

    def operation(self, op: Any, line: int) -> Operation:
        if type(op) is not dict:
            raise Unsupported("operation")
        key_lines = self.lines[id(op)]
        target = op.get("id")
        guard = op.get("name")
        if "id" in op and (type(target) is not str or not target):
            raise Unsupported("id")
        if "name" in op and type(guard) is not str:
            raise Unsupported("guard")
        assign: dict[str, Any] = {}
        assign_lines: Lines = {}
        merge: dict[str, Any] = {}
        merge_lines: Lines = {}
        insert: tuple[InsertedRow, ...] = ()
        group_children: tuple[InsertedRow, ...] | None = None
        replace: dict[str, Any] | None = None
        replace_lines: Lines | None = None
        for key, value in op.items():
            if key == "id" or key == "name":
                continue
            if key == "replace":
                replace, replace_lines = self.replacement(value, key_lines[key])
            elif key == "insert":
                if type(value) is not list:
                    raise Unsupported("insert")
                insert = tuple([self.row(r) for r in value])
            elif key == "merge":
                if type(value) is not dict:
                    raise Unsupported("merge")
                lines = self.lines[id(value)]
                for mkey, mvalue in value.items():
                    if mkey not in ASSIGN_KEYS or mkey == "name" or type(mvalue) is not dict:
                        raise Unsupported("merge key")
                    merge[mkey] = mvalue
                    merge_lines[mkey] = lines[mkey]
                    self.nested_lines(mvalue, mkey, merge_lines)
            elif key in ASSIGN_KEYS:
                if key == "config" and type(value) is list:
                    group_children = tuple([self.row(r) for r in value])
                    assign[key] = None
                elif key == "config" and isinstance(value, EnvRef):
                    raise Unsupported("!env [...] where rows may be")  # a list to _Reader
                else:
                    assign[key] = value
                    if key == "config" and type(value) is dict:
                        for ckey, cline in self.lines[id(value)].items():
                            assign_lines["config." + ckey] = cline
                assign_lines[key] = key_lines[key]
            else:
                raise Unsupported("operation key")
        _check_row_types(assign, Unsupported)
        if target is None and (assign or merge or guard is not None or not insert
                               or replace is not None):
            raise Unsupported("operation without id")
        return Operation(line, target, guard, assign, assign_lines, merge, merge_lines,
                         insert, group_children, replace, replace_lines)

    def replacement(self, value: Any, line: int) -> tuple[dict[str, Any], Lines]:
        if type(value) is not dict or not REPLACE_KEYS.issuperset(value):
            raise Unsupported("replace")
        name = value.get("name")
        if type(name) is not str or not name:
            raise Unsupported("replace name")
        config = value.get("config")
        if config is not None and type(config) is not dict:
            raise Unsupported("replace config")
        _check_row_types(value, Unsupported)
        lines: Lines = {"replace": line}
        for key, key_line in self.lines[id(value)].items():  # in the reference's order
            lines[key] = key_line
            if key == "config" and config:
                for sub, sub_line in self.lines[id(config)].items():
                    lines["config." + sub] = sub_line
        return {**value, "config": config or {}}, lines

    def nested_lines(self, mapping: dict[str, Any], prefix: str, out: Lines) -> None:
        """Add ``{"prefix.a.b": line}`` for every key of nested mappings to ``out``."""
        for key, line in self.lines[id(mapping)].items():
            path = f"{prefix}.{key}"
            out[path] = line
            value = mapping[key]
            if type(value) is dict:
                self.nested_lines(value, path, out)


_ABSENT = object()


def _env(value: str) -> EnvRef:
    if not value:
        raise Unsupported("!env")
    return EnvRef(value)


def _home(value: str) -> HomeRef:
    if not value:
        raise Unsupported("!home")
    return HomeRef(value)


def _env_with_default(items: list[Any]) -> EnvRef:
    if len(items) == 2 and type(items[0]) is str and items[0]:
        default = items[1]
        return EnvRef(items[0], None if default is None else str(default))
    raise Unsupported("!env")


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
