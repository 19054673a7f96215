"""The lifecycle hooks' side of telemetry: spans and metrics from the agent's events.

One :class:`Recorder` per running row. Its hooks are inline (plain functions the event
loop calls as each event fires, see :class:`~dsh.runtime.kernel.hooks.Hook`), and do on
the loop only what must exist at once: the turn's span and a running tool call's, whose
contexts their children and a sub-agent's prompt need. Everything after the fact (a model
request's ``chat`` span, ending a call or a turn, the approval span, every measurement) is
queued for the recorder's own thread (:class:`~.later.Later`). The SDK keeps what they
make in memory (the batch processor's bounded queue, the metric aggregations) and exports
on its own threads, so no hook ever waits for a collector.

The shape of a session's trace::

    invoke_agent dsh                 before_turn … after_turn (one per turn)
    ├── chat {model}                 after_model_response: its request's own start and end
    ├── execute_tool {tool}          before_tool_call … after_tool_call
    │   ├── approval {tool}          the approval wait, from the call's payload
    │   └── invoke_agent dsh         a sub-agent's turn, in the child's runtime, whose
    │       └── …                    prompt carried this span's trace context
    └── chat {model}

A turn's parent is the W3C trace context its prompt came with (``_meta.traceparent``),
else the runtime's ``TRACEPARENT``, else none: a new trace. Prompt and answer text (the
turn's input, the model's output, tool arguments and results) are recorded only with
``capture_content``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from dsh.runtime.kernel.hooks import HookEvent
from dsh.runtime.telemetry import names
from dsh.runtime.telemetry.later import Later
from dsh.runtime.telemetry.settings import Settings

logger = logging.getLogger("dsh.telemetry")

_FINISH = {"stop": "stop", "length": "length", "tool-calls": "tool_calls"}
"""dsh's finish reasons as the conventions spell the usual ones (OpenAI's)."""
_PROPAGATOR = TraceContextTextMapPropagator()


class _Turn:
    """A session's running turn: its span and what its children need."""

    __slots__ = ("context", "span", "start_ns", "tools")

    def __init__(self, span: trace.Span, start_ns: int) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span)
        self.start_ns = start_ns
        self.tools: dict[str, tuple[trace.Span, int]] = {}  # call id -> span, start


