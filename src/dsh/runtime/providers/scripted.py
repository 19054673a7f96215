"""The scripted provider (``llm-scripted``): a key-free, deterministic model for tests and demos.

A script is a YAML list (or a JSONL file, one object a line) of model responses, answered
in order, separately for each session::

    - text: "Let me check where I am."
      tool_calls: [{name: working_directory, arguments: {}}]
    - reasoning: "The user wants the directory; I know it now."   # streamed first
      text: "Done."
      usage: {inputTokens: 10, outputTokens: 2}   # optional; estimated when absent
                                                  # (also cacheHitTokens, reasoningTokens,
                                                  # costUsd, as a priced route reports)
    - error: {message: "rate limited", code: "rate-limit"}   # raised as a model error
    - {text: "slow", delay_ms: 500}                # waits first (cancellation tests)
    - text: "You are in {where}."                  # quotes what a tool answered
      quote: {where: {call: call_1, match: 'directory: "(.*)"'}}

Each response may have ``reasoning`` (the model's thinking, streamed before the text as
its own kind), ``text``, ``tool_calls`` (``name``, ``arguments`` as a mapping or JSON text,
optional ``id``; ids default to ``call_<n>``, counted per session), ``usage``, ``finish``
(``stop`` or ``length``), ``error``, ``delay_ms`` and ``chunk_delay_ms`` (a pause between
streamed pieces, for a model that visibly takes its time). Reasoning, text and arguments
are streamed in ``chunk_size`` pieces so the agent's reassembly is exercised; a response
without ``usage`` reports an estimate, marked ``estimated``. A session that
asks past the end gets a model error saying so, never a hang. The file is read at
``start``; a bad one is a ConfigError naming the file and, where known, the line.

``quote`` lets an answer say what the tools found, as a real model reads its
conversation: each ``{NAME}`` in ``text`` and ``reasoning`` is replaced by what
``quote.NAME`` takes from the result of tool call ``call`` in the request: the whole
text; with ``match`` (a regular expression, searched line-wise), its first group (or
the whole match), or ``as`` expanded with its groups (``\\1``, ``\\g<name>``); ``else``
when there is no such result or no match (default: a note saying so). So a scripted
answer never claims what its tools did not say.

Row config ``supports_images`` says whether the route claims to take image content (tools
such as ``read_image`` check it), and ``record`` names a JSONL file to which every request
is appended as ``{"sessionId", "model", "messages", "tools"}`` (tool names), so a test can
read what the model was actually sent.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeGuard

from dsh._version import __version__
from dsh.core.errors import ConfigError
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar, RuntimeContext
from dsh.runtime.providers.base import (
    Chunk,
    Finish,
    FinishReason,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

_Fail = Callable[[str], ConfigError]
_KEYS = ("reasoning", "text", "tool_calls", "usage", "finish", "error", "delay_ms",
         "chunk_delay_ms", "quote")
_CALL_KEYS = ("name", "arguments", "id")
_QUOTE_KEYS = ("call", "match", "as", "else")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ScriptedCall(NamedTuple):
    """A tool call the script makes; ``arguments`` is JSON text, as a model sends it."""

    name: str
    arguments: str
    id: str | None = None


class Quote(NamedTuple):
    """What a ``{NAME}`` placeholder takes from a tool call's result (see the module doc)."""

    call: str
    match: re.Pattern[str] | None = None
    template: str | None = None
    otherwise: str | None = None

    def text(self, results: Mapping[str, str]) -> str:
        """The quoted text, given the results of the conversation's calls by id."""
        result = results.get(self.call)
        if result is None:
            return self._else(f"(no result of {self.call})")
        if self.match is None:
            return result.strip()
        found = self.match.search(result)
        if found is None:
            return self._else(f"(nothing in {self.call}'s result matches)")
        if self.template is not None:
            return found.expand(self.template)
        return (found.group(1) if found.re.groups else found.group(0)).strip()

    def _else(self, note: str) -> str:
        return note if self.otherwise is None else self.otherwise


