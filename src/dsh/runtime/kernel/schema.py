"""Row ``config`` validation against a plugin's ``config_schema``.

A deliberately small JSON-Schema subset, enough for plugin options and cheap to import:
``type``, ``properties``, ``required``, ``additionalProperties``, ``enum``, ``items``,
``minimum``, ``maximum`` and ``default`` (filled in for missing properties), plus the
annotations ``title``, ``description``, ``examples``, ``$schema`` and ``$comment``.

Two kinds of fault, two errors: a schema using anything else is the plugin's bug
(:func:`check_schema` raises PluginError when the plugin is loaded); a config that does
not fit is the user's (:func:`validate` raises ConfigError naming row and field path, e.g.
``row 'llm' config.timeout: expected number``). Messages never include a config value,
which may be a secret.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from dsh.core.errors import ConfigError, PluginError

_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "enum", "items",
    "minimum", "maximum", "default",
    "title", "description", "examples", "$schema", "$comment",
})


def check_schema(schema: Any, *, plugin: str) -> None:
    """Reject a ``config_schema`` that uses keywords or shapes this subset does not check.

    A silently ignored keyword (``requried``, ``pattern``) would let bad config through,
    so it fails when the plugin loads instead.
    """
    _check(schema, f"plugin '{plugin}' config_schema")


def _check(schema: Any, where: str) -> None:
    def fail(problem: str) -> None:
        raise PluginError(f"{where}: {problem}")

    if not isinstance(schema, Mapping):
        fail("a schema must be a mapping")
    for key in schema:
        if key not in _KEYWORDS:
            fail(f"unsupported keyword '{key}'")
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not isinstance(names, list) or not names or any(t not in _TYPES for t in names):
            fail(f"'type' must be one of {', '.join(_TYPES)} or a list of them")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        fail("'properties' must be a mapping")
    for name, sub in properties.items():
        _check(sub, f"{where}.properties.{name}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        fail("'required' must be a list of names")
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, bool):
        _check(extra, f"{where}.additionalProperties")
    if "enum" in schema and not isinstance(schema["enum"], list):
        fail("'enum' must be a list")
    if "items" in schema:
        _check(schema["items"], f"{where}.items")
    for bound in ("minimum", "maximum"):
        if bound in schema and not _is_number(schema[bound]):
            fail(f"'{bound}' must be a number")


def validate(schema: Mapping[str, Any], config: Any, *, row_id: str) -> dict[str, Any]:
    """Check a row's ``config`` and return a copy with defaults filled in.

    The input is never mutated: the launcher's tree stays what composition produced.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"row '{row_id}' config: expected object")
    return _validate(schema, config, "config", row_id)


def _validate(schema: Mapping[str, Any], value: Any, path: str, row_id: str) -> Any:
    def fail(problem: str, at: str = path) -> None:
        raise ConfigError(f"row '{row_id}' {at}: {problem}")

    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not any(_is_type(value, name) for name in names):
            fail(f"expected {' or '.join(names)}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        fail("expected one of " + ", ".join(json.dumps(option) for option in schema["enum"]))
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        result: dict[str, Any] = {}
        for key, item in value.items():
            sub = properties.get(key, extra)
            if sub is False:
                fail("unknown field", f"{path}.{key}")
            result[key] = copy.deepcopy(item) if sub is True else _validate(
                sub, item, f"{path}.{key}", row_id)
        for key, sub in properties.items():
            if key not in result and "default" in sub:
                result[key] = _validate(sub, copy.deepcopy(sub["default"]), f"{path}.{key}", row_id)
        for key in schema.get("required", ()):
            if key not in result:
                fail("required field is missing", f"{path}.{key}")
        return result
    if isinstance(value, (list, tuple)):
        items = schema.get("items")
        if items is None:
            return copy.deepcopy(list(value))
        return [_validate(items, item, f"{path}[{i}]", row_id) for i, item in enumerate(value)]
    if _is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            fail(f"must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            fail(f"must be <= {schema['maximum']}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_type(value: Any, name: str) -> bool:
    if name == "object":
        return isinstance(value, Mapping)
    if name == "array":
        return isinstance(value, (list, tuple))
    if name == "string":
        return isinstance(value, str)
    if name == "number":
        return _is_number(value)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    return value is None


def _same(value: Any, option: Any) -> bool:
    """JSON equality: ``True`` is not ``1``, but ``1`` is ``1.0``."""
    return isinstance(value, bool) == isinstance(option, bool) and value == option
