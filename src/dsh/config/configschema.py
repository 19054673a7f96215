"""The JSON Schema of patch files, for editors that validate ``patch.yml``.

It mirrors what :mod:`dsh.config.patchfile` accepts; a test validates the shipped bundles and
examples against it so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

_TAGGED = {
    "description": "A value, or a !env/!home/!path tag (shown as {\"!env\": NAME} in dumps).",
}


def config_schema() -> dict[str, Any]:
    """The schema document (draft 2020-12) of a patch file."""
    row_common = {
        "id": {"type": "string", "minLength": 1, "pattern": "^[^:]+$",
               "description": "Stable row id; nested ids join with ':' in patches."},
        "name": {"type": "string", "minLength": 1,
                 "description": "Plugin reference: an entry point in dsh.plugins or module:attr."},
        "disabled": {"type": "boolean"},
        "inject": {"type": "array", "items": {"type": "string", "minLength": 1},
                   "description": "Services this row waits for."},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://dsh.invalid/schema/patch.json",
        "title": "dsh patch file",
        "description": "A YAML list of operations applied in order over the layers below it.",
        "type": "array",
        "items": {"$ref": "#/$defs/operation"},
        "$defs": {
            "value": _TAGGED,
            "row": {
                "type": "object",
                "required": ["id"],
                "additionalProperties": False,
                "properties": {
                    **row_common,
                    "group": {"type": "boolean"},
                    "config": {"oneOf": [
                        {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}},
                        {"type": "array", "items": {"$ref": "#/$defs/row"}},
                        {"type": "null"},
                    ]},
                },
                "if": {"properties": {"group": {"const": True}}, "required": ["group"]},
                "then": {"properties": {"config": {"type": "array"}}},
                "else": {"required": ["id", "name"]},
            },
            "operation": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string", "minLength": 1,
                           "description": "Target row (nested: group:child)."},
                    "name": {"type": "string",
                             "description": "Guard: the operation is skipped unless it matches."},
                    "insert": {"type": "array", "items": {"$ref": "#/$defs/row"}},
                    "merge": {"type": "object", "additionalProperties": {"type": "object"}},
                    "replace": {
                        "type": "object", "required": ["name"], "additionalProperties": False,
                        "description": "Run another plugin in this row, keeping its id "
                                       "(config starts empty; inject/disabled are kept).",
                        "properties": {"name": row_common["name"],
                                       "config": {"type": ["object", "null"]},
                                       "disabled": row_common["disabled"],
                                       "inject": row_common["inject"]},
                    },
                    "config": {"oneOf": [{"type": "object"}, {"type": "array",
                                                             "items": {"$ref": "#/$defs/row"}}]},
                    "disabled": {"type": "boolean"},
                    "inject": row_common["inject"],
                },
                "anyOf": [{"required": ["insert"]}, {"required": ["id"]}],
            },
        },
    }
