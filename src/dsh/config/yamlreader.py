"""One YAML document into plain values that remember their lines, in one pass.

PyYAML's loader builds a node per value (and resolves every plain scalar in Python) before
anything can be converted; for the launcher's patch files that costs more than parsing.
This reader walks libyaml's events once (the C parser when present) and builds dicts,
lists and scalars directly, remembering the line of every mapping key, of every value
that starts on another line than its key, and of every list item: all that provenance
and error messages need. It is the patch reader's YAML half (:mod:`dsh.config.patchfile`
is the other); it reads every document and refuses what a patch file may not hold with a
:class:`~dsh.core.errors.PatchError` naming the file and line.

Plain scalars resolve exactly as PyYAML's safe loader resolves them: the same implicit
resolver table (YAML 1.1: null, bool, int, float, timestamp, ...) picks the tag and the
same ``SafeConstructor`` methods build the value, memoised per document because patch
files repeat a few values (``true``, small numbers) many times. Timestamps stay the text
they were written as. Explicit standard tags (``!!str 5``) construct the same way; a tag
the patch format does not know is refused, as are mapping keys that are not plain
strings, duplicate keys, and several documents in one file.

Anchors and aliases: a patch layer is plain data, so an alias is read as a copy of what
its anchor names. Every alias adds the nodes it names (a mapping counts its keys and
values) to the file's count; beyond :data:`MAX_ALIAS_NODES` the file is refused, with
the whole count, and nothing past that point is copied, so a "billion laughs" file costs
a few lines of reading. An alias inside the node its anchor names is refused too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from dsh.core.errors import PatchError

MAX_ALIAS_NODES = 100_000
"""Nodes the aliases of one patch file may add to it as written: room for any real reuse
(a 100-node config repeated on a thousand rows), and read in well under a second."""

_STR = "tag:yaml.org,2002:str"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_CONSTRUCTED = {
    "tag:yaml.org,2002:int": "construct_yaml_int",
    "tag:yaml.org,2002:float": "construct_yaml_float",
    "tag:yaml.org,2002:bool": "construct_yaml_bool",
    "tag:yaml.org,2002:null": "construct_yaml_null",
}
_OPEN = object()  # an anchor whose node is still being read

Tags = Mapping[str, Callable[[Any, int], Any]]
"""The local tags (``!name``) a caller knows: each gets what its node read as (a scalar's
text, a sequence's or mapping's values) and the node's line, and returns the value or
raises :class:`PatchError` for a form it refuses."""


class Document(NamedTuple):
    """A read document: its root value and the lines it was written on (1-based).

    ``line`` is the document's first line, 0 for a file without a document (empty, or
    comments only; ``root`` is None then). The line tables are keyed by ``id()`` of the
    containers in ``root`` (valid while ``root`` is alive): ``key_lines`` each mapping's
    keys; ``value_lines`` the values of a mapping that start on another line than their
    key; ``item_lines`` each list's items.
    """

    root: Any
    line: int
    key_lines: dict[int, dict[str, int]]
    value_lines: dict[int, dict[str, int]]
    item_lines: dict[int, list[int]]

    def value_line(self, mapping: dict[str, Any], key: str) -> int:
        """The line ``mapping[key]`` starts on."""
        found = self.value_lines.get(id(mapping))
        if found is not None and key in found:
            return found[key]
        return self.key_lines[id(mapping)][key]


class _Plain:
    """Plain-scalar resolution, equal to the loader's resolver and safe constructor."""

    def __init__(self, loader: Any) -> None:  # a PyYAML loader class (C or Python)
        import yaml

        self.table: dict[Any, list[tuple[str, Any]]] = loader.yaml_implicit_resolvers
        self.wildcard = self.table.get(None, [])
        # Text whose first character no resolver looks at is a string: no lookup needed.
        self.first = None if self.wildcard else frozenset(self.table)
        self.memo: dict[str, Any] = {}
        self.constructor = yaml.constructor.SafeConstructor()
        self.node = yaml.ScalarNode

    def tag(self, text: str) -> str:
        """The tag the loader's resolver gives plain scalar ``text``."""
        for candidate, regexp in [*self.table.get(text[:1], ()), *self.wildcard]:
            if regexp.match(text):
                return candidate
        return _STR

    def __call__(self, text: str, fail: Callable[[str], PatchError]) -> Any:
        """The value of plain scalar ``text``."""
        if text in self.memo:
            return self.memo[text]
        value = self.construct(self.tag(text), text, fail)
        if not isinstance(value, float):  # NaN must not become one shared object
            self.memo[text] = value
        return value

    def construct(self, tag: str, text: str, fail: Callable[[str], PatchError]) -> Any:
        """A scalar of standard ``tag`` as the safe constructor builds it (a timestamp
        stays its text); any other tag is refused."""
        if tag in (_STR, _TIMESTAMP):
            return text
        method = _CONSTRUCTED.get(tag)
        if method is None:
            raise fail(f"unsupported YAML tag {tag}")
        try:
            return getattr(self.constructor, method)(self.node(tag, text))
        except ValueError as exc:  # "0b_": what the safe loader itself fails on
            raise fail(f"not valid YAML ({exc})") from None


