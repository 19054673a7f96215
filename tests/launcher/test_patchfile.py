"""Tests for :mod:`dsh.config.patchfile`: patch text into frozen operations that know their
lines."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dsh.config.patchfile import PatchLayer, load_layer, parse_layer
from dsh.config.tags import EnvRef, HomeRef, PathRef
from dsh.core.errors import PatchError


def parse(text: str, path: Path | None = None) -> PatchLayer:
    """Parse dedented patch text as a ``patch`` layer labelled ``p.yml``."""
    return parse_layer(textwrap.dedent(text), path=path, kind="patch", source="p.yml")


def test_empty_and_comment_only_files_have_no_operations() -> None:
    assert parse("").operations == ()
    assert parse("# nothing here\n").operations == ()
    assert parse("[]\n").operations == ()


def test_root_insert_rows_remember_key_lines() -> None:
    layer = parse("""\
        - insert:
            - id: a
              name: plug-a
              config:
                k: 1
                nested: {x: [1, 2]}
            - id: g
              group: true
              config:
                - id: c
                  name: plug-c
        """)
    (op,) = layer.operations
    assert op.target is None
    a, g = op.insert
    assert a.values == {"id": "a", "name": "plug-a", "config": {"k": 1, "nested": {"x": [1, 2]}}}
    assert a.lines == {"id": 2, "name": 3, "config": 4, "config.k": 5, "config.nested": 6}
    assert a.children is None
    assert g.values == {"id": "g", "group": True}
    assert g.children is not None
    assert [c.values for c in g.children] == [{"id": "c", "name": "plug-c"}]
    assert g.children[0].lines == {"id": 10, "name": 11}


def test_assign_merge_guard_and_group_insert_operations() -> None:
    layer = parse("""\
        - id: a
          name: plug-a
          config: {k: 2}
          disabled: true
          inject: [sessions]
        - id: a
          merge:
            config: {deep: {x: 1}}
        - id: g
          insert:
            - {id: d, name: plug-d}
        """)
    assign, merge, insert = layer.operations
    assert (assign.line, assign.target, assign.guard) == (1, "a", "plug-a")
    assert assign.assign == {"config": {"k": 2}, "disabled": True, "inject": ["sessions"]}
    assert assign.assign_lines == {"config": 3, "config.k": 3, "disabled": 4, "inject": 5}
    assert (merge.target, merge.merge) == ("a", {"config": {"deep": {"x": 1}}})
    assert merge.merge_lines == {"config": 8, "config.deep": 8, "config.deep.x": 8}
    assert insert.target == "g"
    assert [r.values["id"] for r in insert.insert] == ["d"]


def test_group_config_assignment_is_a_list_of_child_rows() -> None:
    (op,) = parse("- id: g\n  config:\n    - {id: x, name: plug-x}\n").operations
    assert op.group_children is not None
    assert [c.values for c in op.group_children] == [{"id": "x", "name": "plug-x"}]


def test_tags_become_references(tmp_path: Path) -> None:
    patch = tmp_path / "sub" / "p.yml"
    patch.parent.mkdir()
    layer = parse("""\
        - id: a
          config:
            key: !env API_KEY
            with_default: !env [PORT, 8080]
            null_default: !env [X, null]
            data: !home sessions/db
            beside: !path ../data/file.txt
        """, path=patch)
    config = layer.operations[0].assign["config"]
    assert config == {
        "key": EnvRef("API_KEY"),
        "with_default": EnvRef("PORT", "8080"),
        "null_default": EnvRef("X", None),
        "data": HomeRef("sessions/db"),
        "beside": PathRef(str((tmp_path / "data" / "file.txt").resolve())),
    }


def test_a_shared_alias_is_not_recursion() -> None:
    layer = parse("""\
        - id: a
          config: {limits: &l {tokens: 1}, again: *l}
        """)
    assert layer.operations[0].assign["config"] == {"limits": {"tokens": 1},
                                                    "again": {"tokens": 1}}


def test_load_layer_reads_the_file_and_labels_it(tmp_path: Path) -> None:
    path = tmp_path / "patch.yml"
    path.write_text("- insert: [{id: a, name: p}]\n", encoding="utf-8")
    layer = load_layer(path, kind="home")
    assert (layer.kind, layer.source, layer.path) == ("home", str(path), path)
    assert load_layer(path, kind="bundle", source="my-bundle").source == "my-bundle"


def test_load_layer_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.yml"
    with pytest.raises(PatchError, match=r"absent\.yml: patch file not found$"):
        load_layer(path, kind="patch")


def test_not_utf8_is_a_patch_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.yml"
    path.write_bytes(b"- id: \xff\n")
    with pytest.raises(PatchError, match=r"latin\.yml: cannot read patch file"):
        load_layer(path, kind="patch")


@pytest.mark.parametrize(("text", "message"), [
    ("a: 1\n", "p.yml:1: a patch file must be a YAML list"),
    ("just text\n", "p.yml:1: a patch file must be a YAML list"),
    ("- 3\n", "p.yml:1: each patch entry must be a mapping (an operation)"),
    ("- insert: [{id: a, name: p}]\n- [a, b]\n",
     "p.yml:2: each patch entry must be a mapping (an operation)"),
    ("- insert: {id: x, name: y}\n", "p.yml:1: 'insert' must be a list of rows"),
    ("- insert:\n    - just-a-string\n", "p.yml:2: each inserted row must be a mapping"),
    ("- id: a\n  config:\n    k: !secret x\n",
     "p.yml:3: unknown tag !secret (known: !env, !home, !path)"),
    ("- id: a\n  config: !!python/object:os.system x\n",
     "p.yml:2: unsupported YAML tag tag:yaml.org,2002:python/object:os.system"),
    ("- id: a\n  config: {k: !env }\n", "p.yml:2: !env takes NAME or [NAME, default]"),
    ("- id: a\n  config: {k: !env [A, b, c]}\n", "p.yml:2: !env takes NAME or [NAME, default]"),
    ("- id: a\n  config: {k: !home [a]}\n", "p.yml:2: !home takes a relative path"),
    ("- id: a\n  config: {k: 1\n", "p.yml:3: not valid YAML"),
    ("- id: a\n  config: &x {k: *x}\n", "p.yml: a recursive YAML alias (an alias inside"),
    ("- insert: &r\n    - {id: g, group: true, config: *r}\n",
     "p.yml: a recursive YAML alias (an alias inside"),
    ("- id: a\n  id: b\n", "p.yml:2: duplicate key 'id'"),
    ("- {id: a, ? [x] : 1}\n", "p.yml:1: mapping keys must be plain strings"),
    ("- id: a\n  colour: red\n", "p.yml:2: unknown operation key 'colour'"),
    ("- name: x\n", "p.yml:1: an operation that sets keys needs an 'id'"),
    ("- {}\n", "p.yml:1: an operation needs 'insert' or an 'id'"),
    ("- id: ''\n  disabled: true\n", "p.yml:1: 'id' must be a non-empty string"),
    ("- id: a\n  disabled: maybe\n", "p.yml:1: 'disabled' must be true or false"),
    ("- id: a\n  inject: sessions\n", "p.yml:1: 'inject' must be a list of service names"),
    ("- id: a\n  name: 3\n", "p.yml:2: 'name' (the guard) must be a string"),
    ("- id: a\n  merge: {config: 3}\n", "p.yml:2: merge.config must be a mapping"),
    ("- id: a\n  merge: {name: {x: 1}}\n", "p.yml:2: cannot merge key 'name'"),
    ("- id: a\n  merge: [config]\n", "p.yml:2: expected a mapping"),
    ("- insert:\n    - {name: x}\n", "p.yml:2: a row needs an 'id': a non-empty string"),
    ("- insert:\n    - {id: 'a:b', name: x}\n", "p.yml:2: a row needs an 'id'"),
    ("- insert:\n    - {id: a}\n", "p.yml:2: row 'a' needs a 'name' (a plugin reference)"),
    ("- insert:\n    - {id: a, name: x, colour: red}\n", "p.yml:2: unknown row key 'colour'"),
    ("- insert:\n    - {id: a, name: x, config: [1]}\n",
     "p.yml:2: row 'a': config must be a mapping"),
    ("- insert:\n    - {id: g, group: true, config: {a: 1}}\n",
     "p.yml:2: group row 'g': config must be a list of child rows"),
    ("- insert:\n    - {id: g, group: yes-please}\n", "p.yml:2: 'group' must be true or false"),
    ("- id: a\n  replace: {config: {}}\n",
     "p.yml:2: 'replace' needs 'name': the plugin the row runs from now on"),
    ("- id: a\n  replace: {name: p, group: true}\n",
     "p.yml:2: cannot replace key 'group' (allowed: config, disabled, inject, name)"),
    ("- id: a\n  replace: {name: p, config: [1]}\n", "p.yml:2: replace.config must be a mapping"),
    ("- id: a\n  replace: {name: ''}\n", "p.yml:2: 'name' must be a non-empty string"),
    ("- id: a\n  replace: plug\n", "p.yml:2: expected a mapping"),
    ("- replace: {name: p}\n", "p.yml:1: an operation that sets keys needs an 'id'"),
])
def test_malformed_patches_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(PatchError) as info:
        parse(text)
    assert str(info.value).startswith(message)
    assert info.value.exit_code == 2
    assert "\n" not in str(info.value)
