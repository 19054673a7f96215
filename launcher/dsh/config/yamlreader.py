"""A fast one-pass YAML reader for documents without surprises: plain values plus key lines.

PyYAML's loader builds a node per value (and resolves every plain scalar in Python) before
anything can be converted; for the launcher's patch files that costs more than parsing.
This reader walks libyaml's events once (the C parser when present) and builds dicts,
lists and scalars directly, remembering the line of every mapping key and the first line
of every mapping, which is all provenance needs.

It only accepts the ordinary case and raises :class:`Unsupported` for everything else:
invalid YAML, several documents, anchors and aliases, explicit tags other than the
caller's, non-string keys, duplicate keys and very deep nesting. The caller then reads
the text with the full loader, which owns every error message; so this module never has
to match an error, only the values of valid documents.

Plain scalars resolve exactly as PyYAML's loader resolves them: the same implicit
resolver table (YAML 1.1: null, bool, int, float, timestamp, ...) picks the tag and the
same ``SafeConstructor`` methods build the value, memoised per document because patch
files repeat a few values (``true``, small numbers) many times. Timestamps stay the text
they were written as, and tags the patch format does not know are left to the full loader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

MAX_DEPTH = 64  # deeper documents go to the full loader, which owns the depth error

_STR = "tag:yaml.org,2002:str"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_CONSTRUCTED = {
    "tag:yaml.org,2002:int": "construct_yaml_int",
    "tag:yaml.org,2002:float": "construct_yaml_float",
    "tag:yaml.org,2002:bool": "construct_yaml_bool",
    "tag:yaml.org,2002:null": "construct_yaml_null",
}


class Unsupported(Exception):
    """The document needs the full loader (it is invalid, or uses what this reader skips)."""


class Document(NamedTuple):
    """A read document: its root value and the lines it was written on (1-based).

    ``key_lines`` is keyed by ``id()`` of each mapping in ``root`` (valid while ``root``
    is alive); ``item_lines`` has the first line of each item when ``root`` is a list.
    """

    root: Any
    key_lines: dict[int, dict[str, int]]
    item_lines: list[int]


ScalarTags = Mapping[str, Callable[[str], Any]]
SequenceTags = Mapping[str, Callable[[list[Any]], Any]]


class _Plain:
    """Plain-scalar resolution, equal to the loader's resolver and safe constructor."""

    def __init__(self, loader: type) -> None:
        import yaml

        self.table: dict[Any, list[tuple[str, Any]]] = loader.yaml_implicit_resolvers
        # Resolvers for any first character would defeat the first-character shortcut.
        if self.table.get(None) or loader.yaml_path_resolvers:
            raise Unsupported("wildcard or path resolvers")
        self.first = frozenset(self.table)
        self.memo: dict[str, Any] = {}
        self.constructor = yaml.constructor.SafeConstructor()
        self.node = yaml.ScalarNode

    def __call__(self, text: str) -> Any:
        """The value of plain scalar ``text`` whose first character has resolvers."""
        if text in self.memo:
            return self.memo[text]
        tag = _STR
        for candidate, regexp in self.table[text[:1]]:
            if regexp.match(text):
                tag = candidate
                break
        if tag in (_STR, _TIMESTAMP):
            value = text
        elif tag in _CONSTRUCTED:
            construct = getattr(self.constructor, _CONSTRUCTED[tag])
            try:
                value = construct(self.node(tag, text))
            except Exception as exc:  # e.g. "0b_": the full loader fails there in its turn
                raise Unsupported(tag) from exc
        else:
            raise Unsupported(tag)
        if not isinstance(value, float):  # NaN must not become one shared object
            self.memo[text] = value
        return value


def read(text: str, loader: type, scalar_tags: ScalarTags = {},  # noqa: B006 - read only
         sequence_tags: SequenceTags = {}) -> Document:  # noqa: B006
    """Read single-document YAML ``text`` with ``loader``'s parser.

    ``scalar_tags`` and ``sequence_tags`` convert local tags (``!name``) on scalars and
    sequences; they raise :class:`Unsupported` for forms they refuse. Raises
    :class:`Unsupported` whenever the full loader is needed.
    """
    import yaml

    parser = loader(text)
    try:
        return _Events(parser.get_event, _Plain(loader), scalar_tags, sequence_tags,
                       anchors="&" in text).document()
    except yaml.YAMLError as exc:
        raise Unsupported("invalid YAML") from exc
    finally:
        parser.dispose()


