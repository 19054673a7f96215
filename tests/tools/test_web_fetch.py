"""``web_fetch`` against a real HTTP server on 127.0.0.1, and the address guard.

The server is on loopback, which the guard refuses by default: these tests switch the
guard off (``allow_private: true``) or exempt just 127.0.0.1, through the row's config as
a user would. Two tests drive the tool through a real ``dsh --profile sdk`` session with
the scripted model: one with the guard off (conversion, a redirect loop), one with the
default config, where the guard must refuse loopback before any request is made.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of
from localweb import LocalWeb, local_web
from sdksession import session, text_of, web_config

from dsh.core.errors import ConfigError
from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.netguard import BlockedURLError, check_url, why_blocked
from dsh.runtime.tools.web import WebTools


@pytest.fixture
def web() -> Iterator[LocalWeb]:
    with local_web() as server:
        yield server


def fetcher(**config: Any) -> Any:
    return tools_of(make_plugin(WebTools, **config))["web_fetch"]


OPEN = {"allow_private": True}


# -- the guard -------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "kind"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"),
    ("192.168.0.1", "private"), ("172.16.5.4", "private"), ("169.254.169.254", "link-local"),
    ("fe80::1", "link-local"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("240.0.0.1", "reserved"), ("100.64.0.1", "non-public"),
    ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::a00:1", "private"), ("fc00::1", "private"),
    ("8.8.8.8", None), ("2606:4700:4700::1111", None), ("::ffff:1.1.1.1", None),
])
def test_address_kinds(address: str, kind: str | None) -> None:
    assert why_blocked(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize(("url", "words"), [
    ("http://127.0.0.1:9/", "127.0.0.1 is a loopback address"),
    ("http://localhost:9/x", "localhost (127.0.0.1) is a loopback address"),
    ("http://[::1]/", "::1 is a loopback address"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://10.0.0.1/", "private"),
    ("file:///etc/passwd", "only http and https"),
    ("ftp://example.org/", "only http and https"),
    ("http:///nohost", "no host"),
    ("http://host.invalid/", "cannot resolve host"),
])
def test_guard_refuses(url: str, words: str) -> None:
    with pytest.raises(BlockedURLError) as info:
        asyncio.run(check_url(url, False))
    assert words in str(info.value)


def test_guard_allows_listed_networks_only() -> None:
    allow = (ipaddress.ip_network("127.0.0.1/32"),)
    asyncio.run(check_url("http://127.0.0.1:9/", allow))
    with pytest.raises(BlockedURLError, match=r"127\.0\.0\.2 is a loopback address"):
        asyncio.run(check_url("http://127.0.0.2:9/", allow))
    asyncio.run(check_url("http://10.9.9.9/", True))


def test_guard_refuses_loopback_by_default_before_any_request(ctx: ToolContext,
                                                              web: LocalWeb) -> None:
    result = run(fetcher(), ctx, url=web.url + "/page.html")
    assert result.is_error
    assert "127.0.0.1 is a loopback address" in result.text
    assert "config.allow_private" in result.text
    assert web.seen == []


def test_every_redirect_hop_is_checked(ctx: ToolContext, web: LocalWeb) -> None:
    tool = fetcher(allow_private=["127.0.0.1/32"])
    for target, words in [(f"http://127.0.0.2:{web.port}/page.html", "loopback"),
                          ("http://10.255.255.1/", "private"),
                          ("file:///etc/passwd", "only http and https")]:
        web.seen.clear()
        result = run(tool, ctx, url=f"{web.url}/to?url={target}")
        assert result.is_error, result.text
        assert words in result.text
        assert web.paths() == ["/to"]  # the hop was refused, never requested


# -- fetching --------------------------------------------------------------------------


def test_html_becomes_markdown(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(fetcher(**OPEN), ctx, url=web.url + "/page.html")
    assert not result.is_error, result.text
    head, _, body = result.text.partition("\n\n")
    assert head.splitlines() == [f"URL: {web.url}/page.html",
                                 "Content-Type: text/html (converted to Markdown)",
                                 "Title: The Test Page"]
    assert body.startswith("# Hello web")
    assert "Some **bold** text and a " in body
    assert f"[relative link]({web.url}/docs/next.html)" in body
    assert "- first_item" in body
    assert "inline picture" in body and "base64" not in body
    assert "SCRIPT-BODY" not in body and "color: red" not in body


@pytest.mark.parametrize(("path", "expected"), [
    ("/plain.txt", "Content-Type: text/plain\n\nplain text, caf\u00e9\n"),
    ("/data.json", 'Content-Type: application/json\n\n{"answer": 42}'),
    ("/untyped", "Content-Type: unknown type (converted to Markdown)\n\nsniffed html"),
])
def test_text_passes_through(ctx: ToolContext, web: LocalWeb, path: str,
                             expected: str) -> None:
    result = run(fetcher(**OPEN), ctx, url=web.url + path)
    assert not result.is_error, result.text
    assert result.text.endswith(expected)


@pytest.mark.parametrize(("path", "words"), [
    ("/image.png", "is image/png, not text"),
    ("/untyped-binary", "has no content type and looks binary"),
    ("/missing", "HTTP 404 Not Found from"),
])
def test_refusals(ctx: ToolContext, web: LocalWeb, path: str, words: str) -> None:
    result = run(fetcher(**OPEN), ctx, url=web.url + path)
    assert result.is_error
    assert words in result.text


def test_bounds_cut_with_a_note(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(fetcher(**OPEN, max_bytes=1000), ctx, url=web.url + "/big.txt")
    assert not result.is_error
    assert result.text.endswith("0123456789\n[cut: the response is larger than 1000 bytes; "
                                "only those were read]")
    result = run(fetcher(**OPEN, max_chars=25), ctx, url=web.url + "/big.txt")
    assert result.text.endswith("\n\n0123456789012345678901234\n"
                                "[cut: showing the first 25 of 100000 characters]")


def test_redirects_are_followed_to_a_limit(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(fetcher(**OPEN, max_redirects=3), ctx, url=web.url + "/redirect/2")
    assert not result.is_error, result.text
    assert result.text.startswith(f"URL: {web.url}/page.html\n"
                                  f"Redirected from: {web.url}/redirect/2\n")
    assert web.paths() == ["/redirect/2", "/redirect/1", "/redirect/0", "/page.html"]
    web.seen.clear()
    result = run(fetcher(**OPEN, max_redirects=3), ctx, url=web.url + "/redirect/5")
    assert result.is_error
    assert result.text.startswith("too many redirects (the limit is 3): ")
    assert len(web.seen) == 4


def test_redirect_loop_is_an_error(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(fetcher(**OPEN), ctx, url=web.url + "/loop-a")
    assert result.is_error
    assert result.text == (f"redirect loop: {web.url}/loop-a -> {web.url}/loop-b -> "
                           f"{web.url}/loop-a")


def test_timeout(ctx: ToolContext, web: LocalWeb) -> None:
    result = run(fetcher(**OPEN, timeout_s=0.2), ctx, url=web.url + "/slow")
    assert result.is_error
    assert "timed out" in result.text and "/slow" in result.text


@pytest.mark.parametrize(("config", "field"), [
    ({"allow_private": ["10.0.0.0/8", "not-a-net"]}, "config.allow_private: not an IP "
                                                     "network: 'not-a-net'"),
    ({"search_endpoint": "ftp://search"}, "config.search_endpoint: expected an http"),
])
def test_bad_config_names_row_and_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        tools_of(make_plugin(WebTools, **config))
    assert f"row 'row' {field}" in str(info.value)


# -- through a real session ------------------------------------------------------------


def test_web_fetch_in_a_real_session(tmp_path: Path, web: LocalWeb) -> None:
    results, ends = session(tmp_path, [
        {"name": "web_fetch", "arguments": {"url": web.url + "/page.html"}},
        {"name": "web_fetch", "arguments": {"url": web.url + "/loop-a"}},
        {"name": "web_fetch", "arguments": {"url": web.url + "/plain.txt"}},
    ], web_config(allow_private=True))
    assert [m["isError"] for m in results] == [False, True, False]
    assert "# Hello web" in text_of(results[0])
    assert text_of(results[1]).startswith("redirect loop: ")
    assert text_of(results[2]).endswith("plain text, caf\u00e9\n")
    assert web.paths() == ["/page.html", "/loop-a", "/loop-b", "/plain.txt"]
    assert ends[-1]["data"]["reason"]["kind"] == "completed"


def test_default_session_refuses_loopback(tmp_path: Path, web: LocalWeb) -> None:
    results, ends = session(tmp_path, [
        {"name": "web_fetch", "arguments": {"url": web.url + "/page.html"}},
        {"name": "web_fetch", "arguments": {"url": f"http://localhost:{web.port}/plain.txt"}},
    ], [])
    assert [m["isError"] for m in results] == [True, True]
    assert "127.0.0.1 is a loopback address" in text_of(results[0])
    assert "row 'tools:web' config.allow_private" in text_of(results[0])
    assert "localhost (" in text_of(results[1])
    assert web.seen == []
    assert ends[-1]["data"]["reason"]["kind"] == "completed"
