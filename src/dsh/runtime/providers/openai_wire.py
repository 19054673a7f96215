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

Reasoning (``reasoning_style``), because servers disagree on it:

* ``deepseek``: effort ``none``/``off`` sends ``thinking: {"type": "disabled"}``, any
  other level ``thinking: {"type": "enabled"}`` and ``reasoning_effort`` as given (the API
  maps ``minimal`` … ``ultra`` itself); no effort sends neither, so the API's default
  (thinking on) applies. The reasoning of every assistant message that made tool calls is
  sent back as ``reasoning_content``, as DeepSeek's thinking-mode guide requires on every
  later request (HTTP 400 otherwise); elsewhere the API ignores it, so it is not sent.
* ``auto`` (``openai`` is its older name): ``reasoning_effort`` (``none`` … ``max``;
  ``off`` is ``none``), and reasoning sent back the way the server sent it (below).
* ``openrouter``: ``reasoning: {"effort": ...}`` (``none`` … ``xhigh``), reasoning sent
  back the way it came.
* ``none``: no reasoning field at all, for servers that refuse unknown ones.

Sent back the way it came: servers in front of thinking models (a proxy such as litellm
before DeepSeek, vLLM, SGLang, llama.cpp, Ollama, OpenRouter) stream the reasoning as
``reasoning_content``, ``reasoning`` or OpenRouter's ``reasoning_details`` (a list of
typed, possibly signed or encrypted parts), and the model behind them may need it back on
the messages that made tool calls, as DeepSeek's does. Each reasoning block records the
field it came in (``field``; the merged details go along as JSON in ``redacted``), and an
assistant message of this route that made tool calls carries it back in that field,
unchanged. A field of another name that looks like reasoning (``thinking``, ``thoughts``,
...) is kept and shown as reasoning but never sent back, as nobody knows where it would
go; the route says so once in its log.

An assistant message's ``content`` is ``""`` when it has no text, never null: DeepSeek
answers 400 to a null-content assistant message without tool calls, and such a message
would then break every later request of its session.

