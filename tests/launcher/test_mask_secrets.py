"""Tests for :func:`dsh.config.prepare.mask_secrets`: what ``config/get`` and the web app show."""

from __future__ import annotations

from dsh.config.prepare import mask_secrets


def test_literal_secret_values_are_masked_at_any_depth() -> None:
    doc = {"config": {"api_key": "sk-canary", "nested": {"token": "t0k", "password": 7}}}
    assert mask_secrets(doc) == {"config": {"api_key": "***",
                                            "nested": {"token": "***", "password": "***"}}}


def test_authorization_headers_and_cookies_are_masked() -> None:
    doc = {"config": {"extra_headers": {"Authorization": "Bearer sk-canary",
                                        "X-Auth-Token": "t", "Cookie": "session=1",
                                        "Accept": "application/json"}}}
    assert mask_secrets(doc) == {"config": {"extra_headers": {
        "Authorization": "***", "X-Auth-Token": "***", "Cookie": "***",
        "Accept": "application/json"}}}


def test_a_literal_database_dsn_is_masked_its_env_reference_is_not() -> None:
    doc = {"rows": [{"id": "sessions", "config": {"dsn": "postgresql://u:pw@h/db"}},
                    {"id": "other", "config": {"dsn": {"!env": "DSH_POSTGRES_DSN"},
                                               "schema": "dsh"}}]}
    assert mask_secrets(doc) == {"rows": [
        {"id": "sessions", "config": {"dsn": "***"}},
        {"id": "other", "config": {"dsn": {"!env": "DSH_POSTGRES_DSN"}, "schema": "dsh"}}]}


def test_variable_names_tags_and_provenance_stay_visible() -> None:
    doc = {
        "config": {"api_key_env": "DEEPSEEK_API_KEY", "api_key": {"!env": "DEEPSEEK_API_KEY"},
                   "token": ""},
        "provenance": {"config.api_key": "dsh-base:9", "config.api_key_env": "dsh-base:8"},
    }
    assert mask_secrets(doc) == doc


def test_the_input_is_not_mutated() -> None:
    doc = {"config": {"secret": "s"}}
    mask_secrets(doc)
    assert doc == {"config": {"secret": "s"}}


def test_token_counts_are_not_secrets() -> None:
    """``max_output_tokens: 64000`` is a limit, not a token: masking it hid the model facts
    from ``config/get`` (and made the served tree differ from ``--dump-config --json``)."""
    doc = {"config": {"max_tokens": 8192, "model_facts": {"claude-3-haiku*": {
        "max_output_tokens": 4096}}, "budget_tokens": 2048, "api_token": "t0k"}}
    assert mask_secrets(doc) == {"config": {"max_tokens": 8192, "model_facts": {
        "claude-3-haiku*": {"max_output_tokens": 4096}}, "budget_tokens": 2048,
        "api_token": "***"}}
