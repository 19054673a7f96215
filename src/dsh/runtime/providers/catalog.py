"""Which model ids a route serves, under which name, and with which input.

Providers rename and retire models; a route row says how its ids fare, and this module
is the one place that applies it (for every wire format):

* ``models``: the ids the route accepts (empty: any id, as a local server may serve
  anything). ``default_model`` is what a client that names none gets.
* ``model_aliases``: old id → the id sent instead. DeepSeek still answers
  ``deepseek-v4-flash`` but serves it with ``deepseek-flash`` and asks clients to use the
  new name, so dsh sends the new one and says so once per process.
* ``retired_models``: id → why it cannot be used (and what to use), refused when a
  client chooses it, before any request: DeepSeek retired ``deepseek-chat`` and
  ``deepseek-reasoner``, and silently answering them with another model would hide the
  change of behaviour and price.
* ``text_only_models``: ids among those accepted that take no image input on a route
  that otherwise does (``supports_images``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger("dsh.providers")

CONFIG_SCHEMA: Mapping[str, Any] = {
    "default_model": {"type": "string"},
    "models": {"type": "array", "items": {"type": "string"}, "default": [],
               "description": "accepted model ids; empty accepts any"},
    "model_aliases": {"type": "object", "additionalProperties": {"type": "string"},
                      "default": {}, "description": "old id -> the id sent instead"},
    "retired_models": {"type": "object", "additionalProperties": {"type": "string"},
                       "default": {}, "description": "id -> why it is refused"},
    "supports_images": {"type": "boolean", "default": False},
    "text_only_models": {"type": "array", "items": {"type": "string"}, "default": [],
                         "description": "ids that take no images on an image route"},
}
"""The row config keys this module reads, merged into each HTTP provider's schema."""


class ModelCatalog:
    """A route's model ids; built from a validated row config."""

    def __init__(self, route: str, *, default_model: str, models: Sequence[str] = (),
                 aliases: Mapping[str, str] | None = None,
                 retired: Mapping[str, str] | None = None, images: bool = False,
                 text_only: Sequence[str] = ()) -> None:
        self.route = route
        self.default_model = default_model
        self._models = frozenset(models)
        self._aliases = dict(aliases or {})
        self._retired = dict(retired or {})
        self._images = images
        self._text_only = frozenset(text_only)
        self._warned: set[str] = set()

    @property
    def models(self) -> tuple[str, ...]:
        """The models the route names: its default first, then the listed ones sorted."""
        return (self.default_model, *sorted(self._models - {self.default_model}))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelCatalog:
        """The catalog a validated row config describes."""
        return cls(config["route"], default_model=config["default_model"],
                   models=config["models"], aliases=config["model_aliases"],
                   retired=config["retired_models"], images=config["supports_images"],
                   text_only=config["text_only_models"])

    def refusal(self, model: str) -> str | None:
        """Why ``model`` cannot be used on this route, or None when it can."""
        if model in self._retired:
            return f"model '{model}' cannot be used on route '{self.route}': " \
                   f"{self._retired[model]}"
        if self.accepts(model):
            return None
        known = ", ".join(sorted(self._models | set(self._aliases))) or "none"
        return f"unknown model '{model}' for provider route '{self.route}' (models: {known})"

    def accepts(self, model: str) -> bool:
        """Whether ``model`` is served (an alias counts; a retired id never does)."""
        if model in self._retired:
            return False
        return not self._models or model in self._models or model in self._aliases

    def wire_id(self, model: str) -> str:
        """The id sent for ``model``: its alias target, said once per process."""
        target = self._aliases.get(model)
        if target is None:
            return model
        if model not in self._warned:
            self._warned.add(model)
            log.warning("route '%s': model '%s' is a legacy name; sending '%s' instead",
                        self.route, model, target)
        return target

    def images(self, model: str) -> bool:
        """Whether ``model`` takes image input on this route."""
        return self._images and self._aliases.get(model, model) not in self._text_only
