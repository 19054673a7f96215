"""Which model ids a route serves, under which name, and what each model takes.

Providers rename and retire models, and their models differ in what they accept; a route
row says how its ids fare, and this module is the one place that applies it (for every
wire format):

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
* ``model_facts``: model id or shell-style pattern (``*``, ``?``, ``[...]``) → what the
  model takes::

      model_facts:
        "claude-opus-4-7*":
          context_window: 1000000      # tokens of prompt and answer together
          max_output_tokens: 128000    # the most one answer may use
          thinking: [adaptive]         # how thinking is turned on (Anthropic's forms)
          efforts: [low, medium, high, xhigh, max]   # no none: it always thinks

  Each fact comes from the most specific entry that matches and sets it (an exact id
  beats any pattern; among patterns, the one pinning more characters), so a patch can add a
  narrow entry for one fact and keep the rest. A model no entry matches gets the route's
  defaults, said once per process. ``efforts`` names every effort the model takes;
  ``none`` among them means thinking can be turned off (``off`` is the same), so an
  always-thinking model simply leaves it out. ``thinking`` is read by the Anthropic
  format: ``adaptive`` (``thinking: {type: adaptive}`` with ``output_config.effort``) and
  ``enabled`` (a ``budget_tokens`` derived from the effort), in the route's order of
  preference.

Prices (:mod:`.pricing`) are keyed the same way: an exact id or a ``*`` pattern, matched
by :func:`best_match`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

from dsh.runtime.providers.base import EFFORTS, OFF_EFFORTS

log = logging.getLogger("dsh.providers")

THINKING_FORMS = ("adaptive", "enabled")
"""How a model turns thinking on, as Anthropic's Messages API names the forms."""

_FACTS_ENTRY: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "context_window": {"type": "integer", "minimum": 1},
        "max_output_tokens": {"type": "integer", "minimum": 1},
        "thinking": {"type": "array", "items": {"enum": list(THINKING_FORMS)}},
        "efforts": {"type": "array", "items": {"enum": list(EFFORTS)}},
    },
    "additionalProperties": False,
}

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
    "model_facts": {"type": "object", "additionalProperties": _FACTS_ENTRY, "default": {},
                    "description": "model id or * pattern -> context_window, "
                                   "max_output_tokens, thinking, efforts "
                                   "(see dsh.runtime.providers.catalog)"},
}
"""The row config keys this module reads, merged into each HTTP provider's schema."""


class ModelFacts(NamedTuple):
    """What one model takes, each None where no entry says (the route's default applies).

    ``matched`` is False when no ``model_facts`` entry matched the id at all.
    """

    context_window: int | None = None
    max_output_tokens: int | None = None
    thinking: tuple[str, ...] | None = None
    efforts: tuple[str, ...] | None = None
    matched: bool = False


_CLASS = re.compile(r"\[[^\]]*\]")


def _specificity(key: str) -> tuple[int, int]:
    """(exact?, characters a match pins): a ``[...]`` class pins one, ``*``/``?`` none."""
    pinned = _CLASS.sub("?", key)
    wild = pinned.count("*") + pinned.count("?")
    return (0 if wild else 1, len(pinned) - wild)


def matches(model: str, keys: Iterable[str]) -> list[str]:
    """The keys (exact ids or shell-style patterns: ``*``, ``?``, ``[...]``) that match
    ``model``, most specific first: the exact id, then patterns by how many characters
    they pin (ties in key order, so the answer never depends on the order a patch added
    them)."""
    found = [k for k in keys if k == model or fnmatchcase(model, k)]
    return sorted(found, key=lambda k: (_specificity(k), k), reverse=True)


def best_match(model: str, keys: Iterable[str]) -> str | None:
    """The most specific key matching ``model`` (see :func:`matches`), or None."""
    found = matches(model, keys)
    return found[0] if found else None


def allowed_efforts(efforts: Sequence[str]) -> tuple[str, ...]:
    """``efforts`` with ``off`` beside ``none`` (they are the same level)."""
    if any(e in OFF_EFFORTS for e in efforts):
        return tuple(dict.fromkeys([*efforts, *OFF_EFFORTS]))
    return tuple(efforts)


def shown_efforts(efforts: Sequence[str]) -> str:
    """Efforts as a message lists them, in the canonical order, ``off`` folded into none."""
    return ", ".join(e for e in EFFORTS if e in efforts and e != "off") or "none at all"


class ModelCatalog:
    """A route's model ids and facts; built from a validated row config."""

    def __init__(self, route: str, *, default_model: str, models: Sequence[str] = (),
                 aliases: Mapping[str, str] | None = None,
                 retired: Mapping[str, str] | None = None, images: bool = False,
                 text_only: Sequence[str] = (),
                 facts: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.route = route
        self.default_model = default_model
        self._models = frozenset(models)
        self._aliases = dict(aliases or {})
        self._retired = dict(retired or {})
        self._images = images
        self._text_only = frozenset(text_only)
        self._facts = {key: dict(entry) for key, entry in (facts or {}).items()}
        self._known: dict[str, ModelFacts] = {}
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
                   text_only=config["text_only_models"], facts=config.get("model_facts"))

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

    def facts(self, model: str) -> ModelFacts:
        """What ``model`` (its served id) takes, each fact from the most specific entry
        that sets it. A route with facts that match no entry for ``model`` says so once
        per process, naming the id: its defaults are a guess for that model."""
        served = self._aliases.get(model, model)
        known = self._known.get(served)
        if known is not None:
            return known
        keys = matches(served, self._facts)
        values: dict[str, Any] = {}
        for key in keys:
            for name, value in self._facts[key].items():
                values.setdefault(name, tuple(value) if isinstance(value, list) else value)
        known = self._known[served] = ModelFacts(**values, matched=bool(keys))
        if not keys and self._facts and served not in self._warned:
            self._warned.add(served)
            log.warning("route '%s': no model_facts entry matches model '%s'; using the "
                        "route's defaults (add an entry to the row's model_facts to say "
                        "what it takes)", self.route, served)
        return known
