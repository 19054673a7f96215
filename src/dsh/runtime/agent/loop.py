"""The turn loop: steps of "ask the model, run its tool calls" until it answers.

One :class:`Turn` handles one prompt. Each step sends the whole conversation and the tool
schemas, streams the answer (``assistant/delta`` as text arrives, ``assistant/reasoning-delta``
as reasoning does), records the ``assistant/message``, and runs its tool calls in order
(``tool/call`` → guardrails → tool → ``tool/result``). The turn ends when the model answers
without tool calls (``completed``), stops at its token limit (``max-tokens``), fails
(``error``) or uses up ``max_steps``. Cancellation is the caller's: the runner cancels the
task running :meth:`Turn.run` and then calls :meth:`Turn.close`, which also answers any
tool call left without a result, so the history stays one a provider will accept on the
next turn.

Two model failures are worth one more request within the step, and only one:

* a stream that broke off mid-answer (``stream-interrupted``): what it streamed is void
  (``assistant/retry`` tells clients to drop it) and the request is sent again; a half
  message is never recorded;
* a conversation the provider says exceeds its context window (``context-overflow``):
  the history is compacted (``context/compacted``, reason ``overflow``) and the request
  sent again; when nothing can be compacted, or it still overflows, the turn fails with
  an error that says so.

An answer made only of reasoning (no text, no tool call) is recorded, so the session stays
consistent, and ends the turn as an error (``empty-answer``): there is nothing to show.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from dsh.runtime.agent import choices, events
from dsh.runtime.agent.assembly import Assembly
from dsh.runtime.agent.session import Session
from dsh.runtime.agent.toolrun import Answer, Approver, execute
from dsh.runtime.kernel.guardrails import GuardrailChain
from dsh.runtime.providers.base import (
    Exchange,
    FinishReason,
    ModelError,
    ModelRequest,
    Provider,
    TextDelta,
    ToolSpec,
)
from dsh.runtime.tools.base import Tool, ToolContext, ToolResult
from dsh.runtime.tools.clientside import ClientSide
from dsh.runtime.tools.confine import Boundary

logger = logging.getLogger("dsh.agent")


class Plan(NamedTuple):
    """What one turn uses, fixed when it starts (a config change applies to the next)."""

    route: str
    provider: Provider
    model: str
    max_steps: int
    system_prompt: str
    max_tokens: int | None = None
    reasoning_effort: str | None = None

    @property
    def context_window(self) -> int:
        """The model's context window: the route's for that model where it says
        (``context_window_for``), else the route's own."""
        window_for = getattr(self.provider, "context_window_for", None)
        return window_for(self.model) if window_for is not None else \
            self.provider.context_window


class Outcome(NamedTuple):
    """How a turn ended: ``turn/end.data.reason``."""

    kind: str
    error: Mapping[str, str] | None = None

    @classmethod
    def failed(cls, message: str, code: str) -> Outcome:
        """An ``error`` outcome carrying ``{message, code}``."""
        return cls("error", {"message": message, "code": code})


COMPLETED = Outcome("completed")
MAX_TOKENS = Outcome("max-tokens")
CANCELLED = Outcome("cancelled")


class Host(Protocol):
    """What a turn needs from the agent around it."""

    approver: Approver | None

    @property
    def guardrails(self) -> GuardrailChain:
        """The chain every tool call passes before it runs."""
        ...

    @property
    def env(self) -> Mapping[str, str]:
        """The environment tools run with."""
        ...

    async def fire(self, session: Session, event: str, *, turn: int | None = None,
                   step: int | None = None, message: Any = None, payload: Any = None) -> None:
        """Notify lifecycle hooks; never raises for a hook's fault, never stalls."""
        ...

    async def compact_if_needed(self, session: Session, plan: Plan, turn: int) -> None:
        """Compact the history when it nears the context window (before each request)."""
        ...

    async def compact_for_overflow(self, session: Session, plan: Plan, turn: int) -> bool:
        """Compact after the provider refused the history as too long; False when nothing
        could be compacted (or compaction failed, reported as an ``error`` event)."""
        ...

    def tools_for(self, session_id: str) -> Mapping[str, Tool]:
        """The tools this session's model may call now (registered plus per-session)."""
        ...

    def boundary(self, session: Session) -> Boundary:
        """What the session's tools may reach now (root, granted roots, protected)."""
        ...

    def client_side(self, session_id: str) -> ClientSide | None:
        """What the session's client does for its tools (its files, its terminal)."""
        ...

    async def contexts(self, session: Session, turn: int) -> list[tuple[str, str]]:
        """The plugins' context sections for this turn, as ``(name, text)``."""
        ...


