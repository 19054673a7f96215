"""Reading one patch file into frozen operations that remember their lines.

A patch file is a YAML list of operations (``docs/contracts.md``, "Patch files"). It is
parsed once into :class:`PatchLayer`, a value the composer only reads: the same layer can
be applied any number of times (live reload caches the bundle layers) and is never
written back.

One reader, in two halves: :mod:`dsh.config.yamlreader` walks libyaml's events (its C
parser when present) into plain values that remember their lines, and this module turns
those values into operations, checking each against the patch format. Not PyYAML's
constructor: provenance needs the line of every key, and the tags must become
:mod:`dsh.config.tags` references instead of code. (A node-based reader was kept beside
it until issue 22: the event reader reads a cold launch's layers 2.6 times faster, so it
is the one; the other lives on only as the tests' oracle.)

Aliases are copied as they are read (a patch layer is plain data, no shared objects), so
a file whose aliases would add more than :data:`MAX_ALIAS_NODES` nodes (a "billion laughs"
file: a few lines asking for billions of values) is refused with one line naming the file,
having copied no more than that (:data:`dsh.config.yamlreader.MAX_ALIAS_NODES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from dsh.config.tags import EnvRef, HomeRef, PathRef
from dsh.config.yamlreader import Document, read
from dsh.core.errors import PatchError

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
    """Parse patch text (``path`` anchors ``!path`` tags and names the file in errors);
    every error names ``source`` and the line."""
    yaml = _yaml()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    reader = _Reader(source, path.parent if path is not None else Path.cwd())
    doc = read(text, loader, source, {"!env": reader.env, "!home": reader.home,
                                      "!path": reader.path})
    if doc.line == 0:  # no document: an empty file, or comments only
        return PatchLayer(kind, source, path, ())
    if type(doc.root) is not list:
        raise PatchError(f"{source}:{doc.line}: a patch file must be a YAML list")
    reader.doc = doc
    lines = doc.item_lines[id(doc.root)]
    return PatchLayer(kind, source, path, tuple([
        reader.operation(op, line) for op, line in zip(doc.root, lines, strict=True)]))


class _Reader:
    """Values read from one file into operations and rows, each checked as it is used."""

    def __init__(self, source: str, base: Path) -> None:
        self.source = source
        self.base = base
        self.doc = Document(None, 1, {}, {}, {})

    def fail(self, line: int, message: str) -> PatchError:
        return PatchError(f"{self.source}:{line}: {message}")

    # -- tags, called while the YAML is read -------------------------------------------

    def env(self, value: Any, line: int) -> EnvRef:
        """``!env NAME`` or ``!env [NAME, default]``."""
        if type(value) is str and value:
            return EnvRef(value)
        if type(value) is list and len(value) == 2 and type(value[0]) is str and value[0]:
            default = value[1]
            return EnvRef(value[0], None if default is None else str(default))
        raise self.fail(line, "!env takes NAME or [NAME, default]")

    def home(self, value: Any, line: int) -> HomeRef:
        """``!home sub/path``, inside the launch's home."""
        if type(value) is not str or not value:
            raise self.fail(line, "!home takes a relative path")
        return HomeRef(value)

    def path(self, value: Any, line: int) -> PathRef:
        """``!path rel/path``, anchored to the folder of this file now."""
        if type(value) is not str or not value:
            raise self.fail(line, "!path takes a relative path")
        try:
            return PathRef(str((self.base / value).resolve()), value)
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte
            raise self.fail(line, f"!path {value!r} cannot be resolved ({exc})") from None

    # -- the patch format ----------------------------------------------------------------

    def mapping(self, value: Any, line: int) -> dict[str, Any]:
        if type(value) is not dict:
            raise self.fail(line, "expected a mapping")
        return value

    def key_lines(self, mapping: Any, prefix: str) -> Lines:
        """``{"config.key": line}`` for each top-level key of a mapping."""
        if type(mapping) is not dict:
            return {}
        return {f"{prefix}.{key}": line for key, line in self.doc.key_lines[id(mapping)].items()}

    def nested_lines(self, mapping: Any, prefix: str, out: Lines) -> None:
        """Add ``{"prefix.a.b": line}`` for every key of nested mappings to ``out``."""
        if type(mapping) is not dict:
            return
        for key, line in self.doc.key_lines[id(mapping)].items():
            path = f"{prefix}.{key}"
            out[path] = line
            self.nested_lines(mapping[key], path, out)

    def rows(self, items: list[Any]) -> tuple[InsertedRow, ...]:
        lines = self.doc.item_lines[id(items)]
        return tuple([self.row(item, line) for item, line in zip(items, lines, strict=True)])

    def row(self, values: Any, line: int) -> InsertedRow:
        if type(values) is not dict:
            raise self.fail(line, "each inserted row must be a mapping")
        doc = self.doc
        if not ROW_KEYS.issuperset(values):
            key = next(key for key in values if key not in ROW_KEYS)
            raise self.fail(doc.value_line(values, key), f"unknown row key {key!r} "
                            f"(allowed: {', '.join(sorted(ROW_KEYS))})")
        lines = doc.key_lines[id(values)]  # the row's own: read for it alone
        config = values.pop("config", _ABSENT)
        if "disabled" in values or "group" in values or "inject" in values:
            _check_row_types(values, lambda message: self.fail(line, message))
        else:
            name = values.get("name")
            if name is not None and (type(name) is not str or not name):
                raise self.fail(line, _BAD_NAME)
        row_id = values.get("id")
        if type(row_id) is not str or not row_id or ":" in row_id:
            raise self.fail(line, "a row needs an 'id': a non-empty string without ':'")
        children: tuple[InsertedRow, ...] | None = None
        if values.get("group"):
            if config is _ABSENT:
                children = ()
            elif type(config) is list:
                children = self.rows(config)
            else:
                raise self.fail(self.config_line(values, lines), f"group row {row_id!r}: "
                                "config must be a list of child rows")
        else:
            if "name" not in values:
                raise self.fail(line, f"row {row_id!r} needs a 'name' (a plugin reference)")
            if config is not _ABSENT:
                if config is not None and type(config) is not dict:
                    raise self.fail(self.config_line(values, lines),
                                    f"row {row_id!r}: config must be a mapping")
                values["config"] = config or {}
                if config:
                    for key, key_line in doc.key_lines[id(config)].items():
                        lines["config." + key] = key_line
        return InsertedRow(values, lines, children)

    def config_line(self, values: dict[str, Any], lines: Lines) -> int:
        """The line a row's ``config`` value starts on (it was taken out of ``values``)."""
        others = self.doc.value_lines.get(id(values), {})
        return others.get("config", lines["config"])

    def operation(self, op: Any, line: int) -> Operation:
        if type(op) is not dict:
            raise self.fail(line, "each patch entry must be a mapping (an operation)")
        doc = self.doc
        target = guard = None
        assign: dict[str, Any] = {}
        assign_lines: Lines = {}
        merge: dict[str, Any] = {}
        merge_lines: Lines = {}
        insert: tuple[InsertedRow, ...] = ()
        group_children: tuple[InsertedRow, ...] | None = None
        replace: dict[str, Any] | None = None
        replace_lines: Lines | None = None
        for key, key_line in doc.key_lines[id(op)].items():
            value = op[key]
            if key == "id":
                target = value
                if type(target) is not str or not target:
                    raise self.fail(doc.value_line(op, key), "'id' must be a non-empty string")
            elif key == "insert":
                if type(value) is not list:
                    raise self.fail(doc.value_line(op, key), "'insert' must be a list of rows")
                insert = self.rows(value)
            elif key == "merge":
                for mkey, mline in doc.key_lines[id(
                        self.mapping(value, doc.value_line(op, key)))].items():
                    mvalue = value[mkey]
                    if mkey not in ASSIGN_KEYS or mkey == "name":
                        raise self.fail(doc.value_line(value, mkey), f"cannot merge key {mkey!r}")
                    if type(mvalue) is not dict:
                        raise self.fail(doc.value_line(value, mkey),
                                        f"merge.{mkey} must be a mapping")
                    merge[mkey] = mvalue
                    merge_lines[mkey] = mline
                    self.nested_lines(mvalue, mkey, merge_lines)
            elif key == "replace":
                replace, replace_lines = self.replacement(value, key_line,
                                                          doc.value_line(op, key))
            elif key == "name":
                guard = value
                if type(guard) is not str:
                    raise self.fail(doc.value_line(op, key),
                                    "'name' (the guard) must be a string")
            elif key in ASSIGN_KEYS:
                if key == "config" and type(value) is list:
                    group_children = self.rows(value)
                    assign[key] = None
                else:
                    assign[key] = value
                    if key == "config":
                        assign_lines.update(self.key_lines(value, "config"))
                assign_lines[key] = key_line
            else:
                raise self.fail(doc.value_line(op, key), f"unknown operation key {key!r}")
        _check_row_types(assign, lambda message: self.fail(line, message))
        if target is None and (assign or merge or guard is not None or replace is not None):
            raise self.fail(line, "an operation that sets keys needs an 'id'")
        if target is None and not insert:
            raise self.fail(line, "an operation needs 'insert' or an 'id'")
        return Operation(line, target, guard, assign, assign_lines, merge, merge_lines,
                         insert, group_children, replace, replace_lines)

    def replacement(self, value: Any, key_line: int, line: int
                    ) -> tuple[dict[str, Any], Lines]:
        """``replace: {name, config?, inject?, disabled?}``: the row's new plugin."""
        doc = self.doc
        values: dict[str, Any] = {}
        lines: Lines = {"replace": key_line}
        for key, sub_line in doc.key_lines[id(self.mapping(value, line))].items():
            if key not in REPLACE_KEYS:
                raise self.fail(doc.value_line(value, key), f"cannot replace key {key!r} "
                                f"(allowed: {', '.join(sorted(REPLACE_KEYS))})")
            values[key] = value[key]
            lines[key] = sub_line
            if key == "config":
                if values[key] is not None and type(values[key]) is not dict:
                    raise self.fail(doc.value_line(value, key),
                                    "replace.config must be a mapping")
                lines.update(self.key_lines(values[key], "config"))
        _check_row_types(values, lambda message: self.fail(line, message))
        if "name" not in values:
            raise self.fail(line, "'replace' needs 'name': the plugin the row runs from now on")
        values["config"] = values.get("config") or {}
        return values, lines


_ABSENT = object()
_BAD_NAME = "'name' must be a non-empty string (a plugin reference)"


def _check_row_types(values: dict[str, Any], fail: Any) -> None:
    """Type checks shared by inserted rows and assignments."""
    for key in ("disabled", "group"):
        if key in values and not isinstance(values[key], bool):
            raise fail(f"'{key}' must be true or false")
    if "name" in values and (not isinstance(values["name"], str) or not values["name"]):
        raise fail(_BAD_NAME)
    inject = values.get("inject")
    if inject is not None and (
        not isinstance(inject, list) or not all(isinstance(s, str) and s for s in inject)
    ):
        raise fail("'inject' must be a list of service names")