class ScriptedResponse(NamedTuple):
    """One scripted model answer (or failure, when ``error`` is set)."""

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    usage: Usage | None = None
    finish: FinishReason | None = None
    error: tuple[str, str] | None = None
    delay_ms: float = 0
    reasoning: str = ""
    chunk_delay_ms: float = 0
    quotes: tuple[tuple[str, Quote], ...] = ()


# -- reading a script ------------------------------------------------------------------


def load_script(path: str) -> tuple[ScriptedResponse, ...]:
    """Read and check a script file (``.jsonl``: JSON lines; anything else: YAML)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"scripted provider: cannot read script {path}: {exc}") from exc
    items = _jsonl(path, text) if path.endswith(".jsonl") else _yaml(path, text)
    return tuple(_response(item, where) for item, where in items)


def _jsonl(path: str, text: str) -> list[tuple[Any, str]]:
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append((json.loads(line), f"{path}:{number}"))
        except ValueError as exc:
            raise ConfigError(f"{path}:{number}: invalid JSON: {exc}") from exc
    return items


def _yaml(path: str, text: str) -> list[tuple[Any, str]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        node = yaml.compose(text, Loader=loader)
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = path if mark is None else f"{path}:{mark.line + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from exc
    if not isinstance(data, list):
        raise ConfigError(f"{path}: a script must be a list of responses")
    assert node is not None  # a list was loaded, so a document was composed
    lines = [child.start_mark.line + 1 for child in node.value]
    return [(item, f"{path}:{line}: response {i}")
            for i, (item, line) in enumerate(zip(data, lines, strict=True), 1)]


def _response(item: Any, where: str) -> ScriptedResponse:
    def fail(problem: str) -> ConfigError:
        return ConfigError(f"{where}: {problem}")

    if not isinstance(item, Mapping):
        raise fail("a response must be a mapping")
    unknown = [k for k in item if k not in _KEYS]
    if unknown:
        raise fail(f"unknown key '{unknown[0]}' (expected: {', '.join(_KEYS)})")
    text, reasoning = item.get("text", ""), item.get("reasoning", "")
    if not isinstance(text, str):
        raise fail("'text' must be a string")
    if not isinstance(reasoning, str):
        raise fail("'reasoning' must be a string")
    calls = item.get("tool_calls") or []
    if not isinstance(calls, list):
        raise fail("'tool_calls' must be a list")
    finish = item.get("finish")
    if finish not in (None, "stop", "length"):
        raise fail("'finish' must be 'stop' or 'length'")
    delays = [item.get(key, 0) for key in ("delay_ms", "chunk_delay_ms")]
    for key, delay in zip(("delay_ms", "chunk_delay_ms"), delays, strict=True):
        if not _number(delay) or delay < 0:
            raise fail(f"'{key}' must be a number >= 0")
    return ScriptedResponse(text, tuple(_call(c, fail) for c in calls),
                            _usage(item.get("usage"), fail), finish,
                            _error(item.get("error"), fail), delays[0], reasoning,
                            delays[1], _quotes(item.get("quote"), fail))


def _quotes(item: Any, fail: _Fail) -> tuple[tuple[str, Quote], ...]:
    if item is None:
        return ()
    if not isinstance(item, Mapping):
        raise fail("'quote' must map placeholder names to {call, match?, as?, else?}")
    quotes = []
    for name, spec in item.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise fail(f"quote name {name!r} must be a word (letters, digits, _)")
        if not isinstance(spec, Mapping) or any(k not in _QUOTE_KEYS for k in spec):
            raise fail(f"quote '{name}' must be a mapping of call, match, as and else")
        values = [spec.get(k) for k in _QUOTE_KEYS]
        if not isinstance(values[0], str) or not values[0]:
            raise fail(f"quote '{name}' needs the id of a tool call ('call')")
        if any(v is not None and not isinstance(v, str) for v in values[1:]):
            raise fail(f"quote '{name}': match, as and else must be strings")
        try:
            pattern = None if values[1] is None else re.compile(values[1], re.MULTILINE)
        except re.error as exc:
            raise fail(f"quote '{name}': 'match' is not a regular expression: {exc}"
                       ) from None
        if values[2] is not None and pattern is None:
            raise fail(f"quote '{name}': 'as' needs a 'match' to take groups from")
        quotes.append((name, Quote(values[0], pattern, values[2], values[3])))
    return tuple(quotes)


def _call(item: Any, fail: _Fail) -> ScriptedCall:
    if not isinstance(item, Mapping) or any(k not in _CALL_KEYS for k in item):
        raise fail("a tool call must be a mapping of name, arguments and optional id")
    name, arguments, call_id = item.get("name"), item.get("arguments", {}), item.get("id")
    if not isinstance(name, str) or not name:
        raise fail("a tool call needs a 'name'")
    if isinstance(arguments, Mapping):
        arguments = json.dumps(arguments)
    elif not isinstance(arguments, str):
        raise fail("tool call 'arguments' must be a mapping or JSON text")
    if call_id is not None and not isinstance(call_id, str):
        raise fail("tool call 'id' must be a string")
    return ScriptedCall(name, arguments, call_id)


def _usage(item: Any, fail: _Fail) -> Usage | None:
    if item is None:
        return None
    inputs, outputs = (item.get(k) if isinstance(item, Mapping) else None
                       for k in ("inputTokens", "outputTokens"))
    if not (_count(inputs) and _count(outputs)):
        raise fail("'usage' must be {inputTokens, outputTokens} with counts >= 0")
    optional: list[int | None] = []
    for key in ("cacheHitTokens", "reasoningTokens"):
        value = item.get(key)
        if value is not None and not _count(value):
            raise fail(f"'usage' {key} must be a count >= 0")
        optional.append(value)
    cost = item.get("costUsd")
    if cost is not None and (not _number(cost) or cost < 0):
        raise fail("'usage' costUsd must be a number >= 0")
    return Usage(inputs, outputs, cache_hit_tokens=optional[0], reasoning_tokens=optional[1],
                 cost_usd=None if cost is None else float(cost))


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _error(item: Any, fail: _Fail) -> tuple[str, str] | None:
    if item is None:
        return None
    if not isinstance(item, Mapping) or not isinstance(item.get("message"), str):
        raise fail("'error' must be {message, code?}")
    code = item.get("code", "scripted-error")
    if not isinstance(code, str):
        raise fail("'error' code must be a string")
    return item["message"], code


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- the model -------------------------------------------------------------------------


class ScriptedModel:
    """The published ``llm:<route>`` object: answers each session from the script's start."""

    default_model = "scripted"

    def __init__(self, responses: Sequence[ScriptedResponse], *, chunk_size: int,
                 context_window: int, supports_images: bool = False,
                 record: str | None = None) -> None:
        self.responses = tuple(responses)
        self.chunk_size = chunk_size
        self.context_window = context_window
        self.supports_images = supports_images
        self._record = record
        self._next: dict[str, int] = {}
        self._calls: dict[str, int] = {}

    def accepts_model(self, model: str) -> bool:
        """Any model id: the script answers whatever the client asked for."""
        return True

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """The session's next scripted response, in chunks."""
        session = request.session_id
        if self._record is not None:
            _append_record(self._record, request)
        position = self._next.get(session, 0)
        if position >= len(self.responses):
            raise ModelError(f"scripted provider: script exhausted after "
                             f"{len(self.responses)} responses", code="script-exhausted")
        self._next[session] = position + 1
        response = self.responses[position]
        if response.delay_ms:
            await asyncio.sleep(response.delay_ms / 1000)
        if response.error is not None:
            raise ModelError(response.error[0], code=response.error[1])
        reasoning, text = response.reasoning, response.text
        if response.quotes:
            reasoning, text = _quoted(response.quotes, request, reasoning, text)
        pause = response.chunk_delay_ms / 1000
        for i, piece in enumerate(self._pieces(reasoning)):
            if pause and i:
                await asyncio.sleep(pause)
            yield ReasoningDelta(piece)
        for i, piece in enumerate(self._pieces(text)):
            if pause and (i or reasoning):
                await asyncio.sleep(pause)
            yield TextDelta(piece)
        for index, call in enumerate(response.tool_calls):
            self._calls[session] = self._calls.get(session, 0) + 1
            yield ToolCallDelta(index, id=call.id or f"call_{self._calls[session]}",
                                name=call.name)
            for piece in self._pieces(call.arguments):
                yield ToolCallDelta(index, arguments=piece)
        yield response.usage or _estimate(request, response)
        yield Finish(response.finish or ("tool-calls" if response.tool_calls else "stop"))

    def _pieces(self, text: str) -> list[str]:
        return [text[i:i + self.chunk_size] for i in range(0, len(text), self.chunk_size)]