class Recorder:
    """Spans and metrics of one runtime; ``tracer``/``meter`` are None for a signal off.

    ``parent`` is the runtime's own trace context (its ``TRACEPARENT``), ``provider_url``
    answers a route's base URL (for ``server.address``), ``clock`` the time in ns.
    """

    def __init__(self, settings: Settings, tracer: trace.Tracer | None, meter: Any,
                 *, profile: str, parent: Mapping[str, str] | None,
                 provider_url: Any, clock: Any) -> None:
        self._settings = settings
        self._tracer = tracer or trace.NoOpTracer()
        self._profile = profile
        self._provider_url = provider_url
        self._clock = clock
        self._turns: dict[str, _Turn] = {}
        self._servers: dict[str, dict[str, Any]] = {}
        self._ignored_context = False
        self._root = self._context(parent) if parent else None
        self._metrics = _Metrics(meter) if meter is not None else None
        self._later = Later()

    # -- what other rows ask ----------------------------------------------------------------

    def trace_context(self, session_id: str) -> dict[str, str] | None:
        """The W3C trace context of ``session_id``'s innermost open span (its running
        tool call, else its turn), for a sub-agent prompted from that call."""
        turn = self._turns.get(session_id)
        if turn is None:
            return None
        span = next(reversed(turn.tools.values()))[0] if turn.tools else turn.span
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier or None

    # -- hooks ------------------------------------------------------------------------------

    def before_turn(self, event: HookEvent) -> None:
        """Open the turn's ``invoke_agent`` span under the prompt's trace context."""
        session = event.session_id or ""
        self._end_turn(session, "interrupted", None)  # one left open by a lost after_turn
        parent = self._context(event.attributes) if "traceparent" in event.attributes \
            else self._root
        attributes: dict[str, Any] = {
            names.OPERATION: names.INVOKE_AGENT, names.AGENT_NAME: names.AGENT,
            names.CONVERSATION: session, names.PROFILE: self._profile,
            names.TURN: event.attributes.get("turn", 0)}
        if self._settings.capture_content and isinstance(event.message, str):
            attributes[names.INPUT_MESSAGES] = _messages("user", event.message)
        start = self._clock()
        span = self._tracer.start_span(f"{names.INVOKE_AGENT} {names.AGENT}", context=parent,
                                       kind=SpanKind.INTERNAL, attributes=attributes,
                                       start_time=start)
        self._turns[session] = _Turn(span, start)

    def after_turn(self, event: HookEvent) -> None:
        """End the turn's span with its outcome (an error's code as ``error.type``)."""
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        error = payload.get("error") if isinstance(payload.get("error"), Mapping) else None
        self._end_turn(event.session_id or "", str(payload.get("kind", "completed")), error)

    def after_model_response(self, event: HookEvent) -> None:
        """The request's ``chat`` span, after the fact (it has no children): its own
        start and end, usage, cost, time to first chunk, retries, HTTP status."""
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        request = got if isinstance(got := payload.get("request"), Mapping) else {}
        turn = self._turns.get(event.session_id or "")
        self._later(self._chat, event, turn.context if turn else self._root,
                    self._server(str(request.get("route", ""))))

    def _chat(self, event: HookEvent, parent: Context | None,
              server: dict[str, Any]) -> None:
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        request = payload.get("request") or {}
        timing = payload.get("timing") or {}
        start, end = timing.get("startNs") or self._clock(), timing.get("endNs") or self._clock()
        route, model = str(request.get("route", "")), str(request.get("model", ""))
        common: dict[str, Any] = {names.OPERATION: names.CHAT,
                                  names.PROVIDER: self._settings.provider_names.get(route, route),
                                  names.REQUEST_MODEL: model}
        attributes: dict[str, Any] = {**common, names.ROUTE: route, names.REQUEST_STREAM: True,
                                      names.CONVERSATION: event.session_id or "",
                                      names.RETRIES: int(payload.get("retries") or 0),
                                      **server}
        if request.get("effort"):
            attributes[names.EFFORT] = str(request["effort"])
        if request.get("maxTokens"):
            attributes[names.REQUEST_MAX_TOKENS] = int(request["maxTokens"])
        if isinstance(payload.get("status"), int):
            attributes[names.HTTP_STATUS] = payload["status"]
        first = timing.get("firstChunkNs")
        if first:
            attributes[names.TIME_TO_FIRST_CHUNK] = (first - start) / 1e9
        error = payload.get("error") if isinstance(payload.get("error"), Mapping) else None
        usage = payload.get("usage")
        if error is None:
            attributes[names.RESPONSE_MODEL] = model
            attributes[names.FINISH_REASONS] = [_FINISH.get(str(payload.get("finish")),
                                                            str(payload.get("finish")))]
            attributes.update(_usage(usage))
            if self._settings.capture_content and isinstance(event.message, str):
                attributes[names.OUTPUT_MESSAGES] = _messages("assistant", event.message)
        else:
            attributes[names.ERROR_TYPE] = str(error.get("code") or "_OTHER")
        span = self._tracer.start_span(f"{names.CHAT} {model}", context=parent,
                                       kind=SpanKind.CLIENT, attributes=attributes,
                                       start_time=start)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, str(error.get("message") or "")))
        span.end(end_time=end)
        if self._metrics is not None:
            self._metrics.model_call(common | server, (end - start) / 1e9,
                                     (first - start) / 1e9 if first else None, usage, error)

    def before_tool_call(self, event: HookEvent) -> None:
        """Open the call's ``execute_tool`` span under the turn's."""
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        turn = self._turns.get(event.session_id or "")
        name = str(payload.get("name", ""))
        attributes: dict[str, Any] = {
            names.OPERATION: names.EXECUTE_TOOL, names.TOOL_NAME: name,
            names.TOOL_CALL_ID: str(payload.get("callId", "")), names.TOOL_TYPE: "function",
            names.CONVERSATION: event.session_id or ""}
        if event.step is not None:
            attributes[names.STEP] = event.step
        if self._settings.capture_content and isinstance(payload.get("arguments"), str):
            attributes[names.TOOL_ARGUMENTS] = payload["arguments"]
        start = self._clock()
        span = self._tracer.start_span(f"{names.EXECUTE_TOOL} {name}",
                                       context=turn.context if turn else self._root,
                                       kind=SpanKind.INTERNAL, attributes=attributes,
                                       start_time=start)
        if turn is not None:
            turn.tools[str(payload.get("callId", ""))] = (span, start)
        else:
            span.end()

    def after_tool_call(self, event: HookEvent) -> None:
        """End the call's span: outcome, facts (sandbox rung, MCP server), the approval
        wait as a child span, the result text with ``capture_content``."""
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        turn = self._turns.get(event.session_id or "")
        opened = turn.tools.pop(str(payload.get("callId", "")), None) if turn else None
        if opened is not None:
            self._later(self._tool_ended, payload, *opened, self._clock())

    def _tool_ended(self, payload: Mapping[str, Any], span: trace.Span, start: int,
                    end: int) -> None:
        name = str(payload.get("name", ""))
        error = payload.get("error") if isinstance(payload.get("error"), Mapping) else None
        outcome = (str(error.get("code", "failed")).lower() if error is not None
                   else "tool_error" if payload.get("isError") else "ok")
        attributes: dict[str, Any] = {names.TOOL_OUTCOME: outcome}
        facts = got if isinstance(got := payload.get("facts"), Mapping) else {}
        for key, value in facts.items():
            if isinstance(value, (str, int, float, bool)):
                attributes[names.FACTS.get(key, f"dsh.{key}")] = value
        if "mcp.method.name" in facts:
            attributes[names.TOOL_TYPE] = "extension"
        if outcome != "ok":
            attributes[names.ERROR_TYPE] = outcome
            span.set_status(Status(StatusCode.ERROR, _first_line(payload.get("text"))
                                   if self._settings.capture_content else outcome))
        elif self._settings.capture_content and isinstance(payload.get("text"), str):
            attributes[names.TOOL_RESULT] = payload["text"]
        span.set_attributes(attributes)
        approval = payload.get("approval")
        if isinstance(approval, Mapping):
            self._approval(span, name, approval)
        span.end(end_time=end)
        if self._metrics is not None:
            self._metrics.tool_call(name, outcome, (end - start) / 1e9)

    def session_end(self, event: HookEvent) -> None:
        """Close whatever the session left open (a runtime shutting down mid-turn)."""
        self._end_turn(event.session_id or "", "interrupted", None)

    def close(self) -> None:
        """End every open span and record what is queued (the row is going away)."""
        for session in list(self._turns):
            self._end_turn(session, "interrupted", None)
        self._later.close()

    # -- parts ------------------------------------------------------------------------------

    def _end_turn(self, session: str, kind: str, error: Mapping[str, Any] | None) -> None:
        turn = self._turns.pop(session, None)
        if turn is not None:
            self._later(self._turn_ended, turn, kind, error, self._clock())

    def _turn_ended(self, turn: _Turn, kind: str, error: Mapping[str, Any] | None,
                    end: int) -> None:
        for span, _ in turn.tools.values():  # calls a cancelled turn left without a result
            span.set_attributes({names.TOOL_OUTCOME: kind, names.ERROR_TYPE: kind})
            span.set_status(Status(StatusCode.ERROR, f"the turn ended {kind}"))
            span.end(end_time=end)
        if kind == "completed":
            turn.span.set_attribute(names.TURN_OUTCOME, kind)
        else:
            code = str(error.get("code") or kind) if error else kind
            turn.span.set_attributes({names.TURN_OUTCOME: kind, names.ERROR_TYPE: code})
            turn.span.set_status(Status(StatusCode.ERROR, str(error.get("message") or kind)
                                        if error else kind))
        turn.span.end(end_time=end)
        if self._metrics is not None:
            self._metrics.turn(kind, error, (end - turn.start_ns) / 1e9)

    def _approval(self, call: trace.Span, name: str, approval: Mapping[str, Any]) -> None:
        start, end = approval.get("started_ns"), approval.get("ended_ns")
        if not isinstance(start, int) or not isinstance(end, int):
            return
        decision = str(approval.get("decision", ""))
        span = self._tracer.start_span(
            f"{names.APPROVAL_SPAN} {name}", context=trace.set_span_in_context(call),
            kind=SpanKind.INTERNAL, start_time=start,
            attributes={names.TOOL_NAME: name, names.APPROVAL_DECISION: decision})
        span.end(end_time=end)
        if self._metrics is not None:
            self._metrics.approval(name, decision, (end - start) / 1e9)

    def _server(self, route: str) -> dict[str, Any]:
        """``server.address``/``server.port`` of a route's base URL (once per route)."""
        found = self._servers.get(route)
        if found is None:
            found = {}
            url = self._provider_url(route)
            if isinstance(url, str):
                parts = urlsplit(url)
                if parts.hostname:
                    found = {names.SERVER_ADDRESS: parts.hostname,
                             names.SERVER_PORT: parts.port or (
                                 443 if parts.scheme == "https" else 80)}
            self._servers[route] = found
        return found

    def _context(self, carrier: Mapping[str, Any]) -> Context | None:
        """The context a W3C carrier names; None, said once, for one that does not parse."""
        fields = {k: str(carrier[k]) for k in ("traceparent", "tracestate") if k in carrier}
        context = _PROPAGATOR.extract(fields)
        if trace.get_current_span(context).get_span_context().is_valid:
            return context
        if not self._ignored_context:
            self._ignored_context = True
            logger.warning("telemetry: a trace context that is not a W3C traceparent was "
                           "ignored; the turn starts a trace of its own")
        return None


