"""Tests for :mod:`dsh.config.yamlreader` and the patch reader built on it.

The reader must give exactly what PyYAML's loader gives (for values), and what the
node-based reader dsh used to ship gives (for whole layers; it is kept as the tests'
oracle, :mod:`reference_reader`), or refuse the file when that reading refuses it.
Documents are generated as YAML text with tricky plain scalars written raw (YAML 1.1
ints, floats, bools, nulls, timestamps), quoted scalars, tags, anchors and mistakes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.config import patchfile
from dsh.config.shipped import shipped_root
from dsh.config.yamlreader import read
from dsh.core.errors import PatchError
from tests.launcher import reference_reader

LOADERS = [yaml.SafeLoader] + ([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])

PLAIN = [
    "0", "7", "-3", "+5", "012", "08", "0x1F", "0o17", "0b101", "1_000", "1:30", "190:20:30",
    "3.5", "-.5", "1e3", "1.5e+3", "6.8523015e+5", ".inf", "-.Inf", ".NaN", "~", "null",
    "Null", "NULL", "true", "False", "TRUE", "yes", "No", "on", "OFF", "y", "n", "2001-12-14",
    "2001-12-14t21:59:43.10-05:00", "abc", "plug-a", "x y", "none", "0.", "-0", "+.5",
]
QUOTED = [f"'{p}'" for p in PLAIN] + ['"0x1F"', "'it''s'", '"~"', "''", '"a\\tb"']
KEYS = ["k1", "k2", "x y", "'k3'"]


class _Reference(yaml.SafeLoader):
    """PyYAML's safe loader, with timestamps kept as written (as dsh keeps them)."""


_Reference.add_constructor("tag:yaml.org,2002:timestamp", lambda _loader, node: node.value)


def _same(a: Any, b: Any) -> bool:
    """Equal with equal types all the way down (1 is not True, NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _render(value: Any, indent: int) -> list[str]:
    """Block-style YAML lines for generated ``value`` (leaves are raw YAML text)."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out = []
        for key, item in value.items():
            if isinstance(item, str):
                out.append(f"{pad}{key}: {item}".rstrip())
            else:
                out.append(f"{pad}{key}:")
                out += _render(item, indent + 2)
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if isinstance(item, str):
                out.append(f"{pad}- {item}".rstrip())
            else:
                out.append(f"{pad}-")
                out += _render(item, indent + 2)
        return out
    return [pad + value]


leaves = st.sampled_from(PLAIN + QUOTED + [""]) | st.builds(
    lambda a, b: f"[{a}, {b}]", st.sampled_from(PLAIN), st.sampled_from(PLAIN)
) | st.builds(lambda a: f"{{k: {a}}}", st.sampled_from(PLAIN))
trees = st.recursive(
    leaves,
    lambda inner: st.lists(inner, min_size=1, max_size=3)
    | st.dictionaries(st.sampled_from(KEYS), inner, min_size=1, max_size=3),
    max_leaves=10,
)

PROPERTY = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.lists(trees, min_size=1, max_size=4), st.sampled_from(LOADERS))
def test_values_equal_pyyaml_safe_loading(items: list[Any], loader: type) -> None:
    text = "\n".join(_render(items, 0)) + "\n"
    expected = yaml.load(text, Loader=_Reference)
    assert _same(read(text, loader, "p.yml", {}).root, expected), text


@PROPERTY
@given(st.lists(trees, min_size=1, max_size=4))
def test_key_and_item_lines_are_the_nodes_lines(items: list[Any]) -> None:
    text = "\n".join(_render(items, 0)) + "\n"
    doc = read(text, yaml.SafeLoader, "p.yml", {})
    root = yaml.compose(text, Loader=yaml.SafeLoader)

    def walk(value: Any, node: Any) -> None:
        if isinstance(value, dict):
            assert doc.key_lines[id(value)] == {
                k.value: k.start_mark.line + 1 for k, _ in node.value}
            for (key, item_node), item in zip(node.value, value.values(), strict=True):
                assert doc.value_line(value, key.value) == item_node.start_mark.line + 1
                walk(item, item_node)
        elif isinstance(value, list):
            assert doc.item_lines[id(value)] == [n.start_mark.line + 1 for n in node.value]
            for item, item_node in zip(value, node.value, strict=True):
                walk(item, item_node)

    walk(doc.root, root)


