"""The ``llm-anthropic`` plugin: an Anthropic Messages endpoint as an ``llm:<route>``.

Two routes ship as presets in ``profiles/bundles/dsh-base/patch.yml``: ``anthropic``
(Anthropic's API, ``ANTHROPIC_API_KEY``, the thinking form each model takes) and
``deepseek-anthropic`` (DeepSeek's Anthropic-format endpoint
``https://api.deepseek.com/anthropic``, ``DEEPSEEK_API_KEY``, DeepSeek's thinking switch).
The key travels in ``x-api-key`` with ``anthropic-version``; the request and event formats
are in :mod:`.anthropic_wire`, the HTTP, key and failure policy every route shares in
:mod:`.http_route`.

Claude models differ in how thinking is turned on, and a wrong form is an HTTP 400 on
every turn: adaptive (``thinking: {type: adaptive}`` + ``output_config.effort``) exists
from Claude 4.6 and is the only form of Opus 4.7 and later, Claude 5, Fable and Mythos;
4.5 and earlier take only ``enabled`` with a ``budget_tokens``. ``thinking_style: auto``
(the preset) picks the form from the model's facts (``model_facts.thinking``, the first
listed; a model without facts gets adaptive, the current API's form, and a line in the
log saying so), and the model's ``efforts`` decide what it takes: Fable and Mythos list
no ``none``, so turning their thinking off is refused before any request, naming what
they take. ``adaptive`` and ``enabled`` force one form for every model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.runtime.kernel.plugin import Capability, EnvVar, Manifest
from dsh.runtime.providers import catalog, pricing
from dsh.runtime.providers.base import EFFORTS, OFF_EFFORTS, ModelError, ModelRequest
from dsh.runtime.providers.http_route import (
    COMMON_SCHEMA,
    Decoder,
    HttpProviderPlugin,
    HttpRoute,
    config_schema,
    efforts_refusal,
)

ANTHROPIC_VERSION = "2023-06-01"

FORM_EFFORTS: Mapping[str, tuple[str, ...]] = {
    # DeepSeek maps every level of its thinking-mode table itself
    "deepseek": EFFORTS,
    # output_config.effort as Anthropic documents it, or thinking disabled
    "adaptive": ("none", "off", "low", "medium", "high", "xhigh", "max"),
    # a budget_tokens derived from the effort (anthropic_wire.budget_tokens), or disabled
    "enabled": ("none", "off", "minimal", "low", "medium", "high", "xhigh", "max"),
    "none": (),
}
"""Thinking forms (:mod:`.anthropic_wire`) and the efforts each can carry."""
THINKING_STYLES = ("auto", *FORM_EFFORTS)
"""``auto``: each model's own form (its ``model_facts``); the others force one form."""

DEFAULTS: Mapping[str, Any] = {
    "route": "anthropic",
    "default_base_url": "https://api.anthropic.com",
    "base_url_env": "ANTHROPIC_BASE_URL",
    "api_key_env": "ANTHROPIC_API_KEY",
    "default_model": "claude-sonnet-5-5",
    "context_window": 1_000_000,
    "thinking_style": "auto",
}
"""Schema defaults that differ per format: a bare row is Anthropic's own API."""

CONFIG_SCHEMA = config_schema(COMMON_SCHEMA, catalog.CONFIG_SCHEMA, pricing.CONFIG_SCHEMA, {
    "route": {"type": "string", "description": "publishes service llm:<route>"},
    "thinking_style": {"type": "string", "enum": list(THINKING_STYLES),
                       "description": "how thinking is turned on: auto (each model's "
                                      "model_facts.thinking), adaptive, enabled, deepseek, "
                                      "none (see dsh.runtime.providers.anthropic)"},
    "max_tokens": {"type": "integer", "minimum": 1, "default": 32000,
                   "description": "output limit sent when the client names none (the "
                                  "format requires one); a model's max_output_tokens "
                                  "lowers it"},
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

    def thinking_form(self, model: str | None) -> str:
        """The form thinking takes for ``model``: the style's, or under ``auto`` the
        first form the model's facts list (adaptive for a model without facts)."""
        if self.style != "auto":
            return self.style
        forms = self.catalog.facts(model).thinking if model is not None else None
        return forms[0] if forms else "adaptive"

    def output_limit(self, model: str) -> int:
        """``max_tokens`` sent when the client names none: the row's, lowered to the
        model's ``max_output_tokens`` where its facts say."""
        limit = self.catalog.facts(model).max_output_tokens
        return min(self.max_tokens, limit) if limit else self.max_tokens

    def form_refusal(self, effort: str, model: str | None) -> str | None:
        """Efforts the thinking form chosen for ``model`` cannot carry are refused."""
        form = self.thinking_form(model)
        what = f"route '{self.route}' (thinking_style {self.style}" + \
            (f", {form} thinking for '{model}')" if self.style == "auto" and model else ")")
        return efforts_refusal(effort, FORM_EFFORTS[form], what)

    def encode(self, request: ModelRequest, model: str) -> bytes:
        """The Messages body (:func:`.anthropic_wire.encode_body`)."""
        from dsh.runtime.providers.anthropic_wire import MIN_BUDGET, encode_body

        form = self.thinking_form(request.model)
        limit = request.max_tokens or self.output_limit(request.model)
        effort = request.reasoning_effort
        if form == "enabled" and effort is not None and effort not in OFF_EFFORTS \
                and limit <= MIN_BUDGET:
            raise ModelError(f"max_tokens {limit} leaves no room to think on route "
                             f"'{self.route}': '{model}' needs a thinking budget of at "
                             f"least {MIN_BUDGET} tokens below max_tokens; raise max_tokens "
                             "or use effort none", code="unsupported-effort")
        return encode_body(request, model=model, max_tokens=limit,
                           images=self.supports_images_for(request.model), form=form,
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
