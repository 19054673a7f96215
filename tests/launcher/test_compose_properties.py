"""Property tests of the patch engine: deterministic, pure, and an empty layer is neutral.

Layers are generated as real patch-file text (random operations dumped to YAML, with
``!env``/``!home``/``!path`` tags spliced in) and parsed by
:func:`dsh.config.patchfile.parse_layer`, so the properties cover the parser and the
composer together. Ids are drawn from a small set so operations often hit existing rows,
groups and nested ``g:child`` ids, and sometimes miss (unknown ids, guards that do not
match, wrong config shapes).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.config.compose import ComposedTree, compose
from dsh.config.patchfile import PatchLayer, parse_layer

TAGS = {
    "__TAG0__": "!env API_KEY",
    "__TAG1__": "!env [PORT, '8080']",
    "__TAG2__": "!home sub/file",
    "__TAG3__": "!path rel/file",
}
NAMES = ["plug-a", "plug-b"]
TARGETS = ["a", "b", "g", "g:c", "g:d", "zz"]
KEYS = ["k1", "k2", "k3"]

scalars = st.one_of(
    st.integers(-3, 3), st.booleans(), st.none(), st.text(alphabet="xyz", max_size=3),
    st.sampled_from(sorted(TAGS)),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner,
                                                                  max_size=3),
    max_leaves=6,
)
configs = st.dictionaries(st.sampled_from(KEYS), values, max_size=3)
injects = st.lists(st.sampled_from(["s1", "s2"]), max_size=2)


def leaf_rows(ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Rows naming a plugin, with optional config, disabled and inject."""
    return st.fixed_dictionaries(
        {"id": st.sampled_from(ids), "name": st.sampled_from(NAMES)},
        optional={"config": configs, "disabled": st.booleans(), "inject": injects},
    )


child_rows = leaf_rows(["c", "d"])
group_rows = st.fixed_dictionaries(
    {"id": st.just("g"), "group": st.just(True)},
    optional={"config": st.lists(child_rows, max_size=3), "disabled": st.booleans()},
)
operations = st.one_of(
    st.fixed_dictionaries({"insert": st.lists(leaf_rows(["a", "b"]) | group_rows,
                                              min_size=1, max_size=3)}),
    st.fixed_dictionaries(
        {"id": st.sampled_from(TARGETS)},
        optional={"name": st.sampled_from(NAMES), "config": configs,
                  "disabled": st.booleans(), "inject": injects},
    ),
    st.fixed_dictionaries({"id": st.sampled_from(TARGETS), "merge": st.fixed_dictionaries(
        {"config": configs})}),
    st.fixed_dictionaries({"id": st.just("g"), "insert": st.lists(child_rows, min_size=1,
                                                                  max_size=2)}),
    st.fixed_dictionaries({"id": st.just("g"), "config": st.lists(child_rows, max_size=2)}),
)
patch_texts = st.lists(operations, max_size=5).map(
    lambda ops: _splice_tags(yaml.safe_dump(ops, sort_keys=False)) if ops else "")


def _splice_tags(text: str) -> str:
    """Replace tag placeholders (plain scalars in the dump) with real tagged values."""
    for placeholder, tagged in TAGS.items():
        text = text.replace(placeholder, tagged)
    return text


def _layers(texts: list[str]) -> list[PatchLayer]:
    """Parse each text as ``--patch`` layer ``/patches/pN.yml``."""
    return [parse_layer(text, path=Path(f"/patches/p{i}.yml"), kind="patch",
                        source=f"/patches/p{i}.yml") for i, text in enumerate(texts)]


def _observe(tree: ComposedTree) -> tuple[Any, ...]:
    """Everything composition produced, as plain data: rows, warnings and flat rows."""
    document = tree.to_json("prop", "live")
    flat = tree.flat_rows({"API_KEY": "k", "PORT": "1"}, Path("/home"))
    return document["rows"], document["warnings"], flat


def _scribble(value: Any) -> None:
    """Mutate every dict and list reachable from ``value`` (to detect shared state)."""
    if isinstance(value, dict):
        for item in list(value.values()):
            _scribble(item)
        value["__scribbled__"] = True
    elif isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("__scribbled__")


PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@PROPERTY
@given(st.lists(patch_texts, min_size=1, max_size=4))
def test_composition_is_deterministic(texts: list[str]) -> None:
    assert _layers(texts) == _layers(texts)
    layers = _layers(texts)
    assert _observe(compose(layers)) == _observe(compose(layers))
    assert compose(layers).to_json("p", "live") == compose(_layers(texts)).to_json("p", "live")


@PROPERTY
@given(st.lists(patch_texts, min_size=1, max_size=4))
def test_composition_never_mutates_or_shares_its_inputs(texts: list[str]) -> None:
    layers = _layers(texts)
    before = copy.deepcopy(layers)
    first = compose(layers)
    expected = copy.deepcopy(_observe(first))
    assert layers == before
    for row, _ in first.walk():
        _scribble(row.values)
        _scribble(row.provenance)
    assert layers == before
    assert _observe(compose(layers)) == expected


@PROPERTY
@given(st.lists(patch_texts, max_size=4), st.sampled_from(["", "[]\n", "# only a comment\n"]),
       st.data())
def test_an_empty_layer_changes_nothing(texts: list[str], empty: str, data: st.DataObject
                                        ) -> None:
    layers = _layers(texts)
    position = data.draw(st.integers(0, len(layers)), label="position")
    blank = parse_layer(empty, path=None, kind="home", source="/home/patch.yml")
    assert blank.operations == ()
    with_blank = compose([*layers[:position], blank, *layers[position:]])
    assert _observe(with_blank) == _observe(compose(layers))
    assert len(with_blank.layers) == len(layers) + 1


@PROPERTY
@given(st.lists(patch_texts, min_size=1, max_size=3))
def test_every_composed_key_has_provenance(texts: list[str]) -> None:
    for row, _ in compose(_layers(texts)).walk():
        assert set(row.values) <= set(row.provenance)
        if row.children is None:
            for key in row.values.get("config") or {}:
                assert f"config.{key}" in row.provenance
        for where in row.provenance.values():
            source, _, line = where.rpartition(":")
            assert source.startswith("/patches/p") and line.isdigit()
