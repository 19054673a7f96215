"""The OpenAI Responses wire format: request bodies out, streamed events in.

Written from the API's types as the ``openai`` package publishes them
(``openai.types.responses``); no I/O here, so the translation is tested from plain values
and :mod:`.responses` only moves bytes (through :mod:`.http_route`).

Out (``POST <base>/responses`` with ``stream: true``): the conversation is sent whole
every time (``store: false`` by default, so nothing is kept server-side and no
``previous_response_id`` is needed):

* Leading system messages become ``instructions``; a later one a ``developer`` message.
* User messages become ``message`` items of ``input_text`` and (on routes that take
  images) ``input_image`` parts with a ``data:`` URL.
* An assistant message becomes, in order: its ``reasoning`` items (only those this route
  produced, each with its ``id``, its summary or reasoning text as it came, and its
  ``encrypted_content``, which is how a reasoning model keeps its chain of thought across
  tool calls when nothing is stored), an assistant ``message`` with its text, and one
  ``function_call`` item per tool call (``call_id``, ``name``, ``arguments`` as the JSON
  text the model wrote).
* A tool message becomes a ``function_call_output`` item (``call_id``; the text, or a list
  of ``input_text`` and ``input_image`` parts when the tool returned images).
* Tools are ``function`` tools (``strict: false``: dsh's schemas are not written for
  strict mode). ``reasoning: {effort, summary}`` carries the effort (``off`` is ``none``)
  and asks for readable summaries; with ``store: false``,
  ``include: ["reasoning.encrypted_content"]`` asks for the encrypted reasoning to pass
  back. A model that does not reason (its facts list no effort) gets neither.

In: named events, each a JSON object with its ``type`` and ``sequence_number``.
``response.output_item.added`` opens an item (``reasoning``, ``message``,
``function_call``); ``response.reasoning_summary_text.delta``, ``response.reasoning_text
.delta``, ``response.output_text.delta``, ``response.refusal.delta`` and
``response.function_call_arguments.delta`` stream its content;
``response.output_item.done`` closes it (a reasoning item's final ``encrypted_content`` is
only whole there, as the types say). ``response.completed`` ends the answer with its usage
(``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``);
``response.incomplete`` ends it early (``max_output_tokens``: the ``length`` finish);
``response.failed`` and ``error`` are failures. A stream that ends before one of those is
a broken stream (:mod:`.http_route` asks again once, and never keeps half an answer).
Events this version does not know are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dsh.runtime.providers.base import (
    OFF_EFFORTS,
    Chunk,
    Finish,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from dsh.runtime.providers.http_route import typed_event

if TYPE_CHECKING:
    from dsh.runtime.transports.sse import ServerSentEvent

ENCRYPTED = "reasoning.encrypted_content"
_RETRYABLE = frozenset({"server_error", "rate_limit_exceeded"})


def encode_body(request: ModelRequest, *, model: str, images: bool = False,
                reasoning: bool = True, store: bool = False,
                summary: str | None = "auto") -> bytes:
    """The UTF-8 JSON body of a streaming ``POST /responses`` for ``request``.

    ``reasoning`` says whether the model reasons (else no ``reasoning`` or ``include``
    is sent), ``store`` whether the server keeps the response, ``summary`` the reasoning
    summary asked for (None: none).
    """
    instructions, items = input_items(request.messages, images=images, route=request.route,
                                      store=store)
    body: dict[str, Any] = {"model": model, "input": items, "stream": True, "store": store}
    if instructions:
        body["instructions"] = instructions
    if request.tools:
        body["tools"] = tools(request.tools)
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if reasoning:
        settings: dict[str, Any] = {}
        if request.reasoning_effort is not None:
            off = request.reasoning_effort in OFF_EFFORTS
            settings["effort"] = "none" if off else request.reasoning_effort
        if summary is not None:
            settings["summary"] = summary
        if settings:
            body["reasoning"] = settings
        if not store:
            body["include"] = [ENCRYPTED]
    return json.dumps(body, ensure_ascii=False, default=_plain).encode("utf-8")


def tools(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as Responses ``function`` tools."""
    return [{"type": "function", "name": t.name, "description": t.description,
             "parameters": t.parameters, "strict": False} for t in specs]


