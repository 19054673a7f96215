"""The turn runner: each session's queued prompts, one turn at a time, and what turns read.

``enqueue`` puts a prompt in the session's inbox and starts the session's runner when none
runs; the runner takes prompts in order, one turn each, and reports ``idle`` when the
inbox drains. A turn (:class:`~.loop.Turn`) runs in a task of its own, so cancelling it
leaves the runner; this is its host (:class:`~.loop.Host`): the plan (route, model,
effort, from the clients' choice or the row's defaults), the tools, the plugins' context
sections, the session's boundary, the hooks and compaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from dsh.core.errors import InvalidArgumentError, PluginError, SessionBusyError
from dsh.core.redact import shown
from dsh.runtime.agent import events
from dsh.runtime.agent.compactor import Compactor
from dsh.runtime.agent.journal import Journal
from dsh.runtime.agent.lifecycle import Lifecycle
from dsh.runtime.agent.loop import CANCELLED, Outcome, Plan, Turn
from dsh.runtime.agent.session import Session, Status
from dsh.runtime.agent.settings import AgentConfig
from dsh.runtime.agent.toolrun import Approver
from dsh.runtime.kernel.guardrails import GuardrailChain
from dsh.runtime.kernel.hooks import BudgetExceededError, run_bounded
from dsh.runtime.kernel.plugin import ContextRequest, RuntimeContext
from dsh.runtime.providers.base import EFFORTS, Provider
from dsh.runtime.tools import confine
from dsh.runtime.tools.base import Tool
from dsh.runtime.tools.clientside import ClientSide
from dsh.runtime.tools.confine import Boundary

logger = logging.getLogger("dsh.agent")


class Arrival:
    """A prompt accepted for a session but not yet in its inbox (the session is being
    created or restored); ``cancelled`` when a cancel came for it meanwhile."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


