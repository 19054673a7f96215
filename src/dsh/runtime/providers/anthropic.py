"""The ``llm-anthropic`` plugin: an Anthropic Messages endpoint as an ``llm:<route>``.

Two routes ship as presets in ``profiles/bundles/dsh-base/patch.yml``: ``anthropic``
(Anthropic's API, ``ANTHROPIC_API_KEY``, adaptive thinking) and ``deepseek-anthropic``
(DeepSeek's Anthropic-format endpoint ``https://api.deepseek.com/anthropic``,
``DEEPSEEK_API_KEY``, DeepSeek's thinking switch). The key travels in ``x-api-key`` with
``anthropic-version``; the request and event formats are in :mod:`.anthropic_wire`, the
HTTP, key and failure policy every route shares in :mod:`.http_route`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.runtime.kernel.plugin import Capability, EnvVar, Manifest
from dsh.runtime.providers import catalog, pricing
from dsh.runtime.providers.base import EFFORTS, ModelRequest
from dsh.runtime.providers.http_route import (
    COMMON_SCHEMA,
    Decoder,
    HttpProviderPlugin,
    HttpRoute,
    config_schema,
    efforts_refusal,
)

ANTHROPIC_VERSION = "2023-06-01"

THINKING_EFFORTS: Mapping[str, tuple[str, ...]] = {
    # DeepSeek maps every level of its thinking-mode table itself
    "deepseek": EFFORTS,
    # output_config.effort as Anthropic documents it, or thinking disabled
    "adaptive": ("none", "off", "low", "medium", "high", "xhigh", "max"),
    "none": (),
}
"""Thinking styles (:mod:`.anthropic_wire`) and the efforts each can send."""

DEFAULTS: Mapping[str, Any] = {
    "route": "anthropic",
    "default_base_url": "https://api.anthropic.com",
    "base_url_env": "ANTHROPIC_BASE_URL",
    "api_key_env": "ANTHROPIC_API_KEY",
    "default_model": "claude-sonnet-5-5",
    "context_window": 1_000_000,
    "thinking_style": "adaptive",
}
"""Schema defaults that differ per format: a bare row is Anthropic's own API."""

CONFIG_SCHEMA = config_schema(COMMON_SCHEMA, catalog.CONFIG_SCHEMA, pricing.CONFIG_SCHEMA, {
    "route": {"type": "string", "description": "publishes service llm:<route>"},
    "thinking_style": {"type": "string", "enum": list(THINKING_EFFORTS),
                       "description": "how reasoning effort travels "
                                      "(see dsh.runtime.providers.anthropic_wire)"},
    "max_tokens": {"type": "integer", "minimum": 1, "default": 32000,
                   "description": "output limit sent when the client names none "
                                  "(the format requires one)"},
    "anthropic_version": {"type": "string", "default": ANTHROPIC_VERSION},
    "prompt_cache": {"type": "boolean", "default": True,
                     "description": "mark cache breakpoints (system prompt, conversation)"},
}, defaults=DEFAULTS)


class MessagesRoute(HttpRoute):
    """One Messages endpoint (``POST <base>/v1/messages``)."""

    path = "/v1/messages"
    models_path = "/v1/models"

    def __init__(self, config: Mapping[str, Any], *, env: Mapping[str, str], home: str,
                 row_id: str = "llm") -> None:
        self.style: str = config["thinking_style"]
        self.max_tokens: int = config["max_tokens"]
        self._version: str = config["anthropic_version"]
        self._cache: bool = config["prompt_cache"]
        super().__init__(config, env=env, home=home, row_id=row_id)

    def effort_refusal(self, effort: str) -> str | None:
        """Efforts outside what the route's thinking style can send are refused."""
        return efforts_refusal(effort, THINKING_EFFORTS[self.style],
                               f"route '{self.route}' (thinking_style {self.style})")

    def encode(self, request: ModelRequest, model: str) -> bytes:
        """The Messages body (:func:`.anthropic_wire.encode_body`)."""
        from dsh.runtime.providers.anthropic_wire import encode_body

        return encode_body(request, model=model, max_tokens=self.max_tokens,
                           images=self.supports_images_for(request.model), style=self.style,
                           cache=self._cache)

    def decoder(self) -> Decoder:
        """A Messages event decoder."""
        from dsh.runtime.providers.anthropic_wire import EventDecoder

        return EventDecoder(self.redact)

    def auth_headers(self, key: str) -> dict[str, str]:
        """The key header."""
        return {"x-api-key": key}

    def base_headers(self) -> dict[str, str]:
        """The API version every request names."""
        return {"anthropic-version": self._version}


class AnthropicProvider(HttpProviderPlugin):
    """Publishes one Anthropic Messages endpoint as ``llm:<route>``."""

    manifest = Manifest(
        id="llm-anthropic",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="A streaming Anthropic Messages provider (Anthropic's API by default).",
        config_schema=CONFIG_SCHEMA,
        env={
            "ANTHROPIC_API_KEY": EnvVar(secret=True, description="Anthropic API key"),
            "ANTHROPIC_BASE_URL": EnvVar(routing=True, description="Anthropic API base URL"),
        },
    )
    route_class = MessagesRoute
    defaults = DEFAULTS
