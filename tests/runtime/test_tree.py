"""The tree as data: row parsing, diffing and the start plan, on plain values."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.core.errors import ConfigError
from dsh.runtime.kernel.tree import RowSpec, diff_rows, parse_rows, plan_start


def spec(name: str = "m:A", inject: tuple[str, ...] = (), **config: Any) -> RowSpec:
    return RowSpec("x", name, config, inject=inject)


def test_diff_rows_classifies_by_id() -> None:
    assert diff_rows({"x": spec()}, {"x": spec()}).kept == {"x"}
    assert diff_rows({"x": spec(a=1)}, {"x": spec(a=2)}).updated == {"x"}
    assert diff_rows({"x": spec()}, {"x": spec("m:B")}).replaced == {"x"}
    assert diff_rows({"x": spec()}, {"x": spec(inject=("db",))}).replaced == {"x"}
    assert diff_rows({}, {"x": spec()}).added == {"x"}
    assert diff_rows({"x": spec()}, {}).removed == {"x"}


def test_parse_rows_defaults_and_shape() -> None:
    (row,) = parse_rows([{"id": "a", "name": "n"}])
    assert row == RowSpec("a", "n", {}, False, ())
    with pytest.raises(ConfigError, match="row 'a' disabled: expected boolean"):
        parse_rows([{"id": "a", "name": "n", "disabled": "yes"}])
    with pytest.raises(ConfigError, match="row 'a' config: expected object"):
        parse_rows([{"id": "a", "name": "n", "config": [1]}])
    with pytest.raises(ConfigError, match="'name' must be a non-empty string"):
        parse_rows([{"id": "a"}])
    with pytest.raises(ConfigError, match="a row must be a mapping"):
        parse_rows(["a"])


def test_plan_keeps_tree_order_among_independent_rows() -> None:
    plan = plan_start({
        "web": ((), ("agent",)),
        "a": ((), ()),
        "agent": (("agent",), ("llm", "store")),
        "store": (("store",), ()),
        "llm": (("llm",), ()),
    })
    assert plan.order == ("store", "llm", "agent", "web", "a")
    assert plan.deps["agent"] == {"llm", "store"}
    assert plan.dependents({"llm"}) == {"agent", "web"}
    assert plan.dependents({"a"}) == set()


def test_plan_reports_self_dependency_as_a_cycle() -> None:
    with pytest.raises(ConfigError, match="cycle between rows: 'a' -> 'a'"):
        plan_start({"a": (("s",), ("s",))})


def test_plan_cycle_names_the_whole_loop() -> None:
    with pytest.raises(ConfigError, match="'b' -> 'c' -> 'd' -> 'b'"):
        plan_start({"a": ((), ("sb",)), "b": (("sb",), ("sc",)), "c": (("sc",), ("sd",)),
                    "d": (("sd",), ("sb",))})