def _quoted(quotes: Sequence[tuple[str, Quote]], request: ModelRequest,
            *texts: str) -> tuple[str, ...]:
    """``texts`` with each ``{NAME}`` of ``quotes`` replaced from the request's results."""
    results: dict[str, str] = {}
    for message in request.messages:
        if message.get("role") == "tool":
            results[str(message.get("toolCallId"))] = "".join(
                b.get("text", "") for b in message.get("content", ())
                if b.get("type") == "text")
    values = {f"{{{name}}}": quote.text(results) for name, quote in quotes}
    pattern = re.compile("|".join(re.escape(key) for key in values))
    return tuple(pattern.sub(lambda m: values[m.group()], text) for text in texts)


def _append_record(path: str, request: ModelRequest) -> None:
    """Append ``request`` to the record file at ``path`` as one JSON line."""
    line = json.dumps({"sessionId": request.session_id, "model": request.model,
                       "messages": list(request.messages),
                       "tools": [t.name for t in request.tools]}, default=dict)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _estimate(request: ModelRequest, response: ScriptedResponse) -> Usage:
    """Deterministic token counts (about four characters a token) when the script has none,
    marked as estimated."""
    sent = sum(len(b.get("text", "")) for m in request.messages for b in m.get("content", ()))
    said = (len(response.reasoning) + len(response.text)
            + sum(len(c.arguments) for c in response.tool_calls))
    return Usage(math.ceil(sent / 4), math.ceil(said / 4), estimated=True)


