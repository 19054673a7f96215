"""The ``llm-openai-compatible`` plugin: any chat-completions server as an ``llm:<route>``.

DeepSeek is the default (route ``deepseek-official``, ``DEEPSEEK_API_KEY``,
``DEEPSEEK_BASE_URL``, model ``deepseek-flash`` with its 1M-token window and image
input, thinking on). OpenAI, OpenRouter and local servers (Ollama, vLLM, llama.cpp) are
other rows of the same plugin with their own ``route``, key variable, base URL and
``reasoning_style``; ``profiles/bundles/dsh-base/patch.yml`` ships them as presets.

The wire format lives in :mod:`.openai_wire`, the event-stream framing in :mod:`.sse`,
and the HTTP, key and failure policy every route shares in :mod:`.http_route`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh._version import __version__

from dsh_runtime.plugin import Capability, EnvVar, Manifest, Plugin, Registrar, RuntimeContext
from dsh_runtime.providers import catalog, pricing
from dsh_runtime.providers.base import EFFORTS, ModelRequest
from dsh_runtime.providers.http_route import (
    COMMON_SCHEMA,
    Decoder,
    HttpRoute,
    config_schema,
    efforts_refusal,
    route_env,
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

_OPENAI_EFFORTS = ("none", "off", "minimal", "low", "medium", "high", "xhigh")
STYLE_EFFORTS: Mapping[str, tuple[str, ...]] = {
    "deepseek": EFFORTS,
    "openai": _OPENAI_EFFORTS,
    "openrouter": _OPENAI_EFFORTS,
    "none": (),
}
"""Reasoning styles (:mod:`.openai_wire`) and the efforts each can send; anything else is
refused when a client chooses it."""

CONFIG_SCHEMA = config_schema(COMMON_SCHEMA, catalog.CONFIG_SCHEMA, pricing.CONFIG_SCHEMA, {
    "route": {"type": "string", "description": "publishes service llm:<route>"},
    "reasoning_style": {"type": "string", "enum": list(STYLE_EFFORTS),
                        "description": "how reasoning effort and reasoning content travel "
                                       "(see dsh_runtime.providers.openai_wire)"},
}, defaults=DEFAULTS)


class ChatCompletionsRoute(HttpRoute):
    """One chat-completions endpoint (``POST <base>/chat/completions``)."""

    path = "/chat/completions"

    def __init__(self, config: Mapping[str, Any], *, env: Mapping[str, str], home: str,
                 row_id: str = "llm") -> None:
        self.style: str = config["reasoning_style"]
        super().__init__(config, env=env, home=home, row_id=row_id)

    def effort_refusal(self, effort: str) -> str | None:
        """Efforts outside what the route's reasoning style can send are refused."""
        return efforts_refusal(effort, STYLE_EFFORTS[self.style],
                               f"route '{self.route}' (reasoning_style {self.style})")

    def encode(self, request: ModelRequest, model: str) -> bytes:
        """The chat-completions body (:func:`.openai_wire.encode_body`)."""
        # The wire format loads with the first request, like httpx: a boot that never
        # calls this route does not pay for it.
        from dsh_runtime.providers.openai_wire import encode_body

        return encode_body(request, model=model, images=self.supports_images_for(request.model),
                           style=self.style)

    def decoder(self) -> Decoder:
        """A chat-completions chunk decoder."""
        from dsh_runtime.providers.openai_wire import ChunkDecoder

        return ChunkDecoder(self.redact)

    def auth_headers(self, key: str) -> dict[str, str]:
        """The bearer token."""
        return {"Authorization": f"Bearer {key}"}


class OpenAICompatibleProvider(Plugin):
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

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._provider: ChatCompletionsRoute | None = None

    @classmethod
    def env_for(cls, config: Mapping[str, Any]) -> Mapping[str, EnvVar]:
        """The key and base-URL variables this row's route reads (see ``route_env``)."""
        return route_env(config, DEFAULTS).as_env(
            f"route '{config.get('route', DEFAULTS['route'])}'")

    @property
    def service_name(self) -> str:
        """``llm:<route>``, the service this row publishes."""
        return f"llm:{self.config['route']}"

    def apply(self, reg: Registrar) -> None:
        """Declare the route's service; nothing connects until a request is made."""
        reg.service(self.service_name)

    async def start(self, rt: RuntimeContext) -> None:
        """Publish the route (no connection yet: a missing key only matters when used)."""
        self._provider = ChatCompletionsRoute(self.config, env=rt.env, home=rt.home,
                                              row_id=self.row_id)
        rt.publish(self.service_name, self._provider)

    async def dispose(self) -> None:
        """Close the route's connection pool."""
        if self._provider is not None:
            provider, self._provider = self._provider, None
            await provider.aclose()