@pytest.mark.parametrize(("text", "message"), [
    ("- *a\n", "p.yml:1: not valid YAML (found undefined alias)"),
    ("- &a 1\n- &a 2\n", "p.yml:2: not valid YAML (second occurrence)"),
    ("- ! 12\n", "p.yml:1: unknown tag ! (known: !env)"),
    ("- !x 1\n", "p.yml:1: unknown tag !x (known: !env)"),
    ("- =\n", "p.yml:1: unsupported YAML tag tag:yaml.org,2002:value"),
    ("- <<\n", "p.yml:1: unsupported YAML tag tag:yaml.org,2002:merge"),
    ("- !!binary aGk=\n", "p.yml:1: unsupported YAML tag tag:yaml.org,2002:binary"),
    ("- {a: 1, a: 2}\n", "p.yml:1: duplicate key 'a'"),
    ("- {? [x] : 1}\n", "p.yml:1: mapping keys must be plain strings"),
    ("- {!x k: 1}\n", "p.yml:1: mapping keys must be plain strings"),
    ("- 1\n---\n- 2\n", "p.yml:2: not valid YAML (but found another document)"),
    ("- [1\n", "p.yml:2: not valid YAML"),
    ("- 0b_\n", "p.yml:1: not valid YAML"),
    ("- &a [1, *a]\n", "p.yml: a recursive YAML alias"),
])
def test_what_the_reader_refuses(text: str, message: str) -> None:
    for loader in LOADERS:
        with pytest.raises(PatchError) as caught:
            read(text, loader, "p.yml", {"!env": lambda value, line: value})
        assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("- &a 1\n- *a\n", [1, 1]),
    ("- !!str 5\n- !!int '7'\n", ["5", 7]),
    ("- {&k a: 1, b: *k }\n", [{"a": 1, "b": "a"}]),
    ("- {a: &m {b: 1}, c: *m}\n", [{"a": {"b": 1}, "c": {"b": 1}}]),
])
def test_what_the_reader_accepts(text: str, expected: Any) -> None:
    doc = read(text, LOADERS[-1], "p.yml", {})
    assert doc.root == expected
    assert doc.root == yaml.load(text, Loader=_Reference)


def test_an_alias_reads_as_a_copy_with_its_lines() -> None:
    doc = read("- a: &m\n    b: 1\n  c: *m\n", LOADERS[-1], "p.yml", {})
    item = doc.root[0]
    assert item["a"] == item["c"] and item["a"] is not item["c"]
    assert doc.key_lines[id(item["c"])] == {"b": 2}  # the lines where it was written


def test_deep_nesting_is_read_and_absurd_nesting_refused() -> None:
    doc = read("- " + "[" * 80 + "]" * 80 + "\n", LOADERS[-1], "p.yml", {})
    value, depth = doc.root, 0
    while isinstance(value, list) and value:
        value, depth = value[0], depth + 1
    assert depth == 80  # the root list and 79 of the 80 nested ones hold one item
    for loader in LOADERS:  # libyaml's depth limit, or the interpreter's
        with pytest.raises(PatchError, match=r"^p\.yml(:1)?: .*(nests too deeply|depth)"):
            read("- " + "[" * 5000 + "]" * 5000 + "\n", loader, "p.yml", {})


# -- the patch reader against the node-based oracle ------------------------------------------

TAGGED = ["!env API_KEY", "!env [PORT, 8080]", "!env [PORT, null]", "!env ''", "!home sub/x",
          "!path rel/x", "!bogus x", "!!str 5", "!!int '7'", "&x 1", "*x", "!env [A, b, c]"]
# Where rows may stand (an operation's config), a tagged list is a value to the reader and
# child rows to the oracle (test_a_tagged_list_is_a_value_never_rows): only other forms.
ROW_LEVEL_TAGGED = [tag for tag in TAGGED if not tag.startswith("!env [")] + ["!env [A, b, c]"]
configs = st.dictionaries(st.sampled_from(KEYS), trees | st.sampled_from(TAGGED), max_size=3)
# Mostly valid rows and operations (so the reader has work), sometimes a mistake.
leaf_rows = st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b", "'c'", "x-1"]), "name": st.sampled_from(["plug-a", "'p'"])},
    optional={"config": configs | configs | st.sampled_from(["~", "[1]", "!env X"]),
              "disabled": st.sampled_from(["true", "no", "off", "maybe"]),
              "inject": st.sampled_from(["[s1, s2]", "[]", "~", "s1"])},
)
group_rows = st.fixed_dictionaries(
    {"id": st.just("g"), "group": st.sampled_from(["true", "yes"])},
    optional={"config": st.lists(leaf_rows, max_size=2), "disabled": st.just("false")},
)
odd_rows = st.sampled_from([
    "{id: a}", "{name: x}", "{id: 'a:b', name: x}", "{id: a, name: x, colour: red}",
    "{id: a, name: x, id: b}", "just-text", "{id: g, group: true, config: {a: 1}}",
    "&r {id: q, name: x}",
])
rows = st.one_of(leaf_rows, leaf_rows, group_rows, odd_rows)
operations = st.one_of(
    st.fixed_dictionaries({"insert": st.lists(rows, min_size=1, max_size=3)}),
    st.fixed_dictionaries(
        {"id": st.sampled_from(["a", "g", "g:c", "'x'"])},
        optional={"name": st.sampled_from(["plug-a", "''", "3"]),
                  "config": configs | configs | st.sampled_from(ROW_LEVEL_TAGGED),
                  "disabled": st.sampled_from(["true", "yes", "1"]),
                  "inject": st.sampled_from(["[s1]", "~"]),
                  "insert": st.lists(rows, max_size=2)},
    ),
    st.fixed_dictionaries({"id": st.just("g"), "config": st.lists(leaf_rows, max_size=2)}),
    st.fixed_dictionaries({"id": st.just("a"), "merge": st.dictionaries(
        st.sampled_from(["config", "config", "inject", "name"]), configs, max_size=2)}),
    st.fixed_dictionaries(
        {"id": st.sampled_from(["a", "g"]), "replace": st.fixed_dictionaries(
            {"name": st.sampled_from(["plug-b", "plug-b", "''", "3"])},
            optional={"config": configs | st.sampled_from(["~", "[1]", "!env X"]),
                      "inject": st.sampled_from(["[s1]", "~", "s1"]),
                      "disabled": st.sampled_from(["true", "maybe"]),
                      "colour": st.just("red")}) | st.sampled_from(["{}", "[a]", "x"])},
        optional={"name": st.sampled_from(["plug-a", "3"]),
                  "merge": st.fixed_dictionaries({"config": configs})}),
    st.sampled_from(TAGGED + PLAIN[:3] + ["{}", "{colour: red}", "{id: ''}"]),
)


