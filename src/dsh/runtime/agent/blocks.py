"""What a content block must hold, for the blocks the agent and its providers understand.

Messages carry typed blocks: ``text`` (``text``: a string), ``image`` (``mimeType``:
``image/*``, ``data``: base64) and, in assistant messages only, ``reasoning`` (string
``text``, optional string ``signature``, ``redacted`` and ``field``) and ``tool-call``
(string ``id``, ``name``, ``arguments``). A block that claims a type but lacks its fields would
fail much later (a provider's request, a title, a hook) as an internal error or a dead
turn, so every block that arrives from outside (a prompt, a forked history) is checked
here first and refused with a message naming what is wrong.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

PROMPT_KINDS = ("text", "image")
"""Block types a client may send in a prompt (a user message)."""

KINDS_BY_ROLE: Mapping[str, tuple[str, ...]] = {
    "user": PROMPT_KINDS,
    "assistant": ("reasoning", "text", "tool-call"),
    "tool": ("text", "image"),
}


def problem(block: Any, allowed: tuple[str, ...] = PROMPT_KINDS) -> str | None:
    """What is wrong with ``block`` as one of the ``allowed`` types, or None."""
    if not isinstance(block, Mapping):
        return "must be a {type, ...} object"
    kind = block.get("type")
    if not isinstance(kind, str):
        return '"type" must be a string'
    if kind not in allowed:
        return f"unknown content block type {kind!r} (allowed here: {', '.join(allowed)})"
    if kind == "text":
        return None if isinstance(block.get("text"), str) else \
            'a text block\'s "text" must be a string'
    if kind == "reasoning":
        if not isinstance(block.get("text"), str):
            return 'a reasoning block\'s "text" must be a string'
        for name in ("signature", "redacted", "field"):
            if name in block and not isinstance(block[name], str):
                return f'a reasoning block\'s "{name}" must be a string'
        return None
    if kind == "image":
        mime, data = block.get("mimeType"), block.get("data")
        if not isinstance(mime, str) or not mime.startswith("image/"):
            return 'an image block\'s "mimeType" must be an image/* type'
        if not isinstance(data, str) or not _base64(data):
            return 'an image block\'s "data" must be base64 text'
        return None
    for name in ("id", "name", "arguments"):
        if not isinstance(block.get(name), str):
            return f'a tool-call block\'s "{name}" must be a string'
    return None


def _base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True