def input_items(messages: Sequence[Mapping[str, Any]], *, images: bool = False,
                route: str = "", store: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """dsh messages as ``(instructions, input items)``; see the module docstring.

    A block the role cannot carry is refused as ``bad-request`` rather than dropped, so
    the model never answers a conversation it was not shown. Without ``store`` a
    reasoning item that came with neither encrypted content nor its reasoning text is
    left out: the server kept nothing it could find by the id alone.
    """
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for position, message in enumerate(messages):
        role = message.get("role")
        content = message.get("content") or ()
        if role == "system":
            text = "\n\n".join(b.get("text") or "" for b in content if b.get("type") == "text")
            if not items:
                instructions.append(text)
            else:
                items.append({"type": "message", "role": "developer",
                              "content": [{"type": "input_text", "text": text}]})
        elif role == "user":
            parts = _parts(content, position, images, role)
            if parts:
                items.append({"type": "message", "role": "user", "content": parts})
        elif role == "assistant":
            items += _assistant_items(message, position, route, store)
        elif role == "tool":
            items.append(_output_item(message, position, images))
        else:
            raise _bad_request(f"messages[{position}]: unknown role {role!r}")
    return "\n\n".join(t for t in instructions if t), items


def _parts(content: Sequence[Mapping[str, Any]], position: int, images: bool,
           role: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            if block.get("text"):
                parts.append({"type": "input_text", "text": block["text"]})
        elif kind == "image":
            if images:
                parts.append(_image(block, position))
            else:
                parts.append({"type": "input_text", "text": (
                    f"[{block.get('mimeType') or 'an'} image left out: this model route "
                    "does not take images]")})
        else:
            raise _bad_request(f"messages[{position}]: a {role} message cannot carry a "
                               f"{kind!r} block")
    return parts


def _assistant_items(message: Mapping[str, Any], position: int, route: str,
                     store: bool) -> list[dict[str, Any]]:
    source = message.get("source")
    own = bool(route) and isinstance(source, Mapping) and source.get("provider") == route
    thoughts: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "reasoning":
            findable = store or isinstance(block.get("redacted"), str) or \
                block.get("field") == "content"
            if own and findable and isinstance(block.get("signature"), str) and \
                    block["signature"]:
                thoughts.append(_reasoning_item(block))
        elif kind == "text":
            if block.get("text"):
                texts.append(block["text"])
        elif kind == "tool-call":
            if not block.get("id") or not block.get("name"):
                raise _bad_request(f"messages[{position}]: tool-call without id or name")
            calls.append({"type": "function_call", "call_id": block["id"],
                          "name": block["name"],
                          "arguments": block.get("arguments") or "{}"})
        else:
            raise _bad_request(f"messages[{position}]: an assistant message cannot carry "
                               f"a {kind!r} block")
    said = [{"type": "message", "role": "assistant", "content": "\n\n".join(texts)}] \
        if texts else []
    return thoughts + said + calls


def _reasoning_item(block: Mapping[str, Any]) -> dict[str, Any]:
    """A reasoning block this route produced, as the reasoning item it came as."""
    text = block.get("text") or ""
    item: dict[str, Any] = {"type": "reasoning", "id": block["signature"], "summary": []}
    if block.get("field") == "content":
        item["content"] = [{"type": "reasoning_text", "text": text}] if text else []
    elif text:
        item["summary"] = [{"type": "summary_text", "text": text}]
    if isinstance(block.get("redacted"), str):
        item["encrypted_content"] = block["redacted"]
    return item


def _output_item(message: Mapping[str, Any], position: int, images: bool) -> dict[str, Any]:
    call_id = message.get("toolCallId")
    if not isinstance(call_id, str) or not call_id:
        raise _bad_request(f"messages[{position}]: tool message without toolCallId")
    parts = _parts(message.get("content") or (), position, images, "tool")
    output: Any = "\n\n".join(p["text"] for p in parts) \
        if all(p["type"] == "input_text" for p in parts) else parts
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _image(block: Mapping[str, Any], position: int) -> dict[str, Any]:
    mime, data = block.get("mimeType"), block.get("data")
    if not isinstance(mime, str) or not mime.startswith("image/") or not isinstance(data, str):
        raise _bad_request(f"messages[{position}]: an image block needs an image/* "
                           "mimeType and base64 data")
    return {"type": "input_image", "image_url": f"data:{mime};base64,{data}", "detail": "auto"}


class _Item:
    """One output item as its events arrive."""

    __slots__ = ("kind", "ordinal", "parts", "streamed")

    def __init__(self, kind: str, ordinal: int) -> None:
        self.kind = kind
        self.ordinal = ordinal
        self.streamed = False  # whether any delta carried its content
        self.parts = -1  # the last reasoning summary part begun


class EventDecoder:
    """Turns the events of one Responses stream into :mod:`.base` chunks.

    ``redact`` cleans server text quoted in an error. Tool calls and reasoning items are
    numbered in their order among items of their kind, which is what the agent
    reassembles by; an item is found by its ``output_index``.
    """

    def __init__(self, redact: Callable[[str], str]) -> None:
        self._redact = redact
        self._items: dict[int, _Item] = {}
        self._thoughts = 0
        self._calls = 0
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self.done = False

    @property
    def finished(self) -> bool:
        """Whether the response completed (or ended incomplete, with its reason)."""
        return self._finish is not None

    def decode(self, event: ServerSentEvent) -> list[Chunk]:
        """The chunks one event carries."""
        kind, payload = typed_event(event.data)
        if kind == "response.output_item.added":
            return self._added(payload)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta",
                    "response.output_text.delta", "response.refusal.delta",
                    "response.function_call_arguments.delta"):
            return self._delta(kind, payload)
        if kind == "response.reasoning_summary_part.added":
            return self._summary_part(payload)
        if kind == "response.output_item.done":
            return self._done(payload)
        if kind in ("response.completed", "response.incomplete"):
            self._end(kind, payload)
        elif kind == "response.failed":
            raise self._failed(payload)
        elif kind == "error":
            raise self._error(payload.get("code"), payload.get("message"))
        return []  # created, in_progress, part and text "done" events, what is newer

    def end(self) -> list[Chunk]:
        """The closing chunks: usage if reported, then :class:`Finish`."""
        assert self._finish is not None
        return [self._usage, self._finish] if self._usage is not None else [self._finish]

    # -- items ----------------------------------------------------------------------------

    def _item(self, payload: Mapping[str, Any]) -> _Item:
        index = payload.get("output_index")
        item = self._items.get(index) if isinstance(index, int) else None
        if item is None:
            raise ModelError("the server sent an event for an output item it never added",
                             code="bad-response")
        return item

    def _added(self, payload: Mapping[str, Any]) -> list[Chunk]:
        index, item = payload.get("output_index"), payload.get("item")
        if not isinstance(index, int) or not isinstance(item, dict):
            raise ModelError("the server sent a malformed response.output_item.added",
                             code="bad-response")
        kind = item.get("type")
        if kind == "reasoning":
            self._items[index] = _Item("reasoning", self._thoughts)
            self._thoughts += 1
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ModelError("the server sent a function_call without call_id or name",
                                 code="bad-response")
            entry = self._items[index] = _Item("call", self._calls)
            self._calls += 1
            return [ToolCallDelta(entry.ordinal, id=call_id, name=name)]
        else:
            self._items[index] = _Item("message" if kind == "message" else "other", 0)
        return []

    def _delta(self, kind: str, payload: Mapping[str, Any]) -> list[Chunk]:
        item = self._item(payload)
        text = payload.get("delta")
        if not isinstance(text, str) or not text:
            return []
        item.streamed = True
        if kind == "response.function_call_arguments.delta" and item.kind == "call":
            return [ToolCallDelta(item.ordinal, arguments=text)]
        if kind == "response.reasoning_summary_text.delta" and item.kind == "reasoning":
            return [ReasoningDelta(text, item.ordinal, field="summary")]
        if kind == "response.reasoning_text.delta" and item.kind == "reasoning":
            return [ReasoningDelta(text, item.ordinal, field="content")]
        if item.kind == "message":
            return [TextDelta(text)]
        return []

    def _summary_part(self, payload: Mapping[str, Any]) -> list[Chunk]:
        """A new summary part: a blank line between parts, as they read as paragraphs."""
        item = self._item(payload)
        begun, item.parts = item.parts, payload.get("summary_index", item.parts + 1)
        if item.kind == "reasoning" and begun >= 0 and item.streamed:
            return [ReasoningDelta("\n\n", item.ordinal)]
        return []

    def _done(self, payload: Mapping[str, Any]) -> list[Chunk]:
        item, whole = self._item(payload), payload.get("item")
        if not isinstance(whole, dict):
            raise ModelError("the server sent a malformed response.output_item.done",
                             code="bad-response")
        if item.kind == "reasoning":
            return [self._reasoning_done(item, whole)]
        if item.kind == "call" and not item.streamed:
            arguments = whole.get("arguments")
            item.streamed = True
            return [ToolCallDelta(item.ordinal, arguments=arguments
                                  if isinstance(arguments, str) and arguments else "{}")]
        if item.kind == "message" and not item.streamed:
            item.streamed = True
            text = "".join(p.get("text") or p.get("refusal") or "" for p in
                           whole.get("content") or () if isinstance(p, dict))
            return [TextDelta(text)] if text else []
        return []

    def _reasoning_done(self, item: _Item, whole: Mapping[str, Any]) -> ReasoningDelta:
        """The finished reasoning item: its id and encrypted content (whole only here),
        and its text if no delta carried it (a server that does not stream summaries)."""
        content = [t for p in whole.get("content") or ()
                   if isinstance(p, dict) and isinstance(t := p.get("text"), str)]
        summary = [t for p in whole.get("summary") or ()
                   if isinstance(p, dict) and isinstance(t := p.get("text"), str)]
        field = "content" if content else "summary"
        text = "" if item.streamed else "\n\n".join(content or summary)
        item_id, encrypted = whole.get("id"), whole.get("encrypted_content")
        return ReasoningDelta(text, item.ordinal,
                              signature=item_id if isinstance(item_id, str) and item_id
                              else None,
                              redacted=encrypted if isinstance(encrypted, str) else None,
                              field=field)

    # -- the end ---------------------------------------------------------------------------

    def _end(self, kind: str, payload: Mapping[str, Any]) -> None:
        response = payload.get("response")
        if not isinstance(response, dict):
            raise ModelError(f"the server sent a {kind} without its response",
                             code="bad-response")
        usage = response.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        self.done = True
        if kind == "response.incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            if reason == "content_filter":
                raise ModelError("the server's content filter stopped the answer",
                                 code="content-filter")
            if reason != "max_output_tokens":
                raise ModelError(f"the response ended incomplete ({reason or 'no reason'})",
                                 code="incomplete")
            self._finish = Finish("length")
            return
        self._finish = Finish("tool-calls" if self._calls else "stop")

    def _failed(self, payload: Mapping[str, Any]) -> ModelError:
        response = payload.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        if not isinstance(error, dict):
            error = {}
        return self._error(error.get("code"), error.get("message"))

    def _error(self, code: Any, message: Any) -> ModelError:
        text = self._redact(message if isinstance(message, str) and message
                            else "unspecified error")[:500]
        kind = code if isinstance(code, str) and code else "error"
        return ModelError(f"the server reported an error mid-stream ({kind}): {text}",
                          code="server-error", retryable=code is None or code in _RETRYABLE)


def _usage(usage: Mapping[str, Any]) -> Usage:
    """A response's usage: input (cached and cache-written parts), output (reasoning)."""
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    output = usage.get("output_tokens_details")
    output = output if isinstance(output, Mapping) else {}
    return Usage(_count(usage, "input_tokens") or 0, _count(usage, "output_tokens") or 0,
                 cache_hit_tokens=_count(details, "cached_tokens"),
                 cache_write_tokens=_count(details, "cache_write_tokens"),
                 reasoning_tokens=_count(output, "reasoning_tokens"))


def _count(values: Mapping[str, Any], name: str) -> int | None:
    value = values.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _plain(value: Any) -> Any:
    """``json.dumps`` fallback: tool schemas may be read-only mappings."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _bad_request(message: str) -> ModelError:
    return ModelError(f"cannot send this conversation: {message}", code="bad-request")
