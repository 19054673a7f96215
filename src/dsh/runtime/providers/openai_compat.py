"""The ``llm-openai-compatible`` plugin: any chat-completions server as an ``llm:<route>``.

A bare row is DeepSeek's API (route ``deepseek-official``, ``DEEPSEEK_API_KEY``,
``DEEPSEEK_BASE_URL``, model ``deepseek-flash`` with a 1M-token window, DeepSeek's
reasoning style); the shipped row (``profiles/bundles/dsh-base/patch.yml``) adds DeepSeek's
catalog: model ids, legacy aliases, retired ids, image input, prices. Any other
chat-completions server (OpenAI's own as ``openai-chat``, OpenRouter, a proxy such as
litellm, vLLM, llama.cpp, Ollama) is another row of the same plugin with its own
``route``, key variable, base URL and ``reasoning_style`` (``auto``: reasoning goes back
the way the server sent it), shipped as presets too.

The wire format lives in :mod:`.openai_wire`, the event-stream framing in :mod:`.sse`,
and the HTTP, key and failure policy every route shares in :mod:`.http_route`.
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

DEFAULT_BASE_URL = "https://api.deepseek.com"

DEFAULTS: Mapping[str, Any] = {
    "route": "deepseek-official",
    "default_base_url": DEFAULT_BASE_URL,
    "base_url_env": "DEEPSEEK_BASE_URL",
    "api_key_env": "DEEPSEEK_API_KEY",
    "default_model": "deepseek-flash",
    "context_window": 1_000_000,
    "reasoning_style": "deepseek",
}
"""Schema defaults that differ per format: a bare row is DeepSeek's official API."""

# reasoning_effort as the OpenAI API's types list it; OpenRouter's reasoning.effort
_REASONING_EFFORTS = ("none", "off", "minimal", "low", "medium", "high", "xhigh", "max")
_OPENROUTER_EFFORTS = ("none", "off", "minimal", "low", "medium", "high", "xhigh")
STYLE_EFFORTS: Mapping[str, tuple[str, ...]] = {
    "deepseek": EFFORTS,
    "auto": _REASONING_EFFORTS,
    "openai": _REASONING_EFFORTS,  # the older name of auto
    "openrouter": _OPENROUTER_EFFORTS,
    "none": (),
}
"""Reasoning styles (:mod:`.openai_wire`) and the efforts each can send; anything else is
refused when a client chooses it."""

CONFIG_SCHEMA = config_schema(COMMON_SCHEMA, catalog.CONFIG_SCHEMA, pricing.CONFIG_SCHEMA, {
    "route": {"type": "string", "description": "publishes service llm:<route>"},
    "reasoning_style": {"type": "string", "enum": list(STYLE_EFFORTS),
                        "description": "how reasoning effort and reasoning content travel "
                                       "(see dsh.runtime.providers.openai_wire)"},
}, defaults=DEFAULTS)


class ChatCompletionsRoute(HttpRoute):
    """One chat-completions endpoint (``POST <base>/chat/completions``)."""

    path = "/chat/completions"

    def __init__(self, config: Mapping[str, Any], *, env: Mapping[str, str], home: str,
                 row_id: str = "llm") -> None:
        self.style: str = config["reasoning_style"]
        self._unknown_fields: set[str] = set()
        super().__init__(config, env=env, home=home, row_id=row_id)

    def form_refusal(self, effort: str, model: str | None) -> str | None:
        """Efforts outside what the route's reasoning style can send are refused."""
        return efforts_refusal(effort, STYLE_EFFORTS[self.style],
                               f"route '{self.route}' (reasoning_style {self.style})")

    def encode(self, request: ModelRequest, model: str) -> bytes:
        """The chat-completions body (:func:`.openai_wire.encode_body`)."""
        # The wire format loads with the first request, like httpx: a boot that never
        # calls this route does not pay for it.
        from dsh.runtime.providers.openai_wire import encode_body

        return encode_body(request, model=model, images=self.supports_images_for(request.model),
                           style=self.style)

    def decoder(self) -> Decoder:
        """A chat-completions chunk decoder."""
        from dsh.runtime.providers.openai_wire import ChunkDecoder

        return ChunkDecoder(self.redact, self._unknown_field)

    def _unknown_field(self, name: str) -> None:
        """A reasoning field of a name nobody documents: kept, never sent back; said once
        per route and name, as every later message would say the same."""
        if name not in self._unknown_fields:
            self._unknown_fields.add(name)
            self.log.warning("route '%s': the server sends reasoning in field '%s', which "
                             "dsh does not know: it is kept and shown, but not sent back "
                             "(a model that needs it back will refuse the conversation)",
                             self.route, name)

    def auth_headers(self, key: str) -> dict[str, str]:
        """The bearer token."""
        return {"Authorization": f"Bearer {key}"}


class OpenAICompatibleProvider(HttpProviderPlugin):
    """Publishes one OpenAI-compatible chat-completions endpoint as ``llm:<route>``."""

    manifest = Manifest(
        id="llm-openai-compatible",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="A streaming OpenAI chat-completions provider (DeepSeek by default).",
        config_schema=CONFIG_SCHEMA,
        env={
            # not required: a profile may carry this row without ever using its route
            "DEEPSEEK_API_KEY": EnvVar(secret=True, description="DeepSeek API key"),
            "DEEPSEEK_BASE_URL": EnvVar(default=DEFAULT_BASE_URL, routing=True,
                                        description="DeepSeek API base URL"),
        },
    )
    route_class = ChatCompletionsRoute
    defaults = DEFAULTS