In: each ``data:`` payload of the stream is one ``chat.completion.chunk``. Text deltas,
reasoning deltas (``reasoning_content``, ``reasoning`` as OpenRouter, vLLM and Ollama
spell it, OpenRouter's ``reasoning_details``, or a field of another name), tool-call
fragments and the usage record pass through as :mod:`.base` chunks as they come; the
finish reason is held back and emitted last (after the usage record, which servers send
in a chunk of its own once ``stream_options.include_usage`` is set; the merged
``reasoning_details``, which must go back whole, come just before it). Usage
keeps DeepSeek's ``prompt_cache_hit_tokens`` (or OpenAI's
``prompt_tokens_details.cached_tokens``) and ``completion_tokens_details.reasoning_tokens``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dsh.runtime.providers.base import (
    OFF_EFFORTS,
    Chunk,
    Finish,
    FinishReason,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from dsh.runtime.providers.http_route import error_message, event_payload

if TYPE_CHECKING:
    from dsh.runtime.transports.sse import ServerSentEvent

DONE = "[DONE]"
_LOOKS_LIKE_REASONING = re.compile(r"reason|think|thought", re.IGNORECASE)
_JOINED = frozenset({"text", "summary", "data", "signature"})

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


PASSBACK = {"deepseek": "deepseek", "auto": "as-sent", "openai": "as-sent",
            "openrouter": "as-sent", "none": "none"}
"""How each reasoning style sends reasoning back (see :func:`chat_messages`)."""
KNOWN_FIELDS = ("reasoning_content", "reasoning", "reasoning_details")
"""The delta fields servers stream reasoning in, which a route sends back as they came."""


def encode_body(request: ModelRequest, *, model: str | None = None, images: bool = False,
                style: str = "none") -> bytes:
    """The UTF-8 JSON body of a streaming ``POST /chat/completions`` for ``request``.

    ``model`` is the id sent (default: the request's), ``images`` whether the route takes
    image content for it, ``style`` the route's reasoning style (module docstring).
    """
    body: dict[str, Any] = {
        "model": model or request.model,
        "messages": chat_messages(request.messages, images=images,
                                  passback=PASSBACK[style], route=request.route),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = chat_tools(request.tools)
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    body.update(reasoning_fields(style, request.reasoning_effort))
    return json.dumps(body, ensure_ascii=False, default=_plain).encode("utf-8")


def reasoning_fields(style: str, effort: str | None) -> dict[str, Any]:
    """The request fields that carry ``effort`` in reasoning style ``style``."""
    if effort is None or style == "none":
        return {}
    off = effort in OFF_EFFORTS
    if style == "deepseek":
        if off:
            return {"thinking": {"type": "disabled"}}
        return {"thinking": {"type": "enabled"}, "reasoning_effort": effort}
    level = "none" if off else effort
    if style == "openrouter":
        return {"reasoning": {"effort": level}}
    return {"reasoning_effort": level}


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as ``{"type": "function", "function": {...}}`` entries."""
    return [
        {"type": "function", "function": {
            "name": tool.name, "description": tool.description, "parameters": tool.parameters,
        }}
        for tool in tools
    ]


def chat_messages(messages: Sequence[Mapping[str, Any]], *, images: bool = False,
                  passback: str = "none", route: str = "") -> list[dict[str, Any]]:
    """dsh messages as chat-completions messages.

    Several text blocks in one message are joined by a blank line (the format has one
    string per message). A block the role cannot carry is refused as ``bad-request``
    rather than dropped, so the model never answers a conversation it was not shown.
    ``images`` says whether image blocks are sent. ``passback`` says how the reasoning of
    assistant messages that made tool calls goes back (module docstring): ``deepseek``,
    always as ``reasoning_content``; ``as-sent``, in the field it came in, for messages
    ``route`` wrote; ``none``, never. Reasoning is never part of ``content``.
    """
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # image parts of the current run of tool messages
    for position, message in enumerate(messages):
        role = message.get("role")
        if role != "tool" and pending:
            out.append({"role": "user", "content": pending})
            pending = []
        texts: list[str] = []
        thoughts: list[Mapping[str, Any]] = []
        calls: list[dict[str, Any]] = []
        pictures: list[dict[str, Any]] = []
        for block in message.get("content") or ():
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text") or "")
            elif kind == "reasoning" and role == "assistant":
                thoughts.append(block)
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
            # "" and never null: see the module docstring
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if calls and thoughts and passback != "none":
                entry.update(_reasoning_back(message, thoughts, passback, route))
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


def _reasoning_back(message: Mapping[str, Any], thoughts: Sequence[Mapping[str, Any]],
                    passback: str, route: str) -> dict[str, Any]:
    """The fields that carry ``thoughts`` (reasoning blocks of an assistant message that
    made tool calls) back to the server, per ``passback`` (:func:`chat_messages`)."""
    if passback == "deepseek":
        text = "".join(t.get("text") or "" for t in thoughts)
        return {"reasoning_content": text} if text else {}
    source = message.get("source")
    if not route or not isinstance(source, Mapping) or source.get("provider") != route:
        return {}  # another route's reasoning: this server never sent it
    fields: dict[str, Any] = {}
    for thought in thoughts:
        field = thought.get("field")
        if field == "reasoning_details":
            try:
                details = json.loads(thought.get("redacted") or "[]")
            except ValueError:
                continue
            if isinstance(details, list):
                fields.setdefault(field, []).extend(details)
        elif field in KNOWN_FIELDS and thought.get("text"):
            fields[field] = fields.get(field, "") + thought["text"]
    return fields


def _image_part(block: Mapping[str, Any], position: int) -> dict[str, Any]:
    """An image block as an ``image_url`` part carrying a ``data:`` URI."""
    mime, data = block.get("mimeType"), block.get("data")
    if not isinstance(mime, str) or not mime.startswith("image/") or not isinstance(data, str):
        raise _bad_request(f"messages[{position}]: an image block needs an image/* "
                           "mimeType and base64 data")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


class ChunkDecoder:
    """Turns the ``data`` payloads of one response into :mod:`.base` chunks.

    ``redact`` cleans any server text quoted in an error; ``unknown`` is told the name of a
    reasoning field this module does not know, each time it carries text (the route says
    so once). Tool-call ``id`` and ``name`` are passed on once per call even when a server
    repeats them on every fragment, which is the contract the agent reassembles by.
    """

    def __init__(self, redact: Callable[[str], str],
                 unknown: Callable[[str], None] | None = None) -> None:
        self._redact = redact
        self._unknown = unknown
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._ids: dict[int, str] = {}
        self._names: dict[int, str] = {}
        self._details: list[dict[str, Any]] = []
        self.done = False

    @property
    def finished(self) -> bool:
        """Whether a finish reason has arrived, i.e. the answer itself is complete."""
        return self._finish is not None

    def decode(self, event: ServerSentEvent) -> list[Chunk]:
        """The chunks carried by one event; ``[DONE]`` sets :attr:`done`."""
        return self.decode_data(event.data)

    def decode_data(self, data: str) -> list[Chunk]:
        """The chunks carried by one event's ``data``."""
        if data == DONE:
            self.done = True
            return []
        payload = event_payload(data)
        if not isinstance(payload, dict):
            raise ModelError("the server sent an event that is not a JSON object",
                             code="bad-response")
        if "error" in payload:
            message = self._redact(error_message(payload) or "unspecified error")[:500]
            raise ModelError(f"the server reported an error mid-stream: {message}",
                             code="server-error", retryable=True)
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        chunks: list[Chunk] = []
        for choice in payload.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # dsh never asks for n > 1
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise ModelError("the server sent a delta that is not a JSON object",
                                 code="bad-response")
            thought = self._reasoning(delta)
            if thought is not None:
                chunks.append(thought)
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
        closing: list[Chunk] = []
        if self._details:
            closing.append(ReasoningDelta(redacted=json.dumps(self._details, ensure_ascii=False),
                                          field="reasoning_details"))
        if self._usage is not None:
            closing.append(self._usage)
        return [*closing, Finish(reason)]

    def _reasoning(self, delta: Mapping[str, Any]) -> ReasoningDelta | None:
        """The reasoning a delta carries, with the field to send it back in: the text
        from ``reasoning_content``, else ``reasoning``, else the details' own text (some
        servers stream one text under two names; it is shown once); ``reasoning_details``
        are merged for the end, and name the field when present."""
        details = delta.get("reasoning_details")
        field: str | None = None
        detail_text = ""
        if isinstance(details, list) and details:
            detail_text = self._merge_details(details)
            field = "reasoning_details"
        for name in ("reasoning_content", "reasoning"):
            text = delta.get(name)
            if isinstance(text, str) and text:
                return ReasoningDelta(text, field=field or name)
        if field is not None:
            return ReasoningDelta(detail_text, field=field)
        for name, text in delta.items():
            if isinstance(text, str) and text and name not in KNOWN_FIELDS and \
                    _LOOKS_LIKE_REASONING.search(name):
                if self._unknown is not None:
                    self._unknown(name)
                return ReasoningDelta(text)
        return None

    def _merge_details(self, parts: Sequence[Any]) -> str:
        """Fold streamed ``reasoning_details`` fragments into whole parts (fragments of one
        part share its ``index``; text, summaries, data and signatures are joined, other
        keys kept from their first appearance); the fragments' readable text."""
        shown: list[str] = []
        for part in parts:
            if not isinstance(part, dict):
                raise ModelError("the server sent a malformed reasoning_details entry",
                                 code="bad-response")
            index = part.get("index")
            whole = next((d for d in self._details if d.get("index") == index), None) \
                if index is not None else None
            if whole is None:
                self._details.append(dict(part))
            else:
                for key, value in part.items():
                    if key in _JOINED and isinstance(value, str):
                        whole[key] = (whole.get(key) or "") + value
                    elif whole.get(key) is None:
                        whole[key] = value
            for key in ("text", "summary"):
                if isinstance(part.get(key), str):
                    shown.append(part[key])
        return "".join(shown)

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


def _usage(usage: Mapping[str, Any]) -> Usage:
    """A usage record, with the cache and reasoning counts DeepSeek and OpenAI report."""
    hit = _optional(usage, "prompt_cache_hit_tokens")
    if hit is None:
        details = usage.get("prompt_tokens_details")
        hit = _optional(details, "cached_tokens") if isinstance(details, Mapping) else None
    details = usage.get("completion_tokens_details")
    reasoning = _optional(details, "reasoning_tokens") if isinstance(details, Mapping) else None
    return Usage(_count(usage, "prompt_tokens"), _count(usage, "completion_tokens"),
                 cache_hit_tokens=hit, reasoning_tokens=reasoning)


def _optional(usage: Mapping[str, Any], name: str) -> int | None:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(usage: Mapping[str, Any], name: str) -> int:
    return _optional(usage, name) or 0


def _plain(value: Any) -> Any:
    """``json.dumps`` fallback: tool schemas may be read-only mappings."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _bad_request(message: str) -> ModelError:
    return ModelError(f"cannot send this conversation: {message}", code="bad-request")