class Turn:
    """Turn number ``number`` of ``session``, answering ``prompt``."""

    def __init__(self, session: Session, number: int, prompt: dict[str, Any], host: Host):
        self.session = session
        self.number = number
        self.prompt = prompt
        self.host = host
        self.cancelled = asyncio.Event()
        self._step = 0
        self._step_open = False
        self._unanswered: dict[str, int | None] = {}  # call id -> seq of its tool/call
        self._images = False

    async def run(self, plan: Plan) -> Outcome:
        """Run steps until the model is done; provider failures become ``error``."""
        images_for = getattr(plan.provider, "supports_images_for", None)
        self._images = bool(images_for(plan.model) if images_for is not None
                            else getattr(plan.provider, "supports_images", False))
        for step in range(1, plan.max_steps + 1):
            self._begin_step(step)
            if step == 1:
                await self._open(plan)
            try:
                content, finish = await self._ask(plan)
            except ModelError as exc:
                return Outcome.failed(exc.message, exc.code)
            except Exception as exc:
                logger.warning("provider %s failed", plan.route, exc_info=True)
                return Outcome.failed(f"{type(exc).__name__}: {exc}", "provider-error")
            calls = [b for b in content if b["type"] == "tool-call"]
            self._unanswered = {b["id"]: None for b in calls}
            if finish == "length":
                return MAX_TOKENS
            if not calls:
                if not any(b["type"] == "text" for b in content) and any(
                        b["type"] == "reasoning" for b in content):
                    return Outcome.failed(
                        "the model answered with reasoning only and no text; ask again, "
                        "or rephrase the request", "empty-answer")
                return COMPLETED
            for block in calls:
                # A tool may swallow the task's cancellation; the turn still stops here.
                if self.cancelled.is_set():
                    return CANCELLED
                await self._call_tool(block)
            self._end_step()
            if self.cancelled.is_set():
                return CANCELLED
        return Outcome.failed(
            f"the turn used all {plan.max_steps} steps (max_steps) without a final answer",
            "max-steps",
        )

    def close(self, outcome: Outcome) -> None:
        """Finish the turn's events: answer unanswered calls, end the step, ``turn/end``."""
        note = {"max-tokens": "not run: the response was cut off at the token limit",
                "cancelled": "not run: the turn was cancelled"}.get(
            outcome.kind, "not run: the turn ended with an error")
        for call_id in list(self._unanswered):
            self._answer(call_id, Answer(ToolResult(f"Error: {note}", is_error=True),
                                         {"name": "ToolNotRunError", "code": "NOT_RUN"}))
        if self._step_open:
            self._end_step()
        self.session.emit(events.TURN_END, events.turn_end(self.number, outcome.kind,
                                                           outcome.error))

    # -- steps ---------------------------------------------------------------------------

    def _begin_step(self, step: int) -> None:
        self._step = step
        self._step_open = True
        self.session.emit(events.STEP_START, events.step_data(self.number, step))

    def _end_step(self) -> None:
        self._step_open = False
        self.session.emit(events.STEP_END, events.step_data(self.number, self._step))

    async def _open(self, plan: Plan) -> None:
        """Step 1: the system message (once per session), the prompt, the context.

        Context (the working directory, then each plugin section) is added only when it
        differs from what the session was last shown, so an unchanged section costs nothing.
        """
        s, record = self.session, self.session.record
        if record.system is None:
            record.system = events.system_message(plan.system_prompt)
            s.emit(events.SYSTEM_MESSAGE, events.placed(self.number, 1, record.system),
                   events.APPEND)
        s.messages.append(self.prompt)
        shown = s.emit(events.USER_MESSAGE, self.prompt, events.APPEND)
        if record.context_cwd != s.cwd:
            context = events.context_message(s.cwd)
            s.messages.append(context)
            s.emit(events.USER_MESSAGE, context, events.APPEND)
            record.context_cwd = s.cwd
        for name, text in await self.host.contexts(s, self.number):
            if record.context_shown.get(name) != text:
                section = events.plugin_context_message(name, text)
                s.messages.append(section)
                s.emit(events.USER_MESSAGE, section, events.APPEND)
                record.context_shown[name] = text
        s.emit(events.REQUEST_CONTEXT, events.request_context(
            plan.route, plan.model, plan.context_window))
        if not record.title:
            record.title = events.title_from(self.prompt)
            if record.title:
                s.emit(events.SESSION_TITLE, events.session_title(record.title, shown["seq"]))

    async def _ask(self, plan: Plan) -> tuple[list[dict[str, Any]], FinishReason]:
        """One model call: stream it, record the assistant message, notify hooks.

        ``after_model_response`` comes once per call, its retries included, and also when
        the call fails (its payload then has ``error`` instead of the message).
        """
        s = self.session
        await self.host.compact_if_needed(s, plan, self.number)
        retried_stream = retried_overflow = False
        timing = _Timing()
        try:
            while True:
                assembly = Assembly(f"call_{self.number}_{self._step}")
                try:
                    await self._stream(plan, assembly, timing)
                except ModelError as exc:
                    if exc.code == "stream-interrupted" and not retried_stream:
                        retried_stream = True
                        timing.retries += 1 + exc.retries
                        logger.warning("route %s: %s; asking once more", plan.route,
                                       exc.message)
                        s.emit(events.ASSISTANT_RETRY,
                               events.retry(self.number, self._step, exc.message, exc.code))
                        continue
                    if exc.code == "context-overflow":
                        if not retried_overflow and await self.host.compact_for_overflow(
                                s, plan, self.number):
                            retried_overflow = True
                            timing.retries += 1 + exc.retries
                            continue
                        raise ModelError(
                            f"{exc.message}; " + ("it is still too long after compacting the "
                                                  "history" if retried_overflow else
                                                  "compacting the history did not shorten it")
                            + ": start a new session, or use a model with a larger context "
                              "window", code="context-overflow", status=exc.status) from exc
                    raise
                break
        except Exception as exc:
            failed = timing.facts(plan)
            failed["error"] = error = _model_error(exc)
            failed["status"] = error["status"]
            failed["retries"] += getattr(exc, "retries", 0)
            await self._fire("after_model_response", payload=failed)
            raise
        content = assembly.content()
        message = events.assistant_message(content, provider=plan.route, model=plan.model)
        s.messages.append(message)
        s.emit(events.ASSISTANT_MESSAGE,
               events.assistant_data(self.number, self._step, message, assembly.usage),
               events.APPEND)
        exchange = assembly.exchange
        await self._fire("after_model_response", message=events.message_text(message),
                         payload={"message": message, "usage": assembly.usage,
                                  "finish": assembly.finish, **timing.facts(plan, exchange)})
        return content, assembly.finish

    async def _stream(self, plan: Plan, assembly: Assembly, timing: _Timing) -> None:
        """Send the conversation as it is now and stream the answer into ``assembly``,
        showing text and reasoning as each arrives."""
        s = self.session
        tools = self.host.tools_for(s.id)
        system = s.record.system
        assert system is not None  # _open set it in step 1, before any request
        request = ModelRequest(
            session_id=s.id,
            model=plan.model,
            messages=(system, *s.messages),
            tools=tuple(ToolSpec(t.name, t.description, t.parameters) for t in tools.values()),
            max_tokens=plan.max_tokens,
            reasoning_effort=plan.reasoning_effort,
            route=plan.route,
        )
        await self._fire("before_model_request", payload=request)
        stream = plan.provider.stream(request)
        try:
            async for chunk in stream:
                if timing.first_chunk_ns is None and not isinstance(chunk, Exchange):
                    timing.first_chunk_ns = time.time_ns()
                shown = assembly.add(chunk)
                if isinstance(shown, TextDelta):
                    s.emit(events.ASSISTANT_DELTA,
                           events.assistant_delta(self.number, self._step, 0, shown.text))
                elif shown is not None:
                    s.emit(events.ASSISTANT_REASONING_DELTA, events.assistant_delta(
                        self.number, self._step, shown.index, shown.text))
        finally:
            # Close at once (a cancelled or failed step), not when the GC finds it: a
            # provider's stream may hold a connection.
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _call_tool(self, block: Mapping[str, Any]) -> None:
        s = self.session
        call_id, name = block["id"], block["name"]
        shown = s.emit(events.TOOL_CALL, events.tool_call(
            self.number, self._step, call_id, name, block["arguments"]))
        self._unanswered[call_id] = shown["seq"]
        summary = {"callId": call_id, "name": name, "arguments": block["arguments"]}
        await self._fire("before_tool_call", message=name, payload=summary)
        context = ToolContext(s.id, self.host.env, self.cancelled, lambda: s.cwd, s.change_cwd,
                              emit=s.emit, history=lambda: copy.deepcopy(s.messages),
                              images_supported=self._images,
                              boundary=self.host.boundary(s), keep=s.keep,
                              call_id=call_id, client=self.host.client_side(s.id))
        answer = await execute(block, tools=self.host.tools_for(s.id),
                               guardrails=self.host.guardrails,
                               approver=self.host.approver, context=context, grant=s.grant,
                               memory=choices.Memory(s),
                               policy=s.record.settings.get("policy"))
        self._answer(call_id, answer)
        approval = answer.approval
        await self._fire("after_tool_call", message=name, payload={
            **summary, "text": answer.result.text, "isError": answer.result.is_error,
            "error": None if answer.error is None else dict(answer.error),
            "facts": dict(answer.result.facts),
            "approval": None if approval is None else approval._asdict()})

    async def _fire(self, event: str, *, message: Any = None, payload: Any = None) -> None:
        await self.host.fire(self.session, event, turn=self.number, step=self._step,
                             message=message, payload=payload)

    def _answer(self, call_id: str, answer: Answer) -> None:
        """Record the result of ``call_id`` in history and emit ``tool/result``."""
        call_seq = self._unanswered.pop(call_id)
        result = answer.result
        message = events.tool_message(call_id, result.text, is_error=result.is_error,
                                      images=[(i.mime_type, i.data) for i in result.images])
        self.session.messages.append(message)
        data = events.placed(self.number, self._step, message)
        if answer.error is not None:
            data["error"] = dict(answer.error)
        if result.diff is not None:
            data["diff"] = dict(result.diff)
        extra: dict[str, Any] = dict(events.APPEND)
        if call_seq is not None:
            extra["sourceEventSeqs"] = [call_seq]
        self.session.emit(events.TOOL_RESULT, data, extra)