class TurnRunner:
    """Runs turns over ``rt`` (registries and services read at every use, so a reconcile
    takes effect on the next turn) with ``config()``'s settings; ``closed()`` stops a
    runner between turns."""

    def __init__(self, rt: RuntimeContext, config: Callable[[], AgentConfig],
                 lifecycle: Lifecycle, journal: Journal, compactor: Compactor,
                 closed: Callable[[], bool]) -> None:
        self._rt = rt
        self._config = config
        self._lifecycle = lifecycle
        self._journal = journal
        self._compactor = compactor
        self._closed = closed
        self.approver: Approver | None = None
        self._arriving: dict[str, list[Arrival]] = {}  # session id -> prompts in order
        self.client_sides: Callable[[str], ClientSide | None] | None = None
        self._choice: dict[str, Any] = {"provider": None, "model": None,
                                        "reasoning_effort": None, "max_tokens": None}

    # -- the queue ------------------------------------------------------------------------

    @contextlib.contextmanager
    def arriving(self, session_id: str) -> Iterator[Arrival]:
        """Mark a prompt for ``session_id`` as on its way until it is queued (or fails),
        so a cancel sent right behind it finds it (:meth:`cancel_waiting`)."""
        arrival = Arrival()
        self._arriving.setdefault(session_id, []).append(arrival)
        try:
            yield arrival
        finally:
            arrivals = self._arriving[session_id]
            arrivals.remove(arrival)
            if not arrivals:
                del self._arriving[session_id]

    def cancel_waiting(self, session_id: str, session: Session | None) -> bool:
        """Cancel the most recent prompt whose turn has not started (one on its way, else
        the last one queued) when no turn runs; False when there is none, or it is
        already cancelled. Its turn then ends ``cancelled`` as it starts; the other
        queued prompts still run."""
        arrivals = self._arriving.get(session_id)
        if arrivals:
            if arrivals[-1].cancelled:
                return False
            arrivals[-1].cancelled = True
            return True
        if session is None or session.turn is not None or not session.inbox:
            return False
        latest = session.inbox[-1]["id"]
        if latest in session.cancelled_prompts:
            return False
        session.cancelled_prompts.add(latest)
        return True

    def enqueue(self, session: Session, content_blocks: Sequence[Mapping[str, Any]],
                trace: Mapping[str, str] | None = None, *, cancelled: bool = False) -> str:
        """Queue a prompt and return its messageId; the session's runner takes it
        (``cancelled``: a cancel came while it was on its way, so its turn ends at once).

        ``trace`` is the W3C trace context (``traceparent``, ``tracestate``) the client
        sent with it: the ``before_turn`` event of its turn carries it as attributes.
        A full inbox (``max_queued`` prompts waiting) is SessionBusyError (retryable).
        """
        if session.waiting() >= self._config().max_queued:
            raise SessionBusyError("session busy: queue full")
        message = events.user_message(content_blocks, events.new_id())
        if trace:
            session.traces[message["id"]] = dict(trace)
        if cancelled:
            session.cancelled_prompts.add(message["id"])
        start = len(session.inbox)
        session.inbox.append(message)
        session.emit(events.INBOX_SPLICED, events.inbox_received(start, message))
        if session.runner is None:
            session.set_status(Status.RUNNING)
            session.runner = asyncio.create_task(self._drain(session),
                                                 name=f"dsh-session-{session.id}")
        return message["id"]

    async def _drain(self, session: Session) -> None:
        """The session's runner: one turn per queued prompt, then ``idle``."""
        try:
            while session.inbox and not self._closed():
                await self._turn(session, session.inbox.popleft())
        finally:
            if not session.inbox:
                session.traces.clear()
            session.runner = None
            session.set_status(Status.IDLE)
            session.settle()

    async def _turn(self, session: Session, prompt: dict[str, Any]) -> None:
        if session.user_command is not None:  # the user's own command ends first
            await asyncio.wait({session.user_command[0]})
        record = session.record
        record.turns += 1
        turn = Turn(session, record.turns, prompt, self)
        session.turn = turn
        if prompt["id"] in session.cancelled_prompts:  # cancelled while it waited
            session.cancelled_prompts.discard(prompt["id"])
            session.cancel_requested = True
        session.emit(events.TURN_START, events.turn_data(turn.number))
        session.emit(events.INBOX_SPLICED, events.inbox_taken(1))
        await self._lifecycle.fire(session, "before_turn", turn=turn.number,
                                   message=events.message_text(prompt), payload=prompt,
                                   attributes=session.traces.pop(prompt["id"], None))
        outcome = await self._outcome(session, turn)
        turn.close(outcome)
        session.turn = session.turn_task = None
        session.cancel_requested = False
        session.failure = None
        self._journal.save(record)
        await self.fire(session, "after_turn", turn=turn.number, message=outcome.kind,
                        payload={"turn": turn.number, "kind": outcome.kind,
                                 "error": outcome.error})

    async def _outcome(self, session: Session, turn: Turn) -> Outcome:
        """Run the turn's steps in their own task, so cancelling it leaves the runner."""
        if session.failure is not None:  # the store went away as the turn started
            return Outcome("error", session.failure)
        if session.cancel_requested:
            return CANCELLED
        try:
            plan = self.plan(session)
        except InvalidArgumentError as exc:
            return Outcome.failed(exc.message, exc.code or "invalid-argument")
        task = asyncio.create_task(turn.run(plan))
        session.turn_task = task
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        if session.failure is not None:
            return Outcome("error", session.failure)
        if task.cancelled() or session.cancel_requested:
            return CANCELLED
        error = task.exception()
        if error is not None:
            logger.error("turn %d of session %s failed", turn.number, session.id, exc_info=error)
            return Outcome.failed(f"internal error: {type(error).__name__}: {error}", "internal")
        return task.result()

    # -- the plan -------------------------------------------------------------------------

    def configure(self, *, provider: str | None, model: str | None,
                  reasoning_effort: str | None = None,
                  max_tokens: int | None = None) -> dict[str, str]:
        """Choose route, model and effort for later turns, checked now; returns them resolved.

        ``None`` keeps following the row's ``default_route``, the route's default model and
        its default effort. An unknown or retired model, an unknown effort, or one the
        route cannot send is an InvalidArgumentError naming it.
        """
        route, name = self.check(provider, model, reasoning_effort)
        self._choice = {"provider": provider, "model": model,
                        "reasoning_effort": reasoning_effort, "max_tokens": max_tokens}
        return {"provider": route, "model": name}

    def check(self, provider: str | None, model: str | None,
              reasoning_effort: str | None) -> tuple[str, str]:
        """The route and model ``provider``/``model`` resolve to, with ``reasoning_effort``
        checked against that route; InvalidArgumentError naming what is refused."""
        if reasoning_effort is not None and reasoning_effort not in EFFORTS:
            raise InvalidArgumentError(f"unknown reasoning effort '{reasoning_effort}' "
                                       f"(known: {', '.join(EFFORTS)})", code="unknown-effort")
        route, chosen, name = self._resolve(provider, model)
        problem = self.effort_problem(chosen, reasoning_effort, name)
        if problem is not None:
            raise InvalidArgumentError(problem, code="unsupported-effort")
        return route, name

    @staticmethod
    def effort_problem(chosen: Provider, reasoning_effort: str | None,
                       model: str | None = None) -> str | None:
        """Why route object ``chosen`` cannot send ``reasoning_effort`` to ``model`` (its
        default when None); None: it can."""
        refuse = getattr(chosen, "effort_refusal", None)
        if refuse is None or reasoning_effort is None:
            return None
        return refuse(reasoning_effort, model or chosen.default_model)

    def choice(self, session: Session | None = None) -> dict[str, Any]:
        """What a turn of ``session`` asks for: the session's own choice
        (:mod:`.choices`) over the client's (``initialize``), each over the row defaults.
        A session that chose another route leaves the client's model behind with it."""
        choice = dict(self._choice)
        own = {} if session is None else session.record.settings
        if own.get("provider") is not None and own["provider"] != choice["provider"]:
            choice.update(provider=own["provider"], model=None)
            effort = choice["reasoning_effort"]
            if effort is not None and own.get("reasoningEffort") is None:
                with contextlib.suppress(InvalidArgumentError):
                    if self.effort_problem(self.route(own["provider"]), effort,
                                           own.get("model")):
                        choice["reasoning_effort"] = None  # one the new route cannot send
        if own.get("model") is not None:
            choice["model"] = own["model"]
        if own.get("reasoningEffort") is not None:
            choice["reasoning_effort"] = own["reasoningEffort"]
        return choice

    def plan(self, session: Session | None = None) -> Plan:
        """What the next turn (of ``session``) runs with: route, model, system prompt."""
        choice, config = self.choice(session), self._config()
        route, provider, model = self._resolve(choice["provider"], choice["model"])
        prompt = "\n\n".join([config.system_prompt,
                              *(p.text for p in self._rt.prompts.values())])
        return Plan(route, provider, model, config.max_steps, prompt,
                    choice["max_tokens"], choice["reasoning_effort"])

    def check_ready(self) -> None:
        """Raise :class:`InvalidArgumentError` (with its code) when the next turn could
        not call the model: an unknown or retired route or model (:meth:`plan`), or what
        the route says its request would fail with before it is sent (a missing key, a
        base URL that is no URL, an effort the model cannot take). Asked before a prompt
        creates a session."""
        plan = self.plan()
        refuse = getattr(plan.provider, "request_refusal", None)
        problem = refuse(plan.model, plan.reasoning_effort) if refuse is not None else None
        if problem is not None:
            raise InvalidArgumentError(problem.message,
                                       code=getattr(problem, "code", None) or "model-error")

    def route(self, name: str | None) -> Provider:
        """The provider object of route ``name`` (None: the default route)."""
        return self._resolve(name, None)[1]

    def _resolve(self, provider: str | None, model: str | None) -> tuple[str, Provider, str]:
        """Route name, provider object and model; InvalidArgumentError naming what is wrong."""
        route = provider or self._config().default_route
        try:
            chosen = self._rt.service("llm:" + route)
        except PluginError:
            routes = ", ".join(self._routes()) or "none"
            # A route from a patch's !env is named by its variable, never quoted: the
            # message goes to clients, logs and the session's stored turn/end.
            raise InvalidArgumentError(f"unknown provider route {shown(route)} (registered: "
                                       f"{routes})", code="unknown-route") from None
        name = model or chosen.default_model
        refuse = getattr(chosen, "model_refusal", None)
        problem = refuse(name) if refuse is not None else None if chosen.accepts_model(
            name) else f"unknown model '{name}' for provider route '{route}'"
        if problem is not None:
            raise InvalidArgumentError(problem, code="unknown-model")
        return route, chosen, name

    def catalogue(self) -> list[dict[str, Any]]:
        """``[{provider, models, default?, problem?}]``: each registered route, the models
        it names (its default first; it may accept more), whether it is the default route,
        and why a request on it would fail before it is sent (its key is missing)."""
        offered = []
        default = self._config().default_route
        for name in self._routes():
            try:
                provider = self.route(name)
            except InvalidArgumentError:
                continue
            catalog = getattr(provider, "catalog", None)
            models = getattr(catalog, "models", None) or (provider.default_model,)
            entry: dict[str, Any] = {"provider": name, "models": list(models)}
            if name == default:
                entry["default"] = True
            check = getattr(provider, "key_problem", None)
            problem = check() if check is not None else None
            if problem:
                entry["problem"] = problem
            offered.append(entry)
        return offered

    def _routes(self) -> list[str]:
        """Published provider routes (``llm:<route>`` services), for error messages."""
        names = self._rt.service_names()
        return sorted(n.removeprefix("llm:") for n in names if n.startswith("llm:"))

    # -- what a turn reads (loop.Host) ----------------------------------------------------

    def tools_for(self, session_id: str) -> Mapping[str, Tool]:
        """The tools of ``session_id``: the registered ones, then each tool source's.

        A registered tool keeps its name against a source's tool of the same name, and a
        source that fails is left out (logged), so no plugin can take the tools away.
        """
        registered = self._rt.tools
        sources = self._rt.tool_sources
        if not sources:
            return registered
        tools: dict[str, Tool] = dict(registered)
        for source in sources.values():
            try:
                offered = source.tools_for(session_id)
            except Exception:
                logger.warning("tool source %s of row %s failed", source.name, source.row_id,
                               exc_info=True)
                continue
            for name, tool in offered.items():
                tools.setdefault(name, tool)
        return tools

    async def contexts(self, session: Session, turn: int) -> list[tuple[str, str]]:
        """Ask every context section for this turn's text, each bounded like a hook.

        A section that fails or overruns is left out of this turn and reported as an
        ``error`` event on the session; the turn goes on.
        """
        sections: list[tuple[str, str]] = []
        request = ContextRequest(session.id, session.cwd, turn)
        for source in self._rt.contexts.values():
            try:
                text = source.fn(request)
                if inspect.isawaitable(text):
                    text = await run_bounded(text, self._config().hook_budget_s)
            except Exception as exc:
                what = "timed out" if isinstance(exc, BudgetExceededError) else f"failed: {exc}"
                session.emit(events.ERROR, {
                    "message": f"context '{source.name}' of row '{source.row_id}' {what}",
                    "source": {"kind": "context", "name": source.name, "row": source.row_id}})
                continue
            if text:
                sections.append((source.name, str(text)))
        return sections

    def boundary(self, session: Session) -> Boundary:
        """What ``session``'s tools may reach now (its root, granted roots, protected)."""
        return session.boundary(confine.protected_dirs(self._rt.home,
                                                       self._config().protected_paths))

    def client_side(self, session_id: str) -> ClientSide | None:
        """What ``session_id``'s client does for its tools (none unless a server said)."""
        lookup = self.client_sides
        return None if lookup is None else lookup(session_id)

    @property
    def guardrails(self) -> GuardrailChain:
        """The running tree's guardrail chain."""
        return self._rt.guardrails

    @property
    def env(self) -> Mapping[str, str]:
        """The launch's environment snapshot."""
        return self._rt.env

    async def fire(self, session: Session, event: str, *, turn: int | None = None,
                   step: int | None = None, message: Any = None, payload: Any = None) -> None:
        """Notify the hooks of ``event`` (:class:`~.lifecycle.Lifecycle`)."""
        await self._lifecycle.fire(session, event, turn=turn, step=step, message=message,
                                   payload=payload)

    async def compact_if_needed(self, session: Session, plan: Plan, turn: int) -> None:
        """Before a model request: compact when the history nears the context window."""
        await self._compactor.if_needed(session, plan, turn)

    async def compact_for_overflow(self, session: Session, plan: Plan, turn: int) -> bool:
        """After the provider refused the history as too long: compact it now."""
        return await self._compactor.for_overflow(session, plan, turn)
