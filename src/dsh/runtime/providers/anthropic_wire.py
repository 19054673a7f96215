"""The Anthropic Messages wire format: request bodies out, streamed events in.

No I/O here, so the translation is tested from plain values and :mod:`.anthropic` only
moves bytes (through :mod:`.http_route`).

Out (``POST /v1/messages`` with ``stream: true``):

* System messages become the top-level ``system`` blocks.
* User messages become ``user`` messages of ``text`` and (on routes that take images)
  base64 ``image`` blocks. Tool messages become ``tool_result`` blocks (``tool_use_id``,
  ``is_error``, text and images) in the ``user`` message that follows the assistant's
  ``tool_use``, as the API requires; consecutive messages of one role are merged, and the
  tool results come first in theirs.
* Assistant messages become ``thinking`` blocks (their ``signature`` unchanged, and
  ``redacted_thinking`` with its ``data``), then the ``text``, then one ``tool_use`` per
  tool call with ``input`` parsed from the call's JSON text (an object; text the model
  got wrong travels as ``{}``, its tool result having said why). Signed thinking goes
  back only to the route that produced it (the message's ``source.provider``): a
  signature is checked by the server that made it, and reasoning from another route has
  none. An assistant message left with no block is dropped (the API refuses empty ones).
* ``cache_control: {"type": "ephemeral"}`` marks the end of the system prompt and the
  last block of the conversation, so each step of a tool loop reads the previous one's
  prefix from the prompt cache (``prompt_cache: false`` turns it off).
* Reasoning effort, in the thinking form the route chose for the model
  (:mod:`.anthropic`): ``adaptive`` (Claude 4.6 and later) sends ``thinking: {"type":
  "adaptive"}`` with ``output_config.effort``; ``enabled`` (Claude 4.5 and earlier)
  sends ``thinking: {"type": "enabled", "budget_tokens": N}`` with ``N`` derived from the
  effort (:func:`budget_tokens`: at least 1024 and below ``max_tokens``, as the API
  requires); ``deepseek`` (DeepSeek's Anthropic endpoint) sends ``thinking: {"type":
  "enabled"}`` with ``output_config.effort`` as given (DeepSeek maps every level itself);
  ``none`` sends neither. ``none``/``off`` send ``{"type": "disabled"}`` in every form
  but ``none`` (a model that refuses it is refused before this). No effort sends
  nothing: the model's default applies.

In: the named events ``message_start`` (input usage, cache fields), ``content_block_start``
/ ``content_block_delta`` (``text_delta``, ``input_json_delta``, ``thinking_delta``,
``signature_delta``) / ``content_block_stop``, ``message_delta`` (stop reason, cumulative
usage), ``message_stop``, ``ping`` and ``error``. Block types and events this version does
not know are skipped, as the API's versioning policy asks of clients.
"""

from __future__ import annotations

import json
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
from dsh.runtime.providers.http_route import error_message, typed_event

if TYPE_CHECKING:
    from dsh.runtime.transports.sse import ServerSentEvent

EPHEMERAL = {"type": "ephemeral"}
_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}
_RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


def encode_body(request: ModelRequest, *, model: str, max_tokens: int, images: bool = False,
                form: str = "none", cache: bool = True) -> bytes:
    """The UTF-8 JSON body of a streaming ``POST /v1/messages`` for ``request``; ``form``
    is the thinking form the route chose for the model (module docstring)."""
    system, messages = convert(request.messages, images=images, route=request.route)
    limit = request.max_tokens or max_tokens
    body: dict[str, Any] = {"model": model, "max_tokens": limit, "messages": messages,
                            "stream": True}
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = tools(request.tools)
    body.update(thinking_fields(form, request.reasoning_effort, limit))
    if cache:
        _mark_cache(system, messages)
    return json.dumps(body, ensure_ascii=False, default=_plain).encode("utf-8")


BUDGET_SHARE: Mapping[str, float] = {
    "minimal": 0.0, "low": 0.125, "medium": 0.25, "high": 0.5, "xhigh": 0.75, "max": 0.875}
"""The share of ``max_tokens`` each effort may spend thinking in the ``enabled`` form (the
rest is left for the answer); never under the API's minimum, 1024."""
MIN_BUDGET = 1024


def budget_tokens(effort: str, max_tokens: int) -> int:
    """The ``budget_tokens`` for ``effort`` under ``max_tokens``: its share of the output
    limit, at least 1024 (the API's minimum) and below ``max_tokens`` (as it requires).
    A limit of 1024 or less leaves no room: the caller refuses that first."""
    share = int(max_tokens * BUDGET_SHARE[effort])
    return max(MIN_BUDGET, min(share, max_tokens - 1))


def thinking_fields(form: str, effort: str | None, max_tokens: int) -> dict[str, Any]:
    """The request fields that carry ``effort`` in thinking form ``form``."""
    if effort is None or form == "none":
        return {}
    if effort in OFF_EFFORTS:
        return {"thinking": {"type": "disabled"}}
    if form == "enabled":
        return {"thinking": {"type": "enabled",
                             "budget_tokens": budget_tokens(effort, max_tokens)}}
    kind = "enabled" if form == "deepseek" else "adaptive"
    return {"thinking": {"type": kind}, "output_config": {"effort": effort}}


