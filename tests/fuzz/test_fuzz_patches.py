"""Fuzzing the patch engine with arbitrary operation lists, most of them wrong.

tests/launcher/test_compose_properties.py generates well-formed operations and checks
determinism, purity and provenance; tests/launcher/test_yamlreader.py checks the reader
against the node-based oracle. Here operations are drawn from every key the format knows
plus unknown ones, with values of any YAML type in any place (rows where mappings belong,
numbers for ids, tags on lists, text with YAML syntax mixed in), so most layers are
invalid. Invariants:

* :func:`dsh.config.patchfile.parse_layer` returns a layer or raises :class:`ConfigError`
  (``PatchError``) naming the file, and does so the same way every time;
* :func:`dsh.config.compose.compose` never raises on layers that parsed, is deterministic, does
  not mutate its layers, and every key of every row has a ``file:line`` provenance;
* composed ids are unique, and children carry their group's id as prefix;
* the real launcher (``dsh --dump-config --json``) exits 0 with JSON or 2 with a message
  naming the patch file, never with a traceback.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.config.compose import ComposedTree, compose
from dsh.config.patchfile import PatchLayer, parse_layer
from dsh.core.errors import ConfigError

TAGS = {"__T0__": "!env API_KEY", "__T1__": "!env [PORT, 1]", "__T2__": "!home x",
        "__T3__": "!path rel", "__T4__": "!env", "__T5__": "!env [A]", "__T6__": "!bogus x",
        "__T7__": "!home ''", "__T8__": "&a [1]", "__T9__": "*a"}
KEYS = ["id", "name", "insert", "merge", "config", "disabled", "group", "inject", "k", "confg"]
IDS = ["a", "b", "g", "g:c", "c", "", "a:b:c", "zz"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.floats(allow_nan=True),
    st.sampled_from(IDS), st.text(max_size=6), st.sampled_from(sorted(TAGS)),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(KEYS) | st.text(max_size=3), inner, max_size=4),
    max_leaves=12,
)
rows = st.dictionaries(st.sampled_from(KEYS), values, max_size=5) | st.fixed_dictionaries(
    {"id": st.sampled_from(IDS), "name": st.sampled_from(["p", "q"])},
    optional={"config": values, "group": st.booleans(), "disabled": values,
              "inject": values})
good_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=True)
    | st.text(max_size=6) | st.sampled_from(["__T0__", "__T1__", "__T2__", "__T3__"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=8,
)
configs = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), good_values,
                          max_size=4)
good_rows = st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b", "c"]), "name": st.sampled_from(["p", "q"])},
    optional={"config": configs, "disabled": st.booleans(),
              "inject": st.lists(st.sampled_from(["s1", "s2"]), max_size=2)})
good_groups = st.fixed_dictionaries({"id": st.just("g"), "group": st.just(True)},
                                    optional={"config": st.lists(good_rows, max_size=3),
                                              "disabled": st.booleans()})
targets = st.sampled_from(["a", "b", "g", "g:a", "g:c", "zz"])
# Operations of the right shape (so composition is exercised on most layers) ...
good_operations = st.one_of(
    st.fixed_dictionaries({"insert": st.lists(good_rows | good_groups, min_size=1,
                                              max_size=3)}),
    st.fixed_dictionaries({"id": targets}, optional={
        "name": st.sampled_from(["p", "q"]), "config": configs | st.lists(good_rows),
        "disabled": st.booleans(), "inject": st.lists(st.sampled_from(["s1"]))}),
    st.fixed_dictionaries({"id": targets, "merge": st.fixed_dictionaries({"config": configs})}),
    st.fixed_dictionaries({"id": st.just("g"), "insert": st.lists(good_rows, min_size=1)}),
)
# ... and of any shape at all, one of them enough to make a layer invalid.
operations = st.one_of(
    good_operations, good_operations, good_operations,
    st.dictionaries(st.sampled_from(KEYS), values, max_size=4),
    st.fixed_dictionaries({"insert": st.lists(rows, max_size=3)},
                          optional={"id": st.sampled_from(IDS)}),
    st.fixed_dictionaries({"id": st.sampled_from(IDS)},
                          optional={"merge": values, "config": values | st.lists(rows),
                                    "name": values, "disabled": values}),
)
layers_text = st.lists(st.one_of(st.lists(good_operations, max_size=4),
                                 st.lists(operations, max_size=3)), max_size=2).map(
    lambda chunks: _splice(yaml.safe_dump([op for chunk in chunks for op in chunk],
                                          sort_keys=False, allow_unicode=True)))
raw_text = st.lists(st.sampled_from([
    "- ", "insert:", " [", "]", "{", "}", "id: a", "\n", "  ", ": ", "- {id: a, name: p}",
    "&x ", "*x", "!env ", "!path ", "'", '"', "---\n", "...\n", "#c", ",", "\t", "?",
]), max_size=40).map("".join)


def _splice(text: str) -> str:
    for placeholder, tagged in TAGS.items():
        text = text.replace(placeholder, tagged)
    return text


def parse(text: str, index: int = 0) -> PatchLayer | ConfigError:
    """The layer, or the ConfigError it raised; any other exception fails the test."""
    source = f"/patches/p{index}.yml"
    try:
        return parse_layer(text, path=Path(source), kind="patch", source=source)
    except ConfigError as exc:
        assert str(exc).startswith(source), str(exc)
        return exc


def observe(tree: ComposedTree) -> Any:
    """Everything a composed tree shows, as plain data."""
    return (tree.to_json("fuzz", "live"), tree.flat_rows({"API_KEY": "k"}, Path("/h")))


PROPERTY = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.one_of(layers_text, raw_text))
def test_parsing_any_text_gives_a_layer_or_a_config_error(text: str) -> None:
    first, second = parse(text), parse(text)
    if isinstance(first, ConfigError):
        assert type(second) is type(first) and str(second) == str(first)
        assert first.exit_code == 2
    else:
        assert second == first


@PROPERTY
@given(st.lists(st.one_of(layers_text, raw_text), min_size=1, max_size=4))
def test_composing_what_parsed_never_raises_and_keeps_its_invariants(texts: list[str]) -> None:
    layers = [layer for i, text in enumerate(texts)
              if isinstance(layer := parse(text, i), PatchLayer)]
    before = copy.deepcopy(layers)
    tree = compose(layers)
    assert layers == before  # inputs not mutated
    assert observe(compose(layers)) == observe(tree)  # deterministic
    seen: set[str] = set()
    for row, disabled in tree.walk():
        assert row.id not in seen, row.id
        seen.add(row.id)
        assert isinstance(disabled, bool)
        assert set(row.values) <= set(row.provenance), (row.values, dict(row.provenance))
        for child in row.children or ():
            assert child.id.startswith(row.id + ":")
        if row.children is None and isinstance(row.values.get("config"), dict):
            for key in row.values["config"]:
                assert f"config.{key}" in row.provenance, (key, dict(row.provenance))
        for key, where in row.provenance.items():
            source, _, line = where.rpartition(":")
            assert source.startswith("/patches/p") and line.isdigit() and int(line) >= 1, key
    json.dumps(tree.to_json("fuzz", "live"), default=str)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(layers_text, raw_text))
def test_the_launcher_exits_0_or_2_never_with_a_traceback(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        patch = Path(tmp) / "fuzz.yml"
        patch.write_text(text, encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-m", "dsh", "--profile", "sdk", "--patch", str(patch),
             "--dump-config", "--json"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode == 0:
        assert json.loads(proc.stdout)["rows"]
    else:
        assert proc.returncode == 2, proc.stderr
        assert str(patch) in proc.stderr, proc.stderr
        assert proc.stdout == ""