class ScriptedProvider(Plugin):
    """Plugin row ``llm-scripted``: publishes a :class:`ScriptedModel` as ``llm:<route>``."""

    manifest = Manifest(
        id="llm-scripted",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="A deterministic, key-free model that replays a script.",
        config_schema={
            "type": "object",
            "properties": {
                "script": {"type": "string", "description": "YAML or JSONL script file."},
                "route": {"type": "string", "default": "scripted"},
                "chunk_size": {"type": "integer", "minimum": 1, "default": 16},
                "context_window": {"type": "integer", "minimum": 1, "default": 128000},
                "supports_images": {"type": "boolean", "default": False,
                                    "description": "Claim to take image content."},
                "record": {"type": "string",
                           "description": "JSONL file every request is appended to."},
            },
            "required": ["script"],
            "additionalProperties": False,
        },
    )

    @classmethod
    def published_route(cls, config: Any) -> str | None:
        """The route a row with ``config`` (raw: not validated) publishes."""
        route = config.get("route", "scripted") if isinstance(config, Mapping) else None
        return route if isinstance(route, str) else None

    def apply(self, reg: Registrar) -> None:
        """Declare the route's service."""
        reg.service(self._service)

    async def start(self, rt: RuntimeContext) -> None:
        """Read the script (relative paths from the launch directory) and publish."""
        path = os.path.join(rt.cwd, self.config["script"])
        record = self.config.get("record")
        model = ScriptedModel(load_script(path), chunk_size=self.config["chunk_size"],
                              context_window=self.config["context_window"],
                              supports_images=self.config["supports_images"],
                              record=None if record is None else os.path.join(rt.cwd, record))
        rt.publish(self._service, model)

    @property
    def _service(self) -> str:
        return "llm:" + self.config["route"]