def tools(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as Messages API tools."""
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in specs]


def convert(messages: Sequence[Mapping[str, Any]], *, images: bool = False,
            route: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """dsh messages as ``(system blocks, messages)``; see the module docstring.

    A block the role cannot carry is refused as ``bad-request`` rather than dropped, so
    the model never answers a conversation it was not shown.
    """
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for position, message in enumerate(messages):
        role = message.get("role")
        content = message.get("content") or ()
        if role == "system":
            system.extend(_text(b.get("text")) for b in content
                          if b.get("type") == "text" and b.get("text"))
        elif role == "user":
            add("user", _user_blocks(content, position, images))
        elif role == "assistant":
            add("assistant", _assistant_blocks(message, position, route))
        elif role == "tool":
            add("user", [_tool_result(message, position, images)])
        else:
            raise _bad_request(f"messages[{position}]: unknown role {role!r}")
    return system, out


def _text(text: Any) -> dict[str, Any]:
    return {"type": "text", "text": str(text)}


def _user_blocks(content: Sequence[Mapping[str, Any]], position: int,
                 images: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            if block.get("text"):
                blocks.append(_text(block["text"]))
        elif kind == "image":
            blocks.append(_image(block, position) if images else _text(
                f"[{block.get('mimeType') or 'an'} image left out: this model route does "
                "not take images]"))
        else:
            raise _bad_request(f"messages[{position}]: a user message cannot carry a "
                               f"{kind!r} block")
    return blocks


def _assistant_blocks(message: Mapping[str, Any], position: int,
                      route: str) -> list[dict[str, Any]]:
    source = message.get("source")
    own = isinstance(source, Mapping) and source.get("provider") == route and bool(route)
    thinking: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "reasoning":
            if own and isinstance(block.get("redacted"), str):
                thinking.append({"type": "redacted_thinking", "data": block["redacted"]})
            elif own and isinstance(block.get("signature"), str) and block["signature"]:
                thinking.append({"type": "thinking", "thinking": block.get("text") or "",
                                 "signature": block["signature"]})
        elif kind == "text":
            if block.get("text"):
                texts.append(block["text"])
        elif kind == "tool-call":
            if not block.get("id") or not block.get("name"):
                raise _bad_request(f"messages[{position}]: tool-call without id or name")
            calls.append({"type": "tool_use", "id": block["id"], "name": block["name"],
                          "input": _input(block.get("arguments"))})
        else:
            raise _bad_request(f"messages[{position}]: an assistant message cannot carry "
                               f"a {kind!r} block")
    text = [_text("\n\n".join(texts))] if texts else []
    return thinking + text + calls


def _input(arguments: Any) -> Any:
    """A tool call's JSON text as the object ``tool_use.input`` needs."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool_result(message: Mapping[str, Any], position: int, images: bool) -> dict[str, Any]:
    call_id = message.get("toolCallId")
    if not isinstance(call_id, str) or not call_id:
        raise _bad_request(f"messages[{position}]: tool message without toolCallId")
    blocks = _user_blocks(message.get("content") or (), position, images)
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    if blocks:
        result["content"] = blocks
    if message.get("isError"):
        result["is_error"] = True
    return result


def _image(block: Mapping[str, Any], position: int) -> dict[str, Any]:
    mime, data = block.get("mimeType"), block.get("data")
    if not isinstance(mime, str) or not mime.startswith("image/") or not isinstance(data, str):
        raise _bad_request(f"messages[{position}]: an image block needs an image/* "
                           "mimeType and base64 data")
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}


