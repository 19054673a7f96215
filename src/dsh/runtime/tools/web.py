"""The ``tools-web`` plugin: ``web_fetch`` and ``web_search``, sharing one row's config.

The tools live in :mod:`.web_fetch` and :mod:`.web_search`; this module holds the row's
schema and the checks of values the schema subset cannot express. Nothing network-related
is imported here: httpx, the address guard and the HTML converter load on the first call,
so a profile that never fetches never pays for them at boot.

``web_search`` is always registered, even without ``search_endpoint``: it then answers
every call with an error naming the missing key and the row, so the model (and through it
the user) learns how to switch it on, rather than the tool silently not existing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.core.errors import ConfigError
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.tools.web_fetch import WebFetch
from dsh.runtime.tools.web_search import WebSearch

CONFIG_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "allow_private": {
            "type": ["boolean", "array"], "items": {"type": "string"}, "default": False,
            "description": "Let web_fetch reach non-public addresses (loopback, private, "
                           "link-local ...): true for all, or a list of networks such as "
                           "['10.1.0.0/16'] for just those."},
        "timeout_s": {"type": "number", "minimum": 0.001, "default": 30,
                      "description": "Longest one web_fetch (all redirects) or one search "
                                     "query may take."},
        "max_bytes": {"type": "integer", "minimum": 1, "default": 2 * 1024 * 1024,
                      "description": "Most bytes of a response body read; the rest is "
                                     "never downloaded."},
        "max_chars": {"type": "integer", "minimum": 1, "default": 50000,
                      "description": "Most characters one call returns to the model."},
        "max_redirects": {"type": "integer", "minimum": 0, "maximum": 20, "default": 5,
                          "description": "Redirects web_fetch follows (each hop is checked "
                                         "by the address guard)."},
        "search_endpoint": {
            "type": ["string", "null"], "default": None,
            "description": "A SearXNG-style JSON search API (GET ?q=...&format=json "
                           "answering {results: [{title, url, content}]}); unset, "
                           "web_search answers an error saying so."},
        "search_api_key_env": {
            "type": ["string", "null"], "default": None,
            "description": "NAME of the variable whose value is sent as "
                           "'Authorization: Bearer <key>' to the search endpoint."},
        "search_max_results": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5,
                               "description": "Results shown per query."},
    },
    "additionalProperties": False,
}


def check_config(row_id: str, config: Mapping[str, Any]) -> None:
    """Refuse what the schema cannot: networks that do not parse, an endpoint that is not
    an http(s) URL. Raises ConfigError naming row and field."""
    allow = config["allow_private"]
    if isinstance(allow, list):
        from dsh.runtime.tools.netguard import parse_networks

        try:
            parse_networks(allow)
        except ValueError as exc:
            raise ConfigError(f"row '{row_id}' config.allow_private: {exc}") from None
    endpoint = config["search_endpoint"]
    if endpoint is not None and not endpoint.lower().startswith(("http://", "https://")):
        raise ConfigError(f"row '{row_id}' config.search_endpoint: expected an http:// or "
                          "https:// URL")


class WebTools(Plugin):
    """Plugin row ``tools-web``: registers :class:`WebFetch` and :class:`WebSearch`."""

    manifest = Manifest(
        id="tools-web",
        version=__version__,
        capabilities=frozenset({Capability.TOOL}),
        description="web_fetch (a URL as text or Markdown, public addresses only unless "
                    "allowed) and web_search (through a configured search endpoint).",
        config_schema=CONFIG_SCHEMA,
    )

    def apply(self, reg: Registrar) -> None:
        """Check the config and register both tools; they read the current config per call."""
        check_config(self.row_id, self.config)
        reg.tool(WebFetch(self))
        reg.tool(WebSearch(self))

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New limits and endpoint apply to the next call."""
        check_config(self.row_id, config)
        self.config = config
        return True
