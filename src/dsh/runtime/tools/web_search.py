"""The ``web_search`` tool: queries sent to a configured SearXNG-style JSON endpoint.

The endpoint (row config ``search_endpoint``) is asked ``GET <endpoint>?q=<query>&format=json``
and must answer ``{"results": [{"title", "url", "content"}, ...]}``, the shape of SearXNG's
JSON API, which self-hosted and commercial gateways also offer. ``search_api_key_env``
names a variable whose value is sent as ``Authorization: Bearer <key>``. The endpoint is
the user's own configuration, not the model's choice, so the address guard does not apply
to it (a SearXNG on localhost is the usual setup).

Queries of one call run concurrently, each bounded by ``timeout_s`` and ``max_bytes``; a
failed query is reported in place and the call is an error only when every query failed.
Without an endpoint, every call answers an error naming the key to set (see :mod:`.web`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dsh._version import __version__
from dsh.core.redact import redact
from dsh.runtime.tools.base import ToolContext, ToolResult

if TYPE_CHECKING:
    import httpx

    from dsh.runtime.kernel.plugin import Plugin

MAX_QUERIES = 5
"""Queries one call runs; more are skipped with a note."""
SNIPPET_CHARS = 300


class SearchError(Exception):
    """One query failed; the message is written for the model."""


def format_results(query: str, results: Any, limit: int) -> str:
    """One query's results as numbered title / URL / snippet entries."""
    if not isinstance(results, list):
        raise SearchError("the endpoint's answer has no 'results' list")
    entries: list[str] = []
    for item in results:
        if not isinstance(item, Mapping) or not isinstance(item.get("url"), str):
            continue
        title = " ".join(str(item.get("title") or item["url"]).split())
        snippet = " ".join(str(item.get("content") or "").split())
        if len(snippet) > SNIPPET_CHARS:
            snippet = snippet[:SNIPPET_CHARS] + "…"
        entry = f"{len(entries) + 1}. {title}\n   {item['url']}"
        entries.append(entry + (f"\n   {snippet}" if snippet else ""))
        if len(entries) == limit:
            break
    if not entries:
        return f'Results for "{query}": none.'
    return f'Results for "{query}":\n' + "\n".join(entries)


async def search_one(client: httpx.AsyncClient, endpoint: str, query: str, *,
                     limit: int, max_bytes: int, timeout: float) -> str:
    """Ask the endpoint one query within ``timeout`` seconds; raises :class:`SearchError`
    with a message for the model."""
    host = urlsplit(endpoint).hostname or "the endpoint"
    try:
        body = await asyncio.wait_for(_get(client, endpoint, query, host, max_bytes), timeout)
    except asyncio.TimeoutError:
        raise SearchError(f"{host} did not answer within {timeout} s") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise SearchError(f"{host} did not answer JSON (is it a SearXNG-style API with "
                          "format=json enabled?)") from None
    if not isinstance(document, Mapping):
        raise SearchError(f"{host} answered JSON that is not an object")
    return format_results(query, document.get("results"), limit)


async def _get(client: httpx.AsyncClient, endpoint: str, query: str, host: str,
               max_bytes: int) -> bytes:
    """The endpoint's answer body for ``query``, at most ``max_bytes`` of it."""
    import httpx

    try:
        async with client.stream("GET", endpoint,
                                 params={"q": query, "format": "json"}) as response:
            if not response.is_success:
                raise SearchError(f"HTTP {response.status_code} {response.reason_phrase} "
                                  f"from {host}")
            body = bytearray()
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > max_bytes:
                    raise SearchError(f"the answer from {host} is larger than {max_bytes} "
                                      "bytes")
            return bytes(body)
    except httpx.TimeoutException:
        raise SearchError(f"{host} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise SearchError(f"cannot reach {host}: {redact(str(exc)) or type(exc).__name__}") \
            from None


class WebSearch:
    """Searches the web through the configured endpoint."""

    name = "web_search"
    description = (
        "Search the web. Give one or more queries; each returns result titles, URLs and "
        "snippets. Read a result with web_fetch. Works only when a search endpoint is "
        "configured; otherwise it answers an error saying so."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "queries": {"type": "array", "items": {"type": "string"},
                        "description": f"Search queries (at most {MAX_QUERIES} are run)."},
        },
        "required": ["queries"],
        "additionalProperties": False,
    }
    mutating = False

    def __init__(self, plugin: Plugin) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Run up to :data:`MAX_QUERIES` queries and answer their results in order."""
        config, row = self._plugin.config, self._plugin.row_id
        endpoint = config["search_endpoint"]
        if not endpoint:
            return ToolResult(f"web_search is not configured: set config.search_endpoint on "
                              f"row '{row}' to a SearXNG-style JSON search API URL to enable "
                              "it", is_error=True)
        headers = {"User-Agent": f"dsh/{__version__} (web_search)", "Accept": "application/json"}
        key_env = config["search_api_key_env"]
        if key_env:
            key = ctx.env.get(key_env, "").strip()
            if not key:
                return ToolResult(f"web_search cannot run: {key_env} (config.search_api_key_env "
                                  f"of row '{row}') is not set", is_error=True)
            headers["Authorization"] = f"Bearer {key}"
        queries = [q.strip() for q in args["queries"] if q.strip()]
        if not queries:
            return ToolResult("give at least one non-empty query", is_error=True)
        skipped = queries[MAX_QUERIES:]
        queries = queries[:MAX_QUERIES]
        import httpx

        timeout = config["timeout_s"]
        async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(timeout),
                                     headers=headers, follow_redirects=True) as client:
            outcomes = await asyncio.gather(
                *(search_one(client, endpoint, q, limit=config["search_max_results"],
                             max_bytes=config["max_bytes"], timeout=timeout) for q in queries),
                return_exceptions=True)
        parts, failed = [], 0
        for query, outcome in zip(queries, outcomes, strict=True):
            if isinstance(outcome, SearchError):
                failed += 1
                parts.append(f'Results for "{query}": search failed: {outcome}')
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                parts.append(outcome)
        if skipped:
            parts.append(f"[{len(skipped)} more queries skipped: at most {MAX_QUERIES} a call]")
        text = "\n\n".join(parts)
        if len(text) > config["max_chars"]:
            text = (text[:config["max_chars"]] +
                    f"\n[cut: showing the first {config['max_chars']} of {len(text)} characters]")
        return ToolResult(text, is_error=failed == len(queries))
