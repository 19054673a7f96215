"""One MCP server tool as a dsh tool: its schema, its guardrail class, its results.

* **Schema.** The tool's ``inputSchema`` goes to the model as ``parameters``, keywords the
  kernel's argument checker does not know (``pattern``, ``anyOf``, ``$defs``...) included:
  the checker ignores those and the server checks them. What the checker *does* read must
  be well formed, so :func:`parameters` rejects a schema whose ``type``, ``properties``,
  ``items``, ``required``, ``enum``, ``minimum`` or ``maximum`` are malformed (the tool is
  skipped and reported), turns boolean sub-schemas into their object form, and drops
  ``default`` (the server applies its own defaults; dsh must not invent arguments).
* **Guardrails.** A call is mutating unless the server marks the tool ``readOnlyHint``;
  it declares no path arguments, so the workspace policy asks before a mutating call.
* **Results.** Text blocks become the text; images travel as :class:`Image` when the
  model takes them (otherwise a note says one was left out); resources become their text
  or a note. Text beyond ``max_result_chars`` is cut with a note saying how much was kept.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dsh.core.errors import ProtocolError
from dsh.runtime.tools.base import Image, ToolContext, ToolResult

_NOTE_ROOM = 160  # room kept for the truncation note, so text + note fit the cap
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


class SchemaError(ProtocolError):
    """A tool's input schema the argument checker cannot use; says where."""


def parameters(schema: Any) -> dict[str, Any]:
    """The model- and checker-facing ``parameters`` of an MCP ``inputSchema``."""
    if not isinstance(schema, Mapping):
        raise SchemaError("the input schema is not an object")
    if schema.get("type", "object") != "object":
        raise SchemaError("the input schema is not an object schema (type must be 'object')")
    result = _node(schema, "inputSchema")
    result["type"] = "object"
    return result


def _node(schema: Any, where: str) -> dict[str, Any]:
    """A copy of one sub-schema the checker walks, checked where the checker reads it."""
    if schema is True:
        return {}
    if schema is False:
        return {"not": {}}
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{where} is not a schema")
    out = {k: v for k, v in schema.items() if k != "default"}
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not isinstance(names, list) or not names or not all(
                isinstance(t, str) and t in _TYPES for t in names):
            raise SchemaError(f"{where}.type is not a JSON Schema type")
    if "properties" in schema:
        props = schema["properties"]
        if not isinstance(props, Mapping):
            raise SchemaError(f"{where}.properties is not an object")
        out["properties"] = {k: _node(v, f"{where}.properties.{k}") for k, v in props.items()}
    if "additionalProperties" in schema and not isinstance(schema["additionalProperties"], bool):
        out["additionalProperties"] = _node(schema["additionalProperties"],
                                            f"{where}.additionalProperties")
    if "items" in schema:
        out["items"] = _node(schema["items"], f"{where}.items")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError(f"{where}.required is not a list of names")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise SchemaError(f"{where}.enum is not a list")
    for bound in ("minimum", "maximum"):
        value = schema.get(bound, 0)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise SchemaError(f"{where}.{bound} is not a number")
    return out


Caller = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``call(tool_name, arguments)`` → the server's ``CallToolResult`` object (raises on failure)."""


class McpTool:
    """A server's tool under its dsh name; ``call`` goes through ``caller``.

    ``schema_bytes`` is what it adds to every model request (its name, description and
    parameters as JSON), the measure of the servers' byte budgets.
    """

    def __init__(self, name: str, remote: Mapping[str, Any], params: dict[str, Any],
                 server: str, caller: Caller, max_chars: int,
                 describe_failure: Callable[[BaseException], str]) -> None:
        self.name = name
        self.remote_name: str = remote["name"]
        self.server = server
        annotations = remote.get("annotations")
        self.mutating = not (isinstance(annotations, dict)
                             and annotations.get("readOnlyHint") is True)
        title = f"[MCP server {server}] "
        about = remote.get("description") or remote.get("title")
        self.description = title + (about if isinstance(about, str) else self.remote_name)
        self.parameters = params
        self.schema_bytes = len(json.dumps(
            {"name": name, "description": self.description, "parameters": params},
            ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        self._caller = caller
        self._max_chars = max_chars
        self._describe = describe_failure

    def renamed(self, name: str) -> McpTool:
        """The same tool offered under ``name`` (a collision with another server's)."""
        twin = copy.copy(self)
        twin.name = name
        return twin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Call the server's tool; every failure is a result the model reads."""
        try:
            result = await self._caller(self.remote_name, dict(args))
        except Exception as exc:
            return ToolResult(f"Error: {self._describe(exc)}", is_error=True)
        return convert(result, images_ok=ctx.images_supported, max_chars=self._max_chars)


def convert(result: Mapping[str, Any], *, images_ok: bool, max_chars: int) -> ToolResult:
    """An MCP ``CallToolResult`` as a :class:`ToolResult` within ``max_chars``.

    Blocks of a kind (or shape) this does not know are skipped, as the spec asks of
    clients meeting content types from a newer revision.
    """
    parts: list[str] = []
    images: list[Image] = []
    content = result.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        mime = block.get("mimeType")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "image" and images_ok and isinstance(block.get("data"), str) \
                and isinstance(mime, str):
            images.append(Image(mime, block["data"]))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} ({mime}) left out: this model does not take it]")
        elif kind == "resource_link":
            name = block.get("name")
            parts.append(f"[resource {block.get('uri')}" + (f" ({name})]" if name else "]"))
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            text = resource.get("text")
            parts.append(text if isinstance(text, str) else
                         f"[binary resource {resource.get('uri')} left out]")
    structured = result.get("structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts)
    budget = max_chars - sum(len(i.data) for i in images)
    if budget < 0:
        text += f"\n[{len(images)} image(s) left out: over the {max_chars}-character result cap]"
        images, budget = [], max_chars
    if len(text) > budget:
        kept = max(budget - _NOTE_ROOM, 0)
        text = (text[:kept] + f"\n[result truncated: {kept} of {len(text)} characters shown; "
                f"the cap is max_result_chars = {max_chars}]")
    if not text and not images:
        text = "(no output)"
    return ToolResult(text, is_error=result.get("isError") is True, images=tuple(images))
