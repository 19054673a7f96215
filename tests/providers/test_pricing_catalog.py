"""Route data as plain values: price tables and off-peak windows, model catalogs, and the
environment names a route row declares."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest

from dsh.core.errors import ConfigError
from dsh.runtime.providers.anthropic import AnthropicProvider
from dsh.runtime.providers.base import ModelRequest, ToolSpec, Usage
from dsh.runtime.providers.catalog import ModelCatalog, ModelFacts, best_match, matches
from dsh.runtime.providers.http_route import _url_problem, route_env
from dsh.runtime.providers.openai_compat import OpenAICompatibleProvider
from dsh.runtime.providers.pricing import PriceTable, estimated

FLASH = {"input_cache_hit": 0.006, "input_cache_miss": 0.30, "output": 1.20,
         "off_peak": {"input_cache_hit": 0.003, "input_cache_miss": 0.15, "output": 0.60}}
UTC = dt.timezone.utc
TUESDAY_PEAK = dt.datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
TUESDAY_NIGHT = dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SATURDAY_PEAK_HOUR = dt.datetime(2026, 12, 5, 2, 30, tzinfo=UTC)


def test_cost_splits_cache_hits_misses_and_output() -> None:
    table = PriceTable({"deepseek-flash": FLASH}, ["01:00-04:00", "06:00-10:00"])
    usage = Usage(1_000_000, 100_000, cache_hit_tokens=800_000, reasoning_tokens=40_000)
    # 800k hits at 0.006, 200k misses at 0.30, 100k output at 1.20 (reasoning included)
    assert table.cost("deepseek-flash", usage, TUESDAY_PEAK) == pytest.approx(
        0.0048 + 0.06 + 0.12)
    assert table.cost("deepseek-flash", usage, TUESDAY_NIGHT) == pytest.approx(
        0.0024 + 0.03 + 0.06)
    assert table.cost("deepseek-flash", usage, SATURDAY_PEAK_HOUR) == pytest.approx(
        0.0024 + 0.03 + 0.06)
    assert table.cost("other-model", usage, TUESDAY_PEAK) is None


def test_without_cache_figures_all_input_is_a_miss_and_writes_cost_as_misses() -> None:
    table = PriceTable({"m": {"input_cache_miss": 2.0, "output": 4.0}})
    assert table.cost("m", Usage(500_000, 0), TUESDAY_NIGHT) == pytest.approx(1.0)
    written = Usage(1_000_000, 0, cache_hit_tokens=0, cache_write_tokens=1_000_000)
    assert written.cache_miss_tokens == 0
    assert table.cost("m", written, TUESDAY_NIGHT) == pytest.approx(2.0)
    priced = table.priced("m", Usage(1_000_000, 1_000_000))
    assert priced.cost_usd == pytest.approx(6.0)  # no windows: always the one price


@pytest.mark.parametrize("window", ["1-4", "04:00-01:00", "25:00-26:00", "01:00-24:30"])
def test_bad_peak_windows_are_config_errors(window: str) -> None:
    with pytest.raises(ConfigError, match=r"row .llm. config\.peak_hours_utc"):
        PriceTable({}, [window], row_id="llm")


def test_estimate_counts_text_reasoning_calls_and_tools() -> None:
    request = ModelRequest("s", "m", (
        {"role": "user", "content": [{"type": "text", "text": "x" * 40}]},
        {"role": "assistant", "content": [{"type": "reasoning", "text": "y" * 8},
                                          {"type": "tool-call", "id": "c", "name": "ab",
                                           "arguments": "{}"}]}),
        tools=(ToolSpec("t", "d", {}),))
    usage = estimated(request, output_chars=9)
    assert usage.estimated and usage.output_tokens == 3
    assert usage.input_tokens == -(-(40 + 8 + 2 + 2 + 1 + 1 + 2) // 4)


def test_catalog_aliases_retired_and_text_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dsh.providers")
    catalog = ModelCatalog("deepseek-official", default_model="deepseek-flash",
                           models=["deepseek-flash", "deepseek-v4-pro"],
                           aliases={"deepseek-v4-flash": "deepseek-flash"},
                           retired={"deepseek-chat": "retired; use deepseek-flash"},
                           images=True, text_only=["deepseek-v4-pro"])
    assert catalog.refusal("deepseek-flash") is None
    assert catalog.refusal("deepseek-v4-flash") is None
    assert "retired; use deepseek-flash" in catalog.refusal("deepseek-chat")
    assert "unknown model 'gpt-5'" in catalog.refusal("gpt-5")
    assert catalog.wire_id("deepseek-v4-flash") == "deepseek-flash"
    assert catalog.wire_id("deepseek-v4-flash") == "deepseek-flash"
    assert len(caplog.records) == 1  # said once per process
    assert catalog.images("deepseek-v4-flash") and not catalog.images("deepseek-v4-pro")
    anything = ModelCatalog("local", default_model="qwen3")
    assert anything.accepts("whatever") and not anything.images("whatever")


def test_route_rows_declare_the_names_they_read() -> None:
    """What the trust rules read without starting anything: secret and routing names."""
    shipped = OpenAICompatibleProvider.env_for({"route": "deepseek-official"})
    assert shipped["DEEPSEEK_API_KEY"].secret and not shipped["DEEPSEEK_API_KEY"].routing
    assert shipped["DEEPSEEK_BASE_URL"].routing and not shipped["DEEPSEEK_BASE_URL"].secret
    openai = OpenAICompatibleProvider.env_for({"api_key_env": "OPENAI_API_KEY",
                                               "base_url_env": "OPENAI_BASE_URL"})
    assert set(openai) == {"OPENAI_API_KEY", "OPENAI_BASE_URL"}
    keyless = OpenAICompatibleProvider.env_for({"api_key_env": None,
                                                "base_url_env": "LOCAL_LLM_BASE_URL"})
    assert set(keyless) == {"LOCAL_LLM_BASE_URL"}
    fixed = OpenAICompatibleProvider.env_for({"base_url": "https://x", "api_key": "sk-lit"})
    assert fixed == {}  # a literal key and a fixed URL read no variable
    assert set(AnthropicProvider.env_for({})) == {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"}
    untagged = route_env({"api_key_env": {"!env": "X"}}, {"api_key_env": "DEFAULT_KEY"})
    assert untagged.secret == ()  # not a name: nothing is guessed


@pytest.mark.parametrize(("url", "problem"), [
    ("https://api.deepseek.com", None),
    ("http://127.0.0.1:11434/v1", None),
    ("ftp://example.com", "must be an http(s) URL"),
    ("api.deepseek.com", "must be an http(s) URL"),
    ("https://user:secret@example.com", "must not carry credentials"),
])
def test_base_urls_must_be_http(url: str, problem: str | None) -> None:
    found = _url_problem(url, "DEEPSEEK_BASE_URL")
    assert (found is None) if problem is None else (problem in found)
    if found is not None:
        assert "secret" not in found and "DEEPSEEK_BASE_URL" in found


def test_model_facts_come_from_the_most_specific_entry_that_sets_each(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dsh.providers")
    catalog = ModelCatalog("anthropic", default_model="claude-opus-4-7", facts={
        "claude-opus-4*": {"thinking": ["enabled"], "context_window": 200_000,
                           "max_output_tokens": 32_000},
        "claude-opus-4-[7-9]*": {"thinking": ["adaptive"], "context_window": 1_000_000},
        "claude-opus-4-7-fast": {"max_output_tokens": 8_000},
    }, aliases={"opus": "claude-opus-4-7-fast"})
    fast = catalog.facts("opus")  # an alias: the served model's facts
    assert (fast.thinking, fast.context_window, fast.max_output_tokens) == (
        ("adaptive",), 1_000_000, 8_000)
    older = catalog.facts("claude-opus-4-1")
    assert (older.thinking, older.context_window) == (("enabled",), 200_000)
    assert older.matched and older.efforts is None  # unset: the route's efforts apply
    assert caplog.records == []
    for _ in range(3):
        assert catalog.facts("claude-nova-1") == ModelFacts()  # the route's defaults
    assert len(caplog.records) == 1 and "claude-nova-1" in caplog.records[0].getMessage()
    assert ModelCatalog("local", default_model="m").facts("x") == ModelFacts()
    assert len(caplog.records) == 1  # a route without facts has nothing to say


def test_matching_never_depends_on_the_order_keys_were_added() -> None:
    keys = ["claude-*", "claude-sonnet-4*", "claude-sonnet-4-6*", "claude-sonnet-4-6"]
    assert matches("claude-sonnet-4-6", keys) == [
        "claude-sonnet-4-6", "claude-sonnet-4-6*", "claude-sonnet-4*", "claude-*"]
    assert matches("claude-sonnet-4-6", list(reversed(keys))) == matches(
        "claude-sonnet-4-6", keys)
    assert best_match("gpt-5.5-pro", ["gpt-5.5", "gpt-5.5*", "gpt-5.5-pro"]) == "gpt-5.5-pro"
    assert best_match("gpt-4o", ["gpt-5*"]) is None


def test_prices_by_pattern_exact_ids_first() -> None:
    table = PriceTable({"claude-opus-4*": {"input_cache_miss": 15, "output": 75},
                        "claude-opus-4-[5-9]*": {"input_cache_miss": 5, "output": 25,
                                                 "input_cache_hit": 0.5, "cache_write": 6.25},
                        "claude-opus-4-6-special": {"input_cache_miss": 1, "output": 1}})
    usage = Usage(1_000_000, 1_000_000, cache_hit_tokens=500_000, cache_write_tokens=250_000)
    assert table.cost("claude-opus-4-1", usage, TUESDAY_NIGHT) == pytest.approx(15 + 75)
    # 500k reads at 0.5, 250k writes at 6.25, 250k misses at 5, 1M output at 25
    assert table.cost("claude-opus-4-7", usage, TUESDAY_NIGHT) == pytest.approx(
        0.25 + 1.5625 + 1.25 + 25)
    assert table.cost("claude-opus-4-6-special", usage, TUESDAY_NIGHT) == pytest.approx(2)
    assert table.cost("claude-sonnet-4-6", usage, TUESDAY_NIGHT) is None


def test_the_shipped_claude_facts_give_each_family_its_thinking_form(run_dsh: Any) -> None:
    """The dsh-base anthropic row, as composed: the forms Anthropic documents per family."""
    import json

    from dsh.runtime.kernel.schema import validate

    dump = json.loads(run_dsh("--profile", "sdk", "--dump-config", "--json").stdout)
    row = next(r for r in dump["rows"] if r["id"] == "llm-anthropic")
    config = validate(AnthropicProvider.manifest.config_schema, row["config"], row_id="x")
    route = AnthropicProvider.route_for(config, env={}, home="/", row_id="x")
    forms = {model: route.thinking_form(model) for model in (
        "claude-3-7-sonnet-20250219", "claude-sonnet-4-20250514", "claude-opus-4-1",
        "claude-sonnet-4-5", "claude-opus-4-5-20251101", "claude-haiku-4-5",
        "claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7", "claude-opus-4-8",
        "claude-sonnet-5-5", "claude-opus-5", "claude-fable-5", "claude-mythos-5")}
    assert [m for m, f in forms.items() if f == "enabled"] == list(forms)[:6]
    assert [m for m, f in forms.items() if f == "adaptive"] == list(forms)[6:]
    always = [m for m in forms if route.effort_refusal("none", m) is not None]
    assert always == ["claude-fable-5", "claude-mythos-5"]
    priced = [m for m in forms if route.prices.price(m, TUESDAY_NIGHT) is None]
    assert priced == []  # every family has a price