class _Events:
    """One document's events into values: a function per collection kind, so the hot
    loops know whether the next scalar is a key, a value or an item without asking."""

    def __init__(self, get: Callable[[], Any], plain: _Plain, scalar_tags: ScalarTags,
                 sequence_tags: SequenceTags, *, anchors: bool) -> None:
        from yaml import events

        self.events = events
        self.get = get
        self.plain = plain
        self.scalar_tags = scalar_tags
        self.sequence_tags = sequence_tags
        self.anchors = anchors  # without "&" in the text no event can carry an anchor
        self.key_lines: dict[int, dict[str, int]] = {}
        self.depth = 0

    def document(self) -> Document:
        events = self.events
        if type(self.get()) is not events.StreamStartEvent:
            raise Unsupported("stream")
        event = self.get()
        if type(event) is events.StreamEndEvent:
            return Document(None, self.key_lines, [])
        item_lines: list[int] = []
        root = self.node(self.get(), item_lines)
        if (type(self.get()) is not events.DocumentEndEvent
                or type(self.get()) is not events.StreamEndEvent):
            raise Unsupported("several documents")
        return Document(root, self.key_lines, item_lines)

    def node(self, event: Any, item_lines: list[int] | None = None) -> Any:
        """The value of the node ``event`` starts (a scalar, or a whole collection)."""
        kind = type(event)
        if self.anchors and event.anchor is not None:
            raise Unsupported("anchor")
        if kind is self.events.ScalarEvent:
            return self.scalar(event)
        if kind is self.events.MappingStartEvent and event.tag is None:
            return self.mapping()
        if kind is self.events.SequenceStartEvent:
            tag = event.tag
            if tag is None:
                return self.sequence(item_lines)
            if tag in self.sequence_tags:
                return self.sequence_tags[tag](self.sequence(None))
        raise Unsupported(kind.__name__)

    def scalar(self, event: Any) -> Any:
        value = event.value
        tag = event.tag
        if tag is None:
            if event.implicit[0] and value[:1] in self.plain.first:
                return self.plain(value)
            return value
        convert = self.scalar_tags.get(tag)
        if convert is None:
            raise Unsupported(tag)
        return convert(value)

    def mapping(self) -> dict[str, Any]:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unsupported("depth")
        out: dict[str, Any] = {}
        lines: dict[str, int] = {}
        self.key_lines[id(out)] = lines
        get = self.get
        events = self.events
        scalar_event, mapping_start = events.ScalarEvent, events.MappingStartEvent
        first = self.plain.first
        memo = self.plain.memo
        anchors = self.anchors
        while True:
            event = get()
            if type(event) is not scalar_event:
                if type(event) is events.MappingEndEvent:
                    self.depth -= 1
                    return out
                raise Unsupported("complex key")
            key = event.value
            if event.tag is not None or key in lines or (anchors and event.anchor is not None):
                raise Unsupported("tagged or duplicate key")
            lines[key] = event.start_mark.line + 1
            event = get()
            kind = type(event)
            # The common cases inline: an untagged scalar or mapping without an anchor.
            if kind is scalar_event and event.tag is None and not (
                    anchors and event.anchor is not None):
                value = event.value
                if event.implicit[0] and value[:1] in first:
                    value = memo[value] if value in memo else self.plain(value)
                out[key] = value
            elif kind is mapping_start and event.tag is None and not (
                    anchors and event.anchor is not None):
                out[key] = self.mapping()
            else:
                out[key] = self.node(event)

    def sequence(self, item_lines: list[int] | None) -> list[Any]:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unsupported("depth")
        out: list[Any] = []
        get = self.get
        end = self.events.SequenceEndEvent
        while True:
            event = get()
            if type(event) is end:
                self.depth -= 1
                return out
            if item_lines is not None:
                item_lines.append(event.start_mark.line + 1)
            out.append(self.node(event))
