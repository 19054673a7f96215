"""``dsh.core.redact``: credentials inside URLs masked, everything else left as it was."""

from __future__ import annotations

import copy
import pickle

import pytest

from dsh.core.redact import EnvValue, redact, shown, withheld


@pytest.mark.parametrize(("text", "expected"), [
    ("cannot reach https://user:pa:ss@api.example.com/v1 (refused)",
     "cannot reach https://***@api.example.com/v1 (refused)"),
    ("git clone https://ghp_abcdef@github.com/o/r.git", "git clone https://***@github.com/o/r.git"),
    ("postgres://u:p@db:5432/x?sslmode=require&password=zzz",
     "postgres://***@db:5432/x?sslmode=require&password=***"),
    ("GET /?token=abc123 HTTP/1.1", "GET /?token=*** HTTP/1.1"),
    ("https://h/x?page=2&api_key=SECRET&q=1", "https://h/x?page=2&api_key=***&q=1"),
    ("https://h/x?X-Amz-Signature=abc&X-Amz-Credential=def#top",
     "https://h/x?X-Amz-Signature=***&X-Amz-Credential=***#top"),
    ("'https://h/?access_token=t1' and \"https://h/?key=k2\"",
     "'https://h/?access_token=***' and \"https://h/?key=***\""),
])
def test_credentials_in_urls_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "mail me at a@b.com", "a=b c=d", "https://h/?keyword=search&page=2",
    "https://example.com/path@v2", "plain text", "x?y=1",
])
def test_other_text_is_untouched(text: str) -> None:
    assert redact(text) == text


def test_an_env_value_is_its_value_but_diagnostics_name_its_variable() -> None:
    value = EnvValue("sk-not-a-route", "ROUTE")
    assert value == "sk-not-a-route" and isinstance(value, str)
    assert "sk-not" not in repr(value) and "ROUTE" in repr(value)
    assert shown(value) == "the value of !env ROUTE"
    assert shown("scripted") == "'scripted'"
    assert withheld("unknown route 'sk-not-a-route'", value, None) == (
        "unknown route '<!env ROUTE>'")
    for twin in (copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert type(twin) is EnvValue and twin == value and twin.name == "ROUTE"