class _Timing:
    """What one model call's ``after_model_response`` reports besides the answer: when it
    was sent and first answered (wall clock, ns), and the retries it took."""

    __slots__ = ("first_chunk_ns", "retries", "start_ns")

    def __init__(self) -> None:
        self.start_ns = time.time_ns()
        self.first_chunk_ns: int | None = None
        self.retries = 0

    def facts(self, plan: Plan, exchange: Exchange | None = None) -> dict[str, Any]:
        """The payload keys ``request``, ``timing``, ``retries`` and ``status``."""
        return {"request": {"route": plan.route, "model": plan.model,
                            "effort": plan.reasoning_effort, "maxTokens": plan.max_tokens},
                "timing": {"startNs": self.start_ns, "firstChunkNs": self.first_chunk_ns,
                           "endNs": time.time_ns()},
                "retries": self.retries + (exchange.retries if exchange else 0),
                "status": exchange.status if exchange else None}


def _model_error(exc: Exception) -> dict[str, Any]:
    """A failed model call as ``after_model_response`` reports it: ``{code, message,
    status}`` (the retries the route made are counted in the payload's ``retries``)."""
    if isinstance(exc, ModelError):
        return {"code": exc.code, "message": exc.message, "status": exc.status}
    return {"code": "provider-error", "message": f"{type(exc).__name__}: {exc}",
            "status": None}
