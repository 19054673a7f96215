"""Checking what a client sends, once, for the SDK, ACP and web servers.

Input that is not what it claims is refused where it enters, with an
:class:`~dsh.core.errors.InvalidArgumentError` (-32602, HTTP 400 on the web API) and a
message naming the field, before the agent sees it: a value that passed
here and failed later would be an internal error (-32603), an event that cannot be
stored or sent, or a turn that dies. What is checked:

* **Lone surrogates.** JSON's ``"\\ud800"`` escape decodes to a Python ``str`` holding a
  UTF-16 half that is no Unicode character; it cannot be encoded as UTF-8, so the event
  log (SQLite binds text as UTF-8) and every outgoing frame would fail on it. Every
  string of a request (keys too) is checked by :func:`lone_surrogate`; the JSON-RPC peer
  and the web API's body reader apply it to whole messages.
* **Shapes.** ``params`` must be an object; ``sessionId`` and the other names a non-empty
  string; ``cwd`` an existing absolute directory; content blocks known types holding
  what their type says (:mod:`dsh.runtime.agent.blocks`).
* **Paging.** ``session/history``'s ``cursor`` (what the previous page answered as
  ``nextCursor``) and ``limit``; ``session/list``'s narrowing (``sessionId``,
  ``workspace``, ``limit``).
* **Trace context.** A prompt's ``_meta.traceparent``/``tracestate``
  (:func:`trace_context`), taken when well formed and otherwise ignored, never refused.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from dsh.core.errors import InvalidArgumentError
from dsh.runtime.agent import blocks
from dsh.runtime.agent.toolrun import Approval

DEFAULT_PAGE_EVENTS = 1000
"""Events in a ``session/history`` page when the client names no ``limit``."""
MAX_PAGE_EVENTS = 10_000
"""The most events one page holds; a larger ``limit`` is lowered to it."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CURSOR = re.compile(r"[0-9]{1,18}\Z")


def invalid(message: str) -> InvalidArgumentError:
    """The error every check raises."""
    return InvalidArgumentError(message)


def lone_surrogate(value: Any, where: str = "params") -> str | None:
    """The message for the first string in ``value`` (keys included) holding a lone
    surrogate, naming its path (``params.contentBlocks[0].text``); None when all is text.

    Encoding the whole value as UTF-8 JSON answers "none" at C speed; only a value that
    fails is walked, iteratively (a deeply nested value costs no recursion; decoded JSON
    is a tree, so the walk ends), to name the path.
    """
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        pass
    except (TypeError, ValueError, RecursionError):
        pass  # not plain JSON data (a caller's own value): walk it
    else:
        return None
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                return (f"{path}: holds a lone surrogate (U+{ord(found.group()):04X}), "
                        "which is not a Unicode character; send valid UTF-8 text")
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return (f"{path}: a key holds a lone surrogate, which is not a Unicode "
                            "character; send valid UTF-8 text")
                name = f"{path}.{key}" if _NAME.match(key) else f"{path}[{key!r}]"
                stack.append((child, name))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
    return None


def check_text(value: Any, where: str = "params") -> None:
    """Refuse ``value`` (-32602) when any of its strings holds a lone surrogate."""
    message = lone_surrogate(value, where)
    if message is not None:
        raise invalid(message)


def params_object(params: Any) -> Mapping[str, Any]:
    """``params`` as an object (absent is empty); an array or scalar is -32602."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise invalid("params must be an object")
    return params


def string(params: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    """``params[name]`` as a non-empty string; absent (or null) is None unless required."""
    value = params.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise invalid(f'"{name}" must be a non-empty string')
    return value


def session_id(params: Any) -> str:
    """The ``sessionId`` of a request's params."""
    return string(params_object(params), "sessionId")  # type: ignore[return-value]


def directory(path: Any, name: str = "cwd") -> str:
    """``path`` if it is an existing absolute directory (normalised); else -32602."""
    if not isinstance(path, str) or not path:
        raise invalid(f'"{name}" must be a non-empty string')
    if "\0" in path or not os.path.isabs(path) or not os.path.isdir(path):
        raise invalid(f'"{name}" is not an existing absolute directory: {path!r}')
    return os.path.normpath(path)


