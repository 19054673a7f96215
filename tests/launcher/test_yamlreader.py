"""Tests for :mod:`dsh.config.yamlreader` and the quick patch reader built on it.

The quick path must give exactly what PyYAML's loader (for values) and the node-based
reference reader of :mod:`dsh.config.patchfile` (for whole layers) give, or decline the file.
Documents are generated as YAML text with tricky plain scalars written raw (YAML 1.1
ints, floats, bools, nulls, timestamps), quoted scalars, tags, anchors and mistakes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from dsh.config import patchfile
from dsh.config.shipped import shipped_root
from dsh.config.yamlreader import Unsupported, read
from dsh.core.errors import PatchError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    assert _same(read(text, loader).root, expected), text


@PROPERTY
@given(st.lists(trees, min_size=1, max_size=4))
def test_key_and_item_lines_are_the_nodes_lines(items: list[Any]) -> None:
    text = "\n".join(_render(items, 0)) + "\n"
    doc = read(text, yaml.SafeLoader)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    assert doc.item_lines == [node.start_mark.line + 1 for node in root.value]

    def walk(value: Any, node: Any) -> None:
        if isinstance(value, dict):
            assert doc.key_lines[id(value)] == {
                k.value: k.start_mark.line + 1 for k, _ in node.value}
            for (_, item_node), item in zip(node.value, value.values(), strict=True):
                walk(item, item_node)
        elif isinstance(value, list):
            for item, item_node in zip(value, node.value, strict=True):
                walk(item, item_node)

    walk(doc.root, root)


@pytest.mark.parametrize("text", [
    "- &a 1\n- *a\n", "- *a\n", "- !!str 5\n", "- ! 12\n", "- =\n", "- <<\n",
    "- {a: 1, a: 2}\n", "- {? [x] : 1}\n", "- 1\n---\n- 2\n", "- [1\n", "- !x 1\n",
    "- " + "[" * 80 + "]" * 80 + "\n", "- 0b_\n",
])
def test_what_the_reader_declines(text: str) -> None:
    with pytest.raises(Unsupported):
        read(text, LOADERS[-1], {"!env": str})


# -- the quick patch reader against the node-based reference ---------------------------------

TAGGED = ["!env API_KEY", "!env [PORT, 8080]", "!env [PORT, null]", "!env ''", "!home sub/x",
          "!path rel/x", "!bogus x", "!!str 5", "!!int '7'", "&x 1", "*x", "!env [A, b, c]"]
configs = st.dictionaries(st.sampled_from(KEYS), trees | st.sampled_from(TAGGED), max_size=3)
# Mostly valid rows and operations (so the quick reader has work), sometimes a mistake.
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
                  "config": configs | configs | st.sampled_from(TAGGED),
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


def _quick(text: str, loader: type) -> Any:
    try:
        return patchfile._QuickReader(Path("/patches")).operations(text, loader)
    except Unsupported:
        return None


def _reference(text: str, loader: type) -> Any:
    try:
        return patchfile._read_nodes(text, loader, "p.yml", Path("/patches"))
    except (PatchError, ValueError) as exc:  # ValueError: PyYAML's own, e.g. on "0b_"
        return exc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, max_size=4), st.sampled_from(LOADERS))
def test_quick_reader_equals_the_reference_or_declines(ops: list[Any], loader: type) -> None:
    text = "\n".join(_render(ops, 0)) + "\n"
    quick = _quick(text, loader)
    if quick is not None:  # repr: equal values, equal key order, equal lines
        assert repr(quick) == repr(_reference(text, loader)), text


def test_the_quick_reader_reads_every_shipped_bundle() -> None:
    for path in sorted((shipped_root() / "bundles").glob("*/patch.yml")):
        text = path.read_text(encoding="utf-8")
        quick = _quick(text, LOADERS[-1])
        assert quick is not None, path
        assert repr(quick) == repr(_reference(text, LOADERS[-1]))


@pytest.mark.parametrize("text", ["", "# c\n", "---\n", "[]\n", "- 1\n---\n- 2\n"])
def test_files_the_quick_reader_leaves_to_the_reference(text: str) -> None:
    assert _quick(text, LOADERS[-1]) is None or text == "[]\n"
    reference = _reference(text, LOADERS[-1])
    try:
        layer = patchfile.parse_layer(text, path=None, kind="patch", source="p.yml")
    except PatchError as exc:
        assert str(exc) == str(reference)
    else:
        assert layer.operations == reference


@pytest.mark.parametrize("text", [
    "- id: a\n  config: !env [PORT, 8080]\n",
    "- id: a\n  config: !env X\n",
    "- id: a\n  config: !home x\n",
    "- insert:\n    - {id: g, group: true, config: !env [A, b]}\n",
    "- insert:\n    - {id: r, name: p, config: {1: a, true: b, ~: c, '': d, x: .nan}}\n",
    "- id: a\n  merge: {config: {a: {b: 1}, 'a.b': 2}}\n",
    "- {\n  id: a,\n  disabled: true}\n",
    "- id: a\n  name: ''\n  disabled: true\n",
    "- id: a\n  inject: ~\n  config: ~\n",
    "- insert: []\n",
    "- id: g\n  config: []\n",
])
def test_quick_reader_edge_cases(text: str) -> None:
    for loader in LOADERS:
        quick = _quick(text, loader)
        if quick is not None:
            assert repr(quick) == repr(_reference(text, loader))
