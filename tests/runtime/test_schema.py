"""The config-schema subset: messages name row and path, defaults fill, schemas are checked."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.core.errors import ConfigError, PluginError
from dsh.runtime.kernel.schema import check_schema, validate

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["model"],
    "properties": {
        "model": {"type": "string", "description": "model id"},
        "timeout": {"type": "number", "minimum": 0, "maximum": 600, "default": 60},
        "retries": {"type": "integer", "default": 2},
        "mode": {"enum": ["fast", "slow"]},
        "stop": {"type": ["string", "null"]},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "routes": {
            "type": "array",
            "items": {"type": "object", "properties": {"url": {"type": "string"},
                                                       "weight": {"type": "number",
                                                                  "default": 1}}},
        },
        "retry": {"type": "object", "default": {},
                  "properties": {"backoff": {"type": "number", "default": 0.5}}},
    },
}


def fails(config: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(SCHEMA, config, row_id="llm")
    assert str(info.value) == message
    assert info.value.exit_code == 2


def test_valid_config_gets_defaults_and_input_is_untouched() -> None:
    config = {"model": "m", "routes": [{"url": "u"}]}
    result = validate(SCHEMA, config, row_id="llm")
    assert result == {"model": "m", "routes": [{"url": "u", "weight": 1}], "timeout": 60,
                      "retries": 2, "retry": {"backoff": 0.5}}
    assert config == {"model": "m", "routes": [{"url": "u"}]}


def test_type_error_names_row_and_path() -> None:
    fails({"model": "m", "timeout": "soon"}, "row 'llm' config.timeout: expected number")
    fails({"model": "m", "retries": 1.5}, "row 'llm' config.retries: expected integer")
    fails({"model": "m", "retries": True}, "row 'llm' config.retries: expected integer")
    fails({"model": "m", "stop": 3}, "row 'llm' config.stop: expected string or null")
    fails("nope", "row 'llm' config: expected object")


def test_nested_paths() -> None:
    fails({"model": "m", "routes": [{"url": "u"}, {"url": 5}]},
          "row 'llm' config.routes[1].url: expected string")
    fails({"model": "m", "headers": {"auth": 1}}, "row 'llm' config.headers.auth: expected string")


def test_required_unknown_enum_and_bounds() -> None:
    fails({}, "row 'llm' config.model: required field is missing")
    fails({"model": "m", "tmeout": 1}, "row 'llm' config.tmeout: unknown field")
    fails({"model": "m", "mode": "medium"}, 'row \'llm\' config.mode: expected one of "fast", '
                                            '"slow"')
    fails({"model": "m", "timeout": -1}, "row 'llm' config.timeout: must be >= 0")
    fails({"model": "m", "timeout": 601}, "row 'llm' config.timeout: must be <= 600")


def test_messages_never_include_the_value() -> None:
    with pytest.raises(ConfigError) as info:
        validate(SCHEMA, {"model": "m", "stop": 987654321}, row_id="llm")
    assert "987654321" not in str(info.value)


def test_enum_is_json_equality() -> None:
    schema = {"enum": [1, "a"]}
    assert validate({"properties": {"x": schema}}, {"x": 1.0}, row_id="r") == {"x": 1.0}
    with pytest.raises(ConfigError):
        validate({"properties": {"x": schema}}, {"x": True}, row_id="r")


def test_empty_schema_accepts_and_copies() -> None:
    nested = {"a": [1, {"b": 2}]}
    result = validate({}, nested, row_id="r")
    assert result == nested
    assert result["a"] is not nested["a"]


def test_check_schema_accepts_the_subset() -> None:
    check_schema(SCHEMA, plugin="llm-plugin")


@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "object", "requried": ["x"]},
     "plugin 'p' config_schema: unsupported keyword 'requried'"),
    ({"properties": {"x": {"pattern": "^a"}}},
     "plugin 'p' config_schema.properties.x: unsupported keyword 'pattern'"),
    ({"type": "float"}, "plugin 'p' config_schema: 'type' must be one of"),
    ({"items": []}, "plugin 'p' config_schema.items: a schema must be a mapping"),
    ({"minimum": "0"}, "plugin 'p' config_schema: 'minimum' must be a number"),
    ({"required": "x"}, "plugin 'p' config_schema: 'required' must be a list of names"),
    ({"enum": "ab"}, "plugin 'p' config_schema: 'enum' must be a list"),
])
def test_check_schema_rejects_what_it_cannot_check(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError) as info:
        check_schema(schema, plugin="p")
    assert str(info.value).startswith(message)