def content_blocks(value: Any, name: str = "contentBlocks") -> list[dict[str, Any]]:
    """A prompt's blocks: a non-empty array of known blocks holding what they claim."""
    if not isinstance(value, list) or not value:
        raise invalid(f'"{name}" must be a non-empty array of {{type, ...}} objects')
    for index, block in enumerate(value):
        wrong = blocks.problem(block)
        if wrong is not None:
            raise invalid(f'"{name}"[{index}]: {wrong}')
    return value


TRACE_KEYS = ("traceparent", "tracestate")
"""The W3C Trace Context keys a prompt's ``_meta`` may carry (as ACP and MCP place them)."""
MAX_TRACE_CHARS = 512
"""The W3C Trace Context's limit for ``tracestate``; a longer value is not a trace context."""


def trace_context(meta: Any) -> dict[str, str] | None:
    """The W3C trace context in a request's ``_meta`` (``traceparent``, ``tracestate``),
    or None. Never an error: a client's trace context is a hint, and one that is missing,
    of the wrong type or too long is ignored (telemetry also ignores a ``traceparent``
    that does not parse, starting a trace of its own)."""
    if not isinstance(meta, Mapping):
        return None
    found = {key: meta[key] for key in TRACE_KEYS
             if isinstance(meta.get(key), str) and 0 < len(meta[key]) <= MAX_TRACE_CHARS}
    return found if "traceparent" in found else None


def history_window(params: Mapping[str, Any]) -> tuple[int, int]:
    """``(start seq, limit)`` of a ``session/history`` request.

    ``cursor`` is a previous page's ``nextCursor`` (absent or null: the first page);
    ``limit`` a positive integer, lowered to :data:`MAX_PAGE_EVENTS`.
    """
    cursor = params.get("cursor")
    if cursor is None:
        start = 0
    elif isinstance(cursor, str) and _CURSOR.match(cursor):
        start = int(cursor)
    else:
        raise invalid('"cursor" must be a "nextCursor" of an earlier page, or null')
    limit = params.get("limit")
    if limit is None:
        return start, DEFAULT_PAGE_EVENTS
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise invalid('"limit" must be a positive integer')
    return start, min(limit, MAX_PAGE_EVENTS)


def listing_filter(params: Mapping[str, Any]) -> dict[str, Any]:
    """The narrowing of a ``session/list`` request, as keywords of
    :meth:`~dsh.runtime.agent.service.Agent.list_sessions`: ``sessionId`` (one session),
    ``workspace`` (an absolute path; the sessions whose workspace root is its real path)
    and ``limit`` (a positive integer: that many updated last, newest first), each
    optional."""
    found: dict[str, Any] = {"session_id": string(params, "sessionId", required=False)}
    workspace = string(params, "workspace", required=False)
    if workspace is not None:
        if "\0" in workspace or not os.path.isabs(workspace):
            raise invalid(f'"workspace" must be an absolute path: {workspace!r}')
        workspace = os.path.realpath(workspace)
    found["workspace"] = workspace
    limit = params.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                              or limit < 1):
        raise invalid('"limit" must be a positive integer')
    found["limit"] = limit
    return found


def approval_answer(answer: Any) -> Approval:
    """A client's answer to an approval request as an :class:`Approval`:
    ``{decision: "allow" | "deny", remember?: "session", note?: str}``. Anything else, an
    unknown ``remember`` included, denies (a client must not be taken to allow more than
    it said)."""
    if not isinstance(answer, Mapping) or answer.get("decision") not in ("allow", "deny"):
        return Approval("deny")
    remember = answer.get("remember")
    note = answer.get("note")
    if remember not in (None, "session") or not isinstance(note, (str, type(None))):
        return Approval("deny")
    return Approval(answer["decision"], remember == "session", note or "")
