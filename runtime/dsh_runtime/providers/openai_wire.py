"""The OpenAI chat-completions wire format: request bodies out, streamed chunks in.

No I/O here (the httpx habit of keeping the protocol core apart from the transport), so
the translation is tested from plain values and :mod:`.openai_compat` only moves bytes.

Out: dsh's block-shaped messages (see :mod:`.base`) become chat messages; assistant
``tool-call`` blocks become ``tool_calls`` entries whose ``function.arguments`` is the
JSON text the model produced; tool messages become ``role: tool`` with ``tool_call_id``.
Image blocks (``{"type": "image", "mimeType", "data"}``) go out as ``image_url`` parts with
a ``data:`` URI on routes that take images. A tool message can only carry text in this
format, and every tool answer must follow its assistant message directly, so the images
of a run of tool messages travel in one user message placed right after the run, each
introduced by the call id it belongs to. On a route without images an image block becomes
a text note saying it was left out (a session that switched routes keeps working).

In: each ``data:`` payload of the stream is one ``chat.completion.chunk``. Text deltas,
tool-call fragments and the usage record pass through as :mod:`.base` chunks as they come;
the finish reason is held back and emitted last (after the usage record, which servers
send in a chunk of its own once ``stream_options.include_usage`` is set).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsh_runtime.providers.base import (
    Chunk,
    Finish,
    FinishReason,
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)

DONE = "[DONE]"

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",  # the pre-tools name some servers still send
}
_FAILED_FINISH = {
    "content_filter": ("content-filter", "the server's content filter stopped the answer"),
    "insufficient_system_resource": (
        "insufficient-resources", "the server ran out of capacity mid-answer"),
}


def encode_body(request: ModelRequest, *, images: bool = False) -> bytes:
    """The UTF-8 JSON body of a streaming ``POST /chat/completions`` for ``request``;
    ``images`` says whether the route takes image content."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request.messages, images=images),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = chat_tools(request.tools)
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.reasoning_effort:
        body["reasoning_effort"] = request.reasoning_effort
    return json.dumps(body, ensure_ascii=False, default=_plain).encode("utf-8")


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as ``{"type": "function", "function": {...}}`` entries."""
    return [
        {"type": "function", "function": {
            "name": tool.name, "description": tool.description, "parameters": tool.parameters,
        }}
        for tool in tools
    ]


def chat_messages(messages: Sequence[Mapping[str, Any]], *,
                  images: bool = False) -> list[dict[str, Any]]:
    """dsh messages as chat-completions messages.

    Several text blocks in one message are joined by a blank line (the format has one
    string per message). A block the role cannot carry is refused as ``bad-request``
    rather than dropped, so the model never answers a conversation it was not shown.
    ``images`` says whether image blocks are sent (see the module docstring).
    """
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # image parts of the current run of tool messages
    for position, message in enumerate(messages):
        role = message.get("role")
        if role != "tool" and pending:
            out.append({"role": "user", "content": pending})
            pending = []
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        pictures: list[dict[str, Any]] = []
        for block in message.get("content") or ():
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text") or "")
            elif kind == "tool-call" and role == "assistant":
                if not block.get("id") or not block.get("name"):
                    raise _bad_request(f"messages[{position}]: tool-call without id or name")
                calls.append({"id": block["id"], "type": "function", "function": {
                    "name": block["name"], "arguments": block.get("arguments") or "{}"}})
            elif kind == "image" and role in ("user", "tool"):
                if images:
                    pictures.append(_image_part(block, position))
                else:
                    texts.append(f"[{block.get('mimeType') or 'an'} image left out: this "
                                 "model route does not take images]")
            else:
                raise _bad_request(f"messages[{position}]: a {role} message cannot carry "
                                   f"a {kind!r} block")
        text = "\n\n".join(texts)
        if role == "system":
            out.append({"role": role, "content": text})
        elif role == "user":
            parts = ([{"type": "text", "text": text}] if text else []) + pictures
            out.append({"role": role, "content": parts if pictures else text})
        elif role == "assistant":
            # null content is the documented form for a turn that only calls tools
            entry: dict[str, Any] = {"role": "assistant",
                                     "content": text if text or not calls else None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        elif role == "tool":
            call_id = message.get("toolCallId")
            if not isinstance(call_id, str) or not call_id:
                raise _bad_request(f"messages[{position}]: tool message without toolCallId")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
            if pictures:
                pending.append({"type": "text",
                                "text": f"Image(s) from tool call {call_id}:"})
                pending += pictures
        else:
            raise _bad_request(f"messages[{position}]: unknown role {role!r}")
    if pending:
        out.append({"role": "user", "content": pending})
    return out


def _image_part(block: Mapping[str, Any], position: int) -> dict[str, Any]:
    """An image block as an ``image_url`` part carrying a ``data:`` URI."""
    mime, data = block.get("mimeType"), block.get("data")
    if not isinstance(mime, str) or not mime.startswith("image/") or not isinstance(data, str):
        raise _bad_request(f"messages[{position}]: an image block needs an image/* "
                           "mimeType and base64 data")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def error_message(payload: Any) -> str | None:
    """The human message in an error document, in the shapes compatible servers use:
    ``{"error": {"message"}}`` (OpenAI, DeepSeek), ``{"error": "..."}`` (Ollama),
    ``{"message"}`` or ``{"detail"}`` (FastAPI-based servers)."""
    if not isinstance(payload, Mapping):
        return None
    error = payload.get("error")
    if isinstance(error, Mapping):
        error = error.get("message")
    for candidate in (error, payload.get("message"), payload.get("detail")):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


class ChunkDecoder:
    """Turns the ``data`` payloads of one response into :mod:`.base` chunks.

    ``redact`` cleans any server text quoted in an error. Tool-call ``id`` and ``name``
    are passed on once per call even when a server repeats them on every fragment, which
    is the contract the agent reassembles by.
    """

    def __init__(self, redact: Callable[[str], str]) -> None:
        self._redact = redact
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._ids: dict[int, str] = {}
        self._names: dict[int, str] = {}
        self.done = False

    @property
    def finished(self) -> bool:
        """Whether a finish reason has arrived, i.e. the answer itself is complete."""
        return self._finish is not None

    def decode(self, data: str) -> list[Chunk]:
        """The chunks carried by one event's ``data``; ``[DONE]`` sets :attr:`done`."""
        if data == DONE:
            self.done = True
            return []
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise ModelError("the server sent an event that is not valid JSON",
                             code="bad-response") from exc
        if not isinstance(payload, dict):
            raise ModelError("the server sent an event that is not a JSON object",
                             code="bad-response")
        if "error" in payload:
            message = self._redact(error_message(payload) or "unspecified error")[:500]
            raise ModelError(f"the server reported an error mid-stream: {message}",
                             code="server-error", retryable=True)
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._usage = Usage(_count(usage, "prompt_tokens"), _count(usage, "completion_tokens"))
        chunks: list[Chunk] = []
        for choice in payload.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # dsh never asks for n > 1
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                chunks.append(TextDelta(content))
            for position, call in enumerate(delta.get("tool_calls") or ()):
                chunk = self._tool_call(position, call)
                if chunk is not None:
                    chunks.append(chunk)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return chunks

    def end(self) -> list[Chunk]:
        """The closing chunks (usage if reported, then :class:`Finish`); only valid once
        :attr:`finished`. A finish reason that means failure raises instead."""
        assert self._finish is not None
        if self._finish in _FAILED_FINISH:
            code, message = _FAILED_FINISH[self._finish]
            raise ModelError(message, code=code, retryable=code == "insufficient-resources")
        reason = _FINISH.get(self._finish)
        if reason is None:
            raise ModelError(f"the server sent an unknown finish_reason {self._finish!r}",
                             code="bad-response")
        if reason == "stop" and self._ids:
            reason = "tool-calls"  # some local servers say "stop" after calling tools
        closing: list[Chunk] = [] if self._usage is None else [self._usage]
        return [*closing, Finish(reason)]

    def _tool_call(self, position: int, call: Any) -> ToolCallDelta | None:
        if not isinstance(call, dict):
            raise ModelError("the server sent a malformed tool call", code="bad-response")
        index = call.get("index", position)  # a few servers omit it for single calls
        function = call.get("function") or {}
        if not isinstance(index, int) or not isinstance(function, dict):
            raise ModelError("the server sent a malformed tool call", code="bad-response")
        call_id = self._first(self._ids, index, call.get("id"))
        name = self._first(self._names, index, function.get("name"))
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)  # an object, not its text
        if call_id is None and name is None and not arguments:
            return None
        return ToolCallDelta(index, id=call_id, name=name, arguments=arguments)

    @staticmethod
    def _first(seen: dict[int, str], index: int, value: Any) -> str | None:
        """``value`` the first time call ``index`` reports it, None for a repeat."""
        if not isinstance(value, str) or not value or index in seen:
            return None
        seen[index] = value
        return value


def _count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _plain(value: Any) -> Any:
    """``json.dumps`` fallback: tool schemas may be read-only mappings."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _bad_request(message: str) -> ModelError:
    return ModelError(f"cannot send this conversation: {message}", code="bad-request")