def _ours(text: str, loader: type) -> Any:
    """The layer's operations, or the PatchError naming why not (the loader is the one
    dsh uses: the C parser where present; the reference is given ``loader``)."""
    try:
        return patchfile.parse_layer(text, path=Path("/patches/p.yml"), kind="patch",
                                     source="p.yml").operations
    except PatchError as exc:
        return exc


def _reference(text: str, loader: type) -> Any:
    try:
        return reference_reader._read_nodes(text, loader, "p.yml", Path("/patches"))
    except (PatchError, ValueError) as exc:  # ValueError: PyYAML's own, e.g. on "0b_"
        return exc


def _agree(text: str, loader: type) -> None:
    """Both read the same layer, or both refuse the file (with the same message when it
    holds one mistake; with several, each names the first it meets)."""
    ours, reference = _ours(text, loader), _reference(text, loader)
    if isinstance(reference, Exception):
        assert isinstance(ours, PatchError), (text, reference)
    else:  # repr: equal values, equal key order, equal lines
        assert repr(ours) == repr(reference), text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, max_size=4), st.sampled_from(LOADERS))
def test_the_reader_equals_the_oracle(ops: list[Any], loader: type) -> None:
    _agree("\n".join(_render(ops, 0)) + "\n", loader)


def test_every_shipped_bundle_reads_as_the_oracle_reads_it() -> None:
    for path in sorted((shipped_root() / "bundles").glob("*/patch.yml")):
        text = path.read_text(encoding="utf-8")
        ours = _ours(text, LOADERS[-1])
        assert not isinstance(ours, Exception), (path, ours)
        assert repr(ours) == repr(_reference(text, LOADERS[-1]))


@pytest.mark.parametrize("text", ["", "# c\n", "---\n", "[]\n", "- 1\n---\n- 2\n"])
def test_empty_and_odd_files_as_the_oracle(text: str) -> None:
    ours, reference = _ours(text, LOADERS[-1]), _reference(text, LOADERS[-1])
    assert repr(ours) == repr(reference) or str(ours) == str(reference)


@pytest.mark.parametrize("text", [
    "- id: a\n  config: !env X\n",
    "- id: a\n  config: !home x\n",
    "- insert:\n    - {id: r, name: p, config: {1: a, true: b, ~: c, '': d, x: .nan}}\n",
    "- id: a\n  merge: {config: {a: {b: 1}, 'a.b': 2}}\n",
    "- {\n  id: a,\n  disabled: true}\n",
    "- id: a\n  name: ''\n  disabled: true\n",
    "- id: a\n  inject: ~\n  config: ~\n",
    "- insert: []\n",
    "- id: g\n  config: []\n",
    "- id: a\n  config:\n    base: &b {x: 1}\n    again: *b\n",
    "- id:\n    a\n  config:\n    [1]\n",
    "- insert:\n    -\n      7\n",
])
def test_edge_cases_as_the_oracle(text: str) -> None:
    for loader in LOADERS:
        _agree(text, loader)
        if not isinstance(_reference(text, loader), Exception):
            continue
        assert str(_ours(text, loader)) == str(_reference(text, loader))


def test_a_tagged_list_is_a_value_never_rows() -> None:
    """Where the node reading took ``!env [A, b]`` for a list of child rows (refusing it,
    or worse), the one reader takes the tag for what it says: a reference."""
    (op,) = _ours("- id: a\n  config: !env [PORT, 8080]\n", LOADERS[-1])
    assert op.assign["config"] == patchfile.EnvRef("PORT", "8080")
