"""Route data as plain values: price tables and off-peak windows, model catalogs, and the
environment names a route row declares."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from dsh.core.errors import ConfigError
from dsh.runtime.providers.anthropic import AnthropicProvider
from dsh.runtime.providers.base import ModelRequest, ToolSpec, Usage
from dsh.runtime.providers.catalog import ModelCatalog
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
