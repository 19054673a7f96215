"""The ``llm-openai-responses`` plugin: an OpenAI Responses endpoint as an ``llm:<route>``.

OpenAI drives its reasoning models through ``POST /v1/responses``: the model's reasoning
comes back as items that must be passed back (encrypted, when the server stores
nothing) for it to keep its chain of thought across tool calls, and ``reasoning.effort``
sets how hard it thinks. Codex speaks only this format, and other servers (DeepSeek's
among them) serve it too. The ``openai`` preset (OpenAI's API, ``OPENAI_API_KEY``) is a
row of this plugin; ``openai-chat`` keeps chat completions (:mod:`.openai_compat`) for
servers that speak only that.

A bare row is OpenAI's API. ``store`` (default false) decides whether the server keeps
responses; without it every request carries the whole conversation, reasoning items
included, which is what makes a session resumable anywhere and a retry safe.
``reasoning_summary`` asks for readable summaries of the reasoning (``auto``; null asks
for none, for an organisation OpenAI has not verified for summaries). The request and
event formats are in :mod:`.responses_wire`, the HTTP, key and failure policy every
route shares in :mod:`.http_route`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.runtime.kernel.plugin import Capability, EnvVar, Manifest
from dsh.runtime.providers import catalog, pricing
from dsh.runtime.providers.base import ModelRequest
from dsh.runtime.providers.http_route import (
    COMMON_SCHEMA,
    Decoder,
    HttpProviderPlugin,
    HttpRoute,
    config_schema,
    efforts_refusal,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"

EFFORTS = ("none", "off", "minimal", "low", "medium", "high", "xhigh", "max")
"""``reasoning.effort`` as the API's types list it (``off`` is sent as ``none``)."""

DEFAULTS: Mapping[str, Any] = {
    "route": "openai",
    "default_base_url": DEFAULT_BASE_URL,
    "base_url_env": "OPENAI_BASE_URL",
    "api_key_env": "OPENAI_API_KEY",
    "default_model": "gpt-5.5",
    "context_window": 400_000,
}
"""Schema defaults that differ per format: a bare row is OpenAI's own API."""

CONFIG_SCHEMA = config_schema(COMMON_SCHEMA, catalog.CONFIG_SCHEMA, pricing.CONFIG_SCHEMA, {
    "route": {"type": "string", "description": "publishes service llm:<route>"},
    "store": {"type": "boolean", "default": False,
              "description": "let the server keep responses (false: each request "
                             "carries the conversation, encrypted reasoning included)"},
    "reasoning_summary": {"type": ["string", "null"], "enum": ["auto", "concise", "detailed",
                                                              None],
                          "default": "auto",
                          "description": "readable summaries of the reasoning asked for "
                                         "(null: none)"},
}, defaults=DEFAULTS)


class ResponsesRoute(HttpRoute):
    """One Responses endpoint (``POST <base>/responses``)."""

    path = "/responses"

    def __init__(self, config: Mapping[str, Any], *, env: Mapping[str, str], home: str,
                 row_id: str = "llm") -> None:
        self.store: bool = config["store"]
        self.summary: str | None = config["reasoning_summary"]
        super().__init__(config, env=env, home=home, row_id=row_id)

    def reasons(self, model: str | None) -> bool:
        """Whether ``model`` reasons: not when its facts list no effort at all."""
        return model is None or self.catalog.facts(model).efforts != ()

    def form_refusal(self, effort: str, model: str | None) -> str | None:
        """Efforts ``reasoning.effort`` cannot carry, and any effort for a model that
        does not reason, are refused."""
        allowed = EFFORTS if self.reasons(model) else ()
        what = f"route '{self.route}'" + ("" if allowed else f" (model '{model}' does not "
                                                             "reason)")
        return efforts_refusal(effort, allowed, what)

    def encode(self, request: ModelRequest, model: str) -> bytes:
        """The Responses body (:func:`.responses_wire.encode_body`)."""
        from dsh.runtime.providers.responses_wire import encode_body

        return encode_body(request, model=model, images=self.supports_images_for(request.model),
                           reasoning=self.reasons(request.model), store=self.store,
                           summary=self.summary)

    def decoder(self) -> Decoder:
        """A Responses event decoder."""
        from dsh.runtime.providers.responses_wire import EventDecoder

        return EventDecoder(self.redact)

    def auth_headers(self, key: str) -> dict[str, str]:
        """The bearer token."""
        return {"Authorization": f"Bearer {key}"}


class OpenAIResponsesProvider(HttpProviderPlugin):
    """Publishes one OpenAI Responses endpoint as ``llm:<route>``."""

    manifest = Manifest(
        id="llm-openai-responses",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="A streaming OpenAI Responses provider (OpenAI's API by default).",
        config_schema=CONFIG_SCHEMA,
        env={
            "OPENAI_API_KEY": EnvVar(secret=True, description="OpenAI API key"),
            "OPENAI_BASE_URL": EnvVar(routing=True, description="OpenAI API base URL"),
        },
    )
    route_class = ResponsesRoute
    defaults = DEFAULTS