class _Metrics:
    """The instruments, and what each event records on them."""

    def __init__(self, meter: Any) -> None:
        self.tokens = names.create_token_usage(meter)
        self.duration = names.create_operation_duration(meter)
        self.first_chunk = names.create_first_chunk(meter)
        self.cost = meter.create_counter(names.COST_METRIC, unit="{USD}",
                                         description="Estimated cost of model requests, "
                                                     "from the route's price table")
        self.turns = meter.create_histogram(names.TURN_DURATION, unit="s",
                                            description="Duration of agent turns")
        self.tools = meter.create_histogram(names.TOOL_DURATION, unit="s",
                                            description="Duration of tool calls, their "
                                                        "approval wait included")
        self.approvals = meter.create_histogram(names.APPROVAL_DURATION, unit="s",
                                                description="Time a tool call waited for "
                                                            "its approval")
        self.errors = meter.create_counter(names.ERRORS, unit="{error}",
                                           description="Failed model requests, tool calls "
                                                       "and turns, by kind")
        self._token_attributes: dict[tuple[Any, ...], Mapping[str, Any]] = {}

    def model_call(self, common: Mapping[str, Any], seconds: float, first: float | None,
                   usage: Any, error: Mapping[str, Any] | None) -> None:
        attributes = dict(common)
        if error is not None:
            code = str(error.get("code") or "_OTHER")
            self.errors.add(1, {names.ERROR_TYPE: code, names.ERROR_SOURCE: "model"})
            attributes[names.ERROR_TYPE] = code
        self.duration.record(seconds, attributes)
        if first is not None:
            self.first_chunk.record(first, common)
        counts = _usage(usage)
        for kind, key in (("input", names.INPUT_TOKENS), ("output", names.OUTPUT_TOKENS)):
            if key in counts:
                self.tokens.record(counts[key], self._typed(common, kind))
        if names.COST in counts:
            self.cost.add(counts[names.COST], common)

    def _typed(self, common: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
        """``common`` with ``gen_ai.token.type``, made once per set of attributes."""
        key = (kind, *common.values())
        found = self._token_attributes.get(key)
        if found is None:
            found = self._token_attributes[key] = {**common, names.TOKEN_TYPE: kind}
        return found

    def tool_call(self, name: str, outcome: str, seconds: float) -> None:
        self.tools.record(seconds, {names.TOOL_NAME: name, names.TOOL_OUTCOME: outcome})
        if outcome != "ok":
            self.errors.add(1, {names.ERROR_TYPE: outcome, names.ERROR_SOURCE: "tool"})

    def approval(self, name: str, decision: str, seconds: float) -> None:
        self.approvals.record(seconds, {names.TOOL_NAME: name,
                                        names.APPROVAL_DECISION: decision})

    def turn(self, kind: str, error: Mapping[str, Any] | None, seconds: float) -> None:
        self.turns.record(seconds, {names.TURN_OUTCOME: kind})
        if kind not in ("completed", "cancelled"):
            code = str(error.get("code") or kind) if error else kind
            self.errors.add(1, {names.ERROR_TYPE: code, names.ERROR_SOURCE: "turn"})


def _usage(usage: Any) -> dict[str, Any]:
    """A :class:`~dsh.runtime.providers.base.Usage` (a NamedTuple, or its dict) as span
    attributes; counts the provider did not report are left out."""
    if usage is None:
        return {}
    get = usage.get if isinstance(usage, Mapping) else (lambda k: getattr(usage, k, None))
    found: dict[str, Any] = {}
    for key, name in (("input_tokens", names.INPUT_TOKENS),
                      ("output_tokens", names.OUTPUT_TOKENS),
                      ("cache_hit_tokens", names.CACHE_READ_TOKENS),
                      ("cache_write_tokens", names.CACHE_WRITE_TOKENS),
                      ("reasoning_tokens", names.REASONING_TOKENS)):
        value = get(key)
        if isinstance(value, int):
            found[name] = value
    cost = get("cost_usd")
    if isinstance(cost, (int, float)):
        found[names.COST] = float(cost)
    if get("estimated"):
        found[names.ESTIMATED] = True
    return found


def _messages(role: str, text: str) -> str:
    """One message as the conventions' ``gen_ai.input/output.messages`` JSON."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}],
                      ensure_ascii=False)


def _first_line(text: Any) -> str:
    return str(text).strip().splitlines()[0][:200] if isinstance(text, str) and text.strip() \
        else ""