def _mark_cache(system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> None:
    """Cache breakpoints: the end of the system prompt and of the conversation."""
    if system:
        system[-1]["cache_control"] = EPHEMERAL
    if messages:
        last = messages[-1]["content"][-1]
        if last.get("type") not in ("thinking", "redacted_thinking"):
            last["cache_control"] = EPHEMERAL


class EventDecoder:
    """Turns the events of one Messages stream into :mod:`.base` chunks.

    ``redact`` cleans server text quoted in an error. Tool calls and reasoning blocks are
    numbered in their order among blocks of their kind, which is what the agent
    reassembles by.
    """

    def __init__(self, redact: Callable[[str], str]) -> None:
        self._redact = redact
        self._blocks: dict[int, list[Any]] = {}  # event index -> [kind, ordinal, has_input]
        self._tools = 0
        self._thoughts = 0
        self._stop: str | None = None
        self._input: int | None = None
        self._cache_read: int | None = None
        self._cache_write: int | None = None
        self._output: int | None = None
        self.done = False

    @property
    def finished(self) -> bool:
        """Whether the stop reason has arrived, i.e. the answer itself is complete."""
        return self._stop is not None

    def decode(self, event: ServerSentEvent) -> list[Chunk]:
        """The chunks one event carries."""
        kind, payload = typed_event(event.data)
        if kind == "message_start":
            message = payload.get("message")
            self._take_usage(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "content_block_start":
            return self._start(payload)
        elif kind == "content_block_delta":
            return self._delta(payload)
        elif kind == "content_block_stop":
            return self._stop_block(payload)
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop = delta["stop_reason"]
            self._take_usage(payload.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise self._error(payload)
        return []  # ping, and what a newer API version adds

    def end(self) -> list[Chunk]:
        """The closing chunks: usage if reported, then :class:`Finish`. A refusal raises."""
        assert self._stop is not None
        if self._stop == "refusal":
            raise ModelError("the model declined to answer (stop reason: refusal)",
                             code="refusal")
        reason = _STOP.get(self._stop)
        if reason is None:
            raise ModelError(f"the server sent an unknown stop_reason {self._stop!r}",
                             code="bad-response")
        closing: list[Chunk] = []
        if self._input is not None or self._output is not None:
            hit, write = self._cache_read, self._cache_write
            total = (self._input or 0) + (hit or 0) + (write or 0)
            closing.append(Usage(total, self._output or 0, cache_hit_tokens=hit,
                                 cache_write_tokens=write))
        return [*closing, Finish(reason)]

    # -- blocks ---------------------------------------------------------------------------

    def _start(self, payload: Mapping[str, Any]) -> list[Chunk]:
        index, block = payload.get("index"), payload.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            raise ModelError("the server sent a malformed content_block_start",
                             code="bad-response")
        kind = block.get("type")
        if kind == "text":
            self._blocks[index] = ["text", 0, False]
            text = block.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "tool_use":
            ordinal = self._tools
            self._tools += 1
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ModelError("the server sent a tool_use block without id or name",
                                 code="bad-response")
            start = block.get("input")
            has_input = isinstance(start, dict) and bool(start)
            self._blocks[index] = ["tool", ordinal, has_input]
            arguments = json.dumps(start, ensure_ascii=False) if has_input else ""
            return [ToolCallDelta(ordinal, id=call_id, name=name, arguments=arguments)]
        if kind in ("thinking", "redacted_thinking"):
            ordinal = self._thoughts
            self._thoughts += 1
            self._blocks[index] = ["thinking", ordinal, False]
            if kind == "redacted_thinking":
                data = block.get("data")
                return [ReasoningDelta(index=ordinal,
                                       redacted=data if isinstance(data, str) else "")]
            text, signature = block.get("thinking"), block.get("signature")
            if not isinstance(signature, str) or not signature:
                signature = None
            return [ReasoningDelta(text if isinstance(text, str) else "", ordinal,
                                   signature=signature)]
        self._blocks[index] = ["other", 0, False]  # server tools, citations: not ours
        return []

    def _delta(self, payload: Mapping[str, Any]) -> list[Chunk]:
        index, delta = payload.get("index"), payload.get("delta")
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None or not isinstance(delta, dict):
            raise ModelError("the server sent a delta for a block it never started",
                             code="bad-response")
        kind, ordinal = block[0], block[1]
        delta_type = delta.get("type")
        if kind == "text" and delta_type == "text_delta":
            text = delta.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "tool" and delta_type == "input_json_delta":
            part = delta.get("partial_json")
            if isinstance(part, str) and part:
                block[2] = True
                return [ToolCallDelta(ordinal, arguments=part)]
            return []
        if kind == "thinking" and delta_type == "thinking_delta":
            text = delta.get("thinking")
            return [ReasoningDelta(text, ordinal)] if isinstance(text, str) and text else []
        if kind == "thinking" and delta_type == "signature_delta":
            signature = delta.get("signature")
            if isinstance(signature, str) and signature:
                return [ReasoningDelta(index=ordinal, signature=signature)]
        return []

    def _stop_block(self, payload: Mapping[str, Any]) -> list[Chunk]:
        block = self._blocks.get(payload.get("index"))  # type: ignore[arg-type]
        if block is not None and block[0] == "tool" and not block[2]:
            block[2] = True
            return [ToolCallDelta(block[1], arguments="{}")]  # a call without arguments
        return []

    # -- usage and errors -----------------------------------------------------------------

    def _take_usage(self, usage: Any) -> None:
        """Keep the latest of each count (``message_delta`` usage is cumulative)."""
        if not isinstance(usage, dict):
            return
        for name, attr in (("input_tokens", "_input"), ("output_tokens", "_output"),
                           ("cache_read_input_tokens", "_cache_read"),
                           ("cache_creation_input_tokens", "_cache_write")):
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, attr, value)

    def _error(self, payload: Mapping[str, Any]) -> ModelError:
        error = payload.get("error")
        kind = error.get("type") if isinstance(error, dict) else None
        message = self._redact(error_message(payload) or "unspecified error")[:500]
        code = "overloaded" if kind == "overloaded_error" else "server-error"
        return ModelError(f"the server reported an error mid-stream ({kind or 'error'}): "
                          f"{message}", code=code, retryable=kind in _RETRYABLE_ERRORS)


def _plain(value: Any) -> Any:
    """``json.dumps`` fallback: tool schemas may be read-only mappings."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _bad_request(message: str) -> ModelError:
    return ModelError(f"cannot send this conversation: {message}", code="bad-request")
