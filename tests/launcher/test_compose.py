"""Tests for :mod:`dsh.config.compose`: layers applied in order, with provenance per key."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from dsh.config.compose import ComposedTree, compose
from dsh.config.patchfile import PatchLayer, parse_layer

BASE = """\
- insert:
    - id: agent
      name: agent-core
      config:
        route: official
        limits: {steps: 50, tokens: 1000}
    - id: tools
      group: true
      config:
        - id: shell
          name: tool-shell
        - id: files
          name: tool-files
          config: {root: .}
    - id: policy
      name: guardrail-policy
"""


def layer(text: str, source: str, kind: str = "patch", path: Path | None = None) -> PatchLayer:
    """A parsed layer from dedented text, labelled ``source``."""
    return parse_layer(textwrap.dedent(text), path=path, kind=kind, source=source)


def tree(*texts: str) -> ComposedTree:
    """Compose ``BASE`` (as bundle ``base``) and then each text as ``p1``, ``p2``, ..."""
    layers = [layer(BASE, "base", "bundle")]
    layers += [layer(text, f"p{i}") for i, text in enumerate(texts, 1)]
    return compose(layers)


def rows_by_id(composed: ComposedTree) -> dict[str, dict[str, Any]]:
    """Every row's JSON (children included) by full id."""
    out: dict[str, dict[str, Any]] = {}

    def visit(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            out[row["id"]] = row
            if row.get("group"):
                visit(row["config"])

    visit(composed.to_json("t", "live")["rows"])
    return out


def flat(composed: ComposedTree, env: dict[str, str] | None = None,
         home: Path = Path("/h")) -> dict[str, dict[str, Any]]:
    """The kernel's flat rows by id."""
    return {row["id"]: row for row in composed.flat_rows(env or {}, home)}


def test_base_tree_shape_and_provenance() -> None:
    rows = rows_by_id(tree())
    assert list(rows) == ["agent", "tools", "tools:shell", "tools:files", "policy"]
    assert rows["agent"]["provenance"] == {
        "name": "base:3", "config": "base:4", "config.route": "base:5", "config.limits": "base:6",
    }
    assert rows["tools"]["provenance"] == {"group": "base:8", "config": "base:9"}
    assert rows["tools:files"]["config"] == {"root": "."}
    assert rows["tools:files"]["provenance"] == {
        "name": "base:13", "config": "base:14", "config.root": "base:14",
    }
    assert [r["id"] for r in tree().to_json("t", "live")["rows"]] == ["agent", "tools", "policy"]


def test_assignment_replaces_config_whole_and_drops_stale_provenance() -> None:
    rows = rows_by_id(tree("""\
        - id: agent
          config:
            route: mine
        """))
    assert rows["agent"]["config"] == {"route": "mine"}
    assert rows["agent"]["provenance"] == {
        "name": "base:3", "config": "p1:2", "config.route": "p1:3",
    }


def test_merge_deep_merges_and_records_provenance() -> None:
    rows = rows_by_id(tree("""\
        - id: agent
          merge:
            config:
              limits: {steps: 7}
              extra: {on: true}
        """))
    assert rows["agent"]["config"] == {
        "route": "official", "limits": {"steps": 7, "tokens": 1000}, "extra": {"on": True},
    }
    assert rows["agent"]["provenance"] == {
        "name": "base:3",
        "config": "p1:3",
        "config.route": "base:5",
        "config.limits": "p1:4",
        "config.limits.steps": "p1:4",
        "config.extra": "p1:5",
    }


def test_merge_replacing_a_subtree_drops_its_stale_provenance() -> None:
    composed = tree("""\
        - id: agent
          merge:
            config:
              limits:
                steps: 7
        - id: agent
          merge:
            config:
              limits: none
        """)
    agent = rows_by_id(composed)["agent"]
    assert agent["config"]["limits"] == "none"
    assert agent["provenance"]["config.limits"] == "p1:9"
    assert "config.limits.steps" not in agent["provenance"]


def test_merge_into_a_row_without_config() -> None:
    rows = rows_by_id(tree("- id: policy\n  merge: {config: {mode: strict}}\n"))
    assert rows["policy"]["config"] == {"mode": "strict"}
    assert rows["policy"]["provenance"]["config.mode"] == "p1:2"


def test_name_guard_mismatch_skips_with_warning() -> None:
    composed = tree("""\
        - id: agent
          name: other-plugin
          config: {route: mine}
        - id: agent
          name: agent-core
          disabled: true
        """)
    rows = rows_by_id(composed)
    assert rows["agent"]["config"]["route"] == "official"
    assert rows["agent"]["disabled"] is True
    assert rows["agent"]["name"] == "agent-core"
    assert composed.warnings == (
        "p1:1: row 'agent' is 'agent-core', not 'other-plugin'; operation skipped",
    )


def test_replace_gives_a_row_another_plugin_keeping_its_id_place_and_inject() -> None:
    composed = tree("""\
        - id: agent
          inject: [sessions]
        - id: agent
          replace:
            name: other-agent
            config: {dsn: !env DSN}
        - id: agent
          merge: {config: {extra: 1}}
        """)
    assert composed.warnings == ()
    rows = rows_by_id(composed)
    assert list(rows) == ["agent", "tools", "tools:shell", "tools:files", "policy"]
    assert rows["agent"]["name"] == "other-agent"
    assert rows["agent"]["config"] == {"dsn": {"!env": "DSN"}, "extra": 1}  # none carried over
    assert rows["agent"]["inject"] == ["sessions"]
    assert rows["agent"]["provenance"] == {
        "name": "p1:5", "config": "p1:8", "config.dsn": "p1:6", "inject": "p1:2",
        "config.extra": "p1:8",
    }
    assert flat(composed, {"DSN": "x"})["agent"]["config"] == {"dsn": "x", "extra": 1}


def test_replace_obeys_a_guard_and_refuses_groups() -> None:
    composed = tree("""\
        - id: agent
          name: agent-core
          replace: {name: first-swap, disabled: true}
        - id: agent
          name: agent-core
          replace: {name: second-swap}
        - id: tools
          replace: {name: nothing}
        """)
    rows = rows_by_id(composed)
    assert (rows["agent"]["name"], rows["agent"]["disabled"]) == ("first-swap", True)
    assert rows["agent"]["config"] == {}
    assert composed.warnings == (
        "p1:4: row 'agent' is 'first-swap', not 'agent-core'; operation skipped",
        "p1:8: group 'tools' runs no plugin to replace; operation skipped",
    )


def test_unknown_id_warns_and_changes_nothing() -> None:
    composed = tree("- id: ghost\n  disabled: true\n")
    assert composed.warnings == ("p1:1: unknown row id 'ghost'",)
    assert composed.to_json("t", "live")["rows"] == tree().to_json("t", "live")["rows"]


def test_nested_ids_target_children() -> None:
    rows = rows_by_id(tree("- id: tools:files\n  config: {root: /srv}\n"))
    assert rows["tools:files"]["config"] == {"root": "/srv"}
    assert rows["tools:files"]["provenance"]["config.root"] == "p1:2"


def test_insert_into_group_and_into_non_group() -> None:
    composed = tree("""\
        - id: tools
          insert:
            - {id: web, name: tool-web}
        - id: agent
          insert:
            - {id: x, name: y}
        """)
    rows = rows_by_id(composed)
    assert [c["id"] for c in rows["tools"]["config"]] == ["tools:shell", "tools:files", "tools:web"]
    assert rows["tools:web"]["provenance"] == {"name": "p1:3"}
    assert composed.warnings == ("p1:4: row 'agent' is not a group; insert skipped",)


def test_group_config_assignment_replaces_children() -> None:
    composed = tree("""\
        - id: tools
          config:
            - {id: only, name: tool-only}
        - id: tools:shell
          disabled: true
        """)
    rows = rows_by_id(composed)
    assert [c["id"] for c in rows["tools"]["config"]] == ["tools:only"]
    assert composed.warnings == ("p1:4: unknown row id 'tools:shell'",)


def test_reinsert_replaces_in_place_with_warning() -> None:
    composed = tree("- insert:\n    - {id: agent, name: agent-two}\n")
    rows = composed.to_json("t", "live")["rows"]
    assert [r["id"] for r in rows] == ["agent", "tools", "policy"]
    assert rows[0] == {"id": "agent", "name": "agent-two", "provenance": {"name": "p1:2"}}
    assert composed.warnings == ("p1:2: row 'agent' inserted again; the new row replaces it "
                                 "in place",)


def test_group_flag_cannot_change() -> None:
    composed = tree("- id: agent\n  group: true\n")
    assert "group" not in rows_by_id(composed)["agent"]
    assert composed.warnings == ("p1:2: cannot change whether row 'agent' is a group",)


def test_disabled_group_disables_children_in_flat_rows() -> None:
    composed = tree("- id: tools\n  disabled: true\n")
    rows = flat(composed)
    assert list(rows) == ["agent", "tools:shell", "tools:files", "policy"]
    assert rows["tools:shell"]["disabled"] is True
    assert rows["tools:files"]["disabled"] is True
    assert rows["agent"]["disabled"] is False
    walked = {row.id: off for row, off in composed.walk()}
    assert walked == {"agent": False, "tools": True, "tools:shell": True,
                      "tools:files": True, "policy": False}


def test_disabled_false_switches_back_on_last_write_wins() -> None:
    composed = compose([layer(BASE, "base", "bundle"),
                        layer("- id: tools\n  disabled: true\n", "p1"),
                        layer("- id: tools\n  disabled: false\n", "p2")])
    assert flat(composed)["tools:shell"]["disabled"] is False
    assert rows_by_id(composed)["tools"]["provenance"]["disabled"] == "p2:2"


def test_flat_rows_shape() -> None:
    rows = flat(tree("- id: policy\n  inject: [sessions]\n"))
    assert rows["policy"] == {"id": "policy", "name": "guardrail-policy", "config": {},
                              "disabled": False, "inject": ["sessions"]}
    assert rows["agent"]["config"] == {"route": "official",
                                       "limits": {"steps": 50, "tokens": 1000}}


def test_tags_dump_as_references_and_resolve_in_flat_rows(tmp_path: Path) -> None:
    patch_file = tmp_path / "patches" / "p.yml"
    patch_file.parent.mkdir()
    tagged = layer("""\
        - id: agent
          config:
            key: !env API_KEY
            unset: !env NOPE
            port: !env [PORT, 8080]
            port_set: !env [PORT_SET, 1]
            db: !home sessions.db
            data: !path data/x.json
            list: [!env API_KEY, plain]
        """, str(patch_file), path=patch_file)
    composed = compose([layer(BASE, "base", "bundle"), tagged])
    config = rows_by_id(composed)["agent"]["config"]
    data_path = str(tmp_path / "patches" / "data" / "x.json")
    assert config == {
        "key": {"!env": "API_KEY"},
        "unset": {"!env": "NOPE"},
        "port": {"!env": ["PORT", "8080"]},
        "port_set": {"!env": ["PORT_SET", "1"]},
        "db": {"!home": "sessions.db"},
        "data": {"!path": data_path},
        "list": [{"!env": "API_KEY"}, "plain"],
    }
    home = tmp_path / "home"
    resolved = flat(composed, {"API_KEY": "sk-1", "PORT_SET": "9"}, home)["agent"]["config"]
    assert resolved == {
        "key": "sk-1",
        "unset": None,
        "port": "8080",
        "port_set": "9",
        "db": str(home / "sessions.db"),
        "data": data_path,
        "list": ["sk-1", "plain"],
    }


def test_layers_are_listed_in_order() -> None:
    composed = tree("[]\n", "[]\n")
    assert composed.to_json("sdk", "startup")["layers"] == [
        {"kind": "bundle", "source": "base"},
        {"kind": "patch", "source": "p1"},
        {"kind": "patch", "source": "p2"},
    ]
    document = composed.to_json("sdk", "startup")
    assert (document["profile"], document["patchReload"], document["warnings"]) == (
        "sdk", "startup", [])


def test_wrong_config_shapes_warn_and_skip() -> None:
    composed = tree("""\
        - id: tools
          config: {a: 1}
        - id: agent
          config:
            - {id: x, name: y}
        - id: tools
          merge: {config: {a: 1}}
        """)
    assert composed.warnings == (
        "p1:2: group 'tools' config must be a list of rows; assignment skipped",
        "p1:4: row 'agent' config must be a mapping; assignment skipped",
        "p1:7: cannot merge into the children of group 'tools'; use insert",
    )
    assert composed.to_json("t", "live")["rows"] == tree().to_json("t", "live")["rows"]