def read(text: str, loader: type, source: str, tags: Tags) -> Document:
    """Read single-document YAML ``text`` with ``loader``'s parser, converting the local
    ``tags`` it knows; every error names ``source`` and (where there is one) the line."""
    import yaml

    parser = loader(text)
    reader = _Events(parser.get_event, _Plain(loader), source, tags, anchors="&" in text)
    try:
        return reader.document()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise PatchError(f"{where}: not valid YAML ({exc.problem or exc})") from None
    except yaml.YAMLError as exc:
        raise PatchError(f"{source}: not valid YAML ({exc})") from None
    except RecursionError:
        raise PatchError(f"{source}: the YAML nests too deeply") from None
    finally:
        parser.dispose()


class _Events:
    """One document's events into values: a function per collection kind, so the hot
    loops know whether the next scalar is a key, a value or an item without asking."""

    def __init__(self, get: Callable[[], Any], plain: _Plain, source: str, tags: Tags, *,
                 anchors: bool) -> None:
        from yaml import events

        self.events = events
        self.get = get
        self.plain = plain
        self.source = source
        self.tags = tags
        self.anchors = anchors  # without "&" in the text no event can carry an anchor
        self.key_lines: dict[int, dict[str, int]] = {}
        self.value_lines: dict[int, dict[str, int]] = {}
        self.item_lines: dict[int, list[int]] = {}
        # With anchors only: each anchor's value (or _OPEN), its size in nodes and, for a
        # scalar, its text (an aliased key reads as that text); the nodes aliases added.
        self.anchored: dict[str, tuple[Any, int, str | None]] = {}
        self.extra = 0
        self.size = 0  # nodes of the value read last (counted with anchors only)

    def fail(self, event: Any, message: str) -> PatchError:
        return PatchError(f"{self.source}:{event.start_mark.line + 1}: {message}")

    def document(self) -> Document:
        events = self.events
        self.get()  # StreamStartEvent
        event = self.get()
        if type(event) is events.StreamEndEvent:
            return Document(None, 0, self.key_lines, self.value_lines, self.item_lines)
        first = self.get()
        root = self.node(first)
        self.get()  # DocumentEndEvent
        event = self.get()
        if type(event) is not events.StreamEndEvent:
            raise self.fail(event, "not valid YAML (but found another document)")
        if self.extra > MAX_ALIAS_NODES:
            raise PatchError(f"{self.source}: YAML aliases would expand this file by "
                             f"{self.extra} nodes, over the limit of {MAX_ALIAS_NODES} "
                             "(write the values out, or use fewer aliases)")
        return Document(root, first.start_mark.line + 1, self.key_lines, self.value_lines,
                        self.item_lines)

    def node(self, event: Any) -> Any:
        """The value of the node ``event`` starts (a scalar, a whole collection, an alias)."""
        kind = type(event)
        events = self.events
        if kind is events.AliasEvent:
            return self.alias(event)
        anchor = event.anchor if self.anchors else None
        if anchor is not None:
            if anchor in self.anchored:
                raise self.fail(event, "not valid YAML (second occurrence)")
            self.anchored[anchor] = (_OPEN, 0, None)
        tag = event.tag
        if kind is events.ScalarEvent:
            value = event.value if tag is not None and tag.startswith("!") else self.scalar(event)
            self.size = 1
        elif kind is events.MappingStartEvent:
            value = self.mapping()
        else:  # a sequence
            value = self.sequence()
        if tag is not None and tag.startswith("!"):
            convert = self.tags.get(tag)
            if convert is None:
                raise self.fail(event, f"unknown tag {tag} (known: {', '.join(self.tags)})")
            value = convert(value, event.start_mark.line + 1)
        if anchor is not None:
            text = event.value if kind is events.ScalarEvent else None
            self.anchored[anchor] = (value, self.size, text)
        return value

    def alias(self, event: Any) -> Any:
        found = self.anchored.get(event.anchor) if self.anchors else None
        if found is None:
            raise self.fail(event, "not valid YAML (found undefined alias)")
        value, size, _ = found
        if value is _OPEN:
            raise PatchError(f"{self.source}: a recursive YAML alias (an alias inside the "
                             "node it names)")
        self.extra += size
        self.size = size
        if self.extra > MAX_ALIAS_NODES:
            return None  # refused at the end, with the whole count: no more copies
        return self.copy(value)

    def copy(self, value: Any) -> Any:
        """A deep copy of an anchored value, with the line tables of its containers."""
        import copy  # aliases are rare: not every launch pays for the module

        memo: dict[int, Any] = {}
        made = copy.deepcopy(value, memo)
        for original_id, twin in list(memo.items()):
            if type(twin) is dict:  # own tables: a reader may add to them
                self.key_lines[id(twin)] = dict(self.key_lines[original_id])
                if original_id in self.value_lines:
                    self.value_lines[id(twin)] = dict(self.value_lines[original_id])
            elif type(twin) is list and original_id in self.item_lines:
                self.item_lines[id(twin)] = list(self.item_lines[original_id])
        return made

    def scalar(self, event: Any) -> Any:
        """An untagged or standard-tagged scalar's value."""
        tag = event.tag
        if tag is None:
            if event.implicit[0]:
                return self.plain(event.value, lambda message: self.fail(event, message))
            return event.value
        return self.plain.construct(tag, event.value,
                                    lambda message: self.fail(event, message))

    def key(self, event: Any) -> str:
        """A mapping key: a plain string (its text as written)."""
        kind = type(event)
        if kind is self.events.ScalarEvent:
            if event.tag is not None and event.tag.startswith("!"):
                raise self.fail(event, "mapping keys must be plain strings")
            if self.anchors and event.anchor is not None:
                if event.anchor in self.anchored:
                    raise self.fail(event, "not valid YAML (second occurrence)")
                self.anchored[event.anchor] = (event.value, 1, event.value)
            return event.value
        if kind is self.events.AliasEvent:
            found = self.anchored.get(event.anchor) if self.anchors else None
            if found is None:
                raise self.fail(event, "not valid YAML (found undefined alias)")
            if found[2] is None:
                raise self.fail(event, "mapping keys must be plain strings")
            return found[2]
        raise self.fail(event, "mapping keys must be plain strings")

    def mapping(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        lines: dict[str, int] = {}
        others: dict[str, int] | None = None
        self.key_lines[id(out)] = lines
        get = self.get
        events = self.events
        scalar_event, mapping_start = events.ScalarEvent, events.MappingStartEvent
        memo = self.plain.memo
        first = self.plain.first
        anchors = self.anchors
        size = 1
        while True:
            event = get()
            if type(event) is not scalar_event or event.tag is not None or (
                    anchors and event.anchor is not None):
                if type(event) is events.MappingEndEvent:
                    if others is not None:
                        self.value_lines[id(out)] = others
                    self.size = size
                    return out
                key = self.key(event)
            else:
                key = event.value
            line = event.start_mark.line + 1
            if key in lines:
                raise self.fail(event, f"duplicate key {key!r}")
            lines[key] = line
            event = get()
            value_line = event.start_mark.line + 1
            if value_line != line:
                if others is None:
                    others = {}
                others[key] = value_line
            kind = type(event)
            # The common cases inline: an untagged scalar or mapping without an anchor.
            if kind is scalar_event and event.tag is None and not (
                    anchors and event.anchor is not None):
                value = event.value
                if event.implicit[0] and (first is None or value[:1] in first):
                    value = memo[value] if value in memo else self.plain(
                        value, functools.partial(self.fail, event))
                out[key] = value
                if anchors:
                    size += 2
            elif kind is mapping_start and event.tag is None and not (
                    anchors and event.anchor is not None):
                out[key] = self.mapping()
                if anchors:
                    size += 1 + self.size
            else:
                out[key] = self.node(event)
                if anchors:
                    size += 1 + self.size

    def sequence(self) -> list[Any]:
        out: list[Any] = []
        lines: list[int] = []
        self.item_lines[id(out)] = lines
        get = self.get
        end = self.events.SequenceEndEvent
        anchors = self.anchors
        size = 1
        while True:
            event = get()
            if type(event) is end:
                self.size = size
                return out
            lines.append(event.start_mark.line + 1)
            out.append(self.node(event))
            if anchors:
                size += self.size
