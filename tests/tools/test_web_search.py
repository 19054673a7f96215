"""``web_search`` against a real SearXNG-style JSON endpoint on 127.0.0.1.

The endpoint is configuration, not model input, so the address guard does not apply to it
and no ``allow_private`` is needed for a local one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of
from localweb import LocalWeb, local_web
from sdksession import session, text_of, web_config

from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.web import WebTools


@pytest.fixture
def web() -> Iterator[LocalWeb]:
    with local_web() as server:
        yield server


def searcher(web: LocalWeb | None, **config: Any) -> Any:
    if web is not None:
        config.setdefault("search_endpoint", web.url + "/search")
    return tools_of(make_plugin(WebTools, **config))["web_search"]


def test_results_are_listed_per_query(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(searcher(web, search_max_results=2), ctx, queries=["alpha", "beta"])
    assert not result.is_error, result.text
    assert result.text == (
        'Results for "alpha":\n'
        "1. alpha result 1\n   https://example.org/alpha/1\n   About alpha, number 1.\n"
        "2. alpha result 2\n   https://example.org/alpha/2\n   About alpha, number 2.\n\n"
        'Results for "beta":\n'
        "1. beta result 1\n   https://example.org/beta/1\n   About beta, number 1.\n"
        "2. beta result 2\n   https://example.org/beta/2\n   About beta, number 2.")
    assert sorted(s.query["q"][0] for s in web.seen) == ["alpha", "beta"]
    assert all(s.query["format"] == ["json"] for s in web.seen)
    assert all("authorization" not in s.headers for s in web.seen)


def test_one_failed_query_is_reported_in_place(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(searcher(web, search_max_results=1), ctx, queries=["fail", "ok", "html"])
    assert not result.is_error
    parts = result.text.split("\n\n")
    assert parts[0] == 'Results for "fail": search failed: HTTP 500 Internal Server Error ' \
                       "from 127.0.0.1"
    assert parts[1].startswith('Results for "ok":\n1. ok result 1')
    assert parts[2].startswith('Results for "html": search failed: 127.0.0.1 did not answer '
                               "JSON")


def test_every_query_failing_is_an_error(ctx: ToolContext, web: LocalWeb) -> None:
    assert run(searcher(web), ctx, queries=["fail"]).is_error
    result = run(searcher(None, search_endpoint=f"http://127.0.0.1:{_closed_port()}/s"), ctx,
                 queries=["x"])
    assert result.is_error and "cannot reach 127.0.0.1" in result.text


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_queries_are_bounded_and_cut(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(searcher(web, search_max_results=1), ctx,
                 queries=[f"q{i}" for i in range(7)] + ["  "])
    assert result.text.endswith("[2 more queries skipped: at most 5 a call]")
    assert len(web.seen) == 5
    result = run(searcher(web, max_chars=30), ctx, queries=["alpha"])
    assert result.text == ('Results for "alpha":\n1. alpha \n'
                           "[cut: showing the first 30 of 395 characters]")
    assert run(searcher(web), ctx, queries=[" "]).is_error


def test_api_key_comes_from_the_named_variable(ctx: ToolContext, web: LocalWeb) -> None:
    tool = searcher(web, search_api_key_env="SEARCH_TEST_KEY")
    ctx.env.pop("SEARCH_TEST_KEY", None)  # type: ignore[attr-defined]
    result = run(tool, ctx, queries=["alpha"])
    assert result.is_error
    assert result.text == ("web_search cannot run: SEARCH_TEST_KEY (config.search_api_key_env "
                           "of row 'row') is not set")
    assert web.seen == []
    ctx.env["SEARCH_TEST_KEY"] = "k-123"  # type: ignore[index]
    assert not run(tool, ctx, queries=["alpha"]).is_error
    assert web.seen[0].headers["authorization"] == "Bearer k-123"


def test_without_an_endpoint_it_says_which_key_to_set(ctx: ToolContext) -> None:
    result = run(searcher(None), ctx, queries=["alpha"])
    assert result.is_error
    assert result.text.startswith("web_search is not configured: set config.search_endpoint "
                                  "on row 'row'")


def test_web_search_in_a_real_session(tmp_path: Path, web: LocalWeb) -> None:
    (tmp_path / "off").mkdir()
    results, ends = session(tmp_path / "off", [
        {"name": "web_search", "arguments": {"queries": ["alpha"]}},
    ], [])
    assert results[0]["isError"] is True
    assert "set config.search_endpoint on row 'tools:web'" in text_of(results[0])
    assert ends[-1]["data"]["reason"]["kind"] == "completed"

    (tmp_path / "on").mkdir()
    results, ends = session(tmp_path / "on", [
        {"name": "web_search", "arguments": {"queries": ["alpha", "fail"]}},
        {"name": "web_search", "arguments": json.dumps({"queries": "not a list"})},
    ], web_config(search_endpoint=web.url + "/search", search_max_results=1))
    assert [m["isError"] for m in results] == [False, True]
    assert text_of(results[0]) == (
        'Results for "alpha":\n1. alpha result 1\n   https://example.org/alpha/1\n'
        '   About alpha, number 1.\n\nResults for "fail": search failed: HTTP 500 Internal '
        "Server Error from 127.0.0.1")
    assert "invalid arguments" in text_of(results[1])
    assert sorted(s.query["q"][0] for s in web.seen) == ["alpha", "fail"]
    assert ends[-1]["data"]["reason"]["kind"] == "completed"
