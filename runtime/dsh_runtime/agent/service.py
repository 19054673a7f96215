"""The ``agent`` service: the one API every protocol server drives sessions through.

Servers (SDK, ACP, web, headless) never touch sessions, providers or tools directly; they
call :class:`Agent` and forward what its listeners receive. The contract is written down in
``briefs/agent-api.md``; in short:

* ``prompt`` answers a ``messageId`` at once and queues the message on the session (created
  on first use); one background runner per session takes queued prompts one turn at a
  time, so prompts run in order, and ``session.status idle`` is sent when the inbox drains.
* ``cancel`` cancels the running turn only; queued prompts still run.
* The agent speaks no protocol: it raises :mod:`dsh.core.errors` (an unknown session is
  ``SessionNotFoundError``, a running one ``SessionBusyError``, a bad route, model or
  effort ``InvalidArgumentError``), and the servers turn them into answers through one
  table (:mod:`dsh_runtime.servers.errors`).
* Lifecycle hooks are fired through the kernel's dispatcher, each bounded by the kernel's
  per-hook budget and every event by ``hook_budget_s`` in total; a hook's failure becomes
  an ``error`` event on its session and the agent carries on.
* One runtime per session: a session is live here only under this runtime's lease in the
  store (taken when the session is created or restored, released at ``close``). Another
  runtime's session is ``SessionHeldError`` (busy, naming its holder); a session whose
  lease this runtime lost is let go at once (:mod:`.leasing`): its turn is cancelled, and
  nothing more of it is stored or sent.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from dsh.core.errors import (
    CompactionError,
    DshError,
    DuplicateEventError,
    InvalidArgumentError,
    PluginError,
    SessionBusyError,
    SessionHeldError,
    SessionNotFoundError,
    StoreUnavailableError,
)

from dsh_runtime.agent import compaction, events, recovery, seeding
from dsh_runtime.agent.leasing import Holdings
from dsh_runtime.agent.loop import CANCELLED, Outcome, Plan, Turn
from dsh_runtime.agent.session import Session, SessionRecord, Status
from dsh_runtime.agent.store import HistoryPage, MemorySessionStore, SessionStore, page_of
from dsh_runtime.agent.toolrun import Approver
from dsh_runtime.guardrails import GuardrailChain
from dsh_runtime.hooks import BudgetExceeded, HookError, run_bounded
from dsh_runtime.plugin import ContextRequest, RuntimeContext
from dsh_runtime.providers.base import EFFORTS, Provider
from dsh_runtime.tools import confine
from dsh_runtime.tools.base import Tool
from dsh_runtime.tools.confine import Boundary

CLOSE_BOUND = 2.0
"""Seconds ``close`` waits for cancelled turns, and again for ``session_end`` hooks."""

Listener = Callable[[str, dict[str, Any]], None]
logger = logging.getLogger("dsh.agent")


class AgentConfig(NamedTuple):
    """The ``agent-core`` row's config (defaults here; the manifest's schema reuses them)."""

    default_route: str = "deepseek-official"
    max_steps: int = 50
    max_queued: int = 32
    system_prompt: str = "You are a helpful software engineer assistant."
    hook_budget_s: float = 10.0
    compact_at: float = 0.8
    compact_keep: float = 0.25
    protected_paths: tuple[str, ...] = ()

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any], *, row_id: str = "agent") -> AgentConfig:
        """Build from a validated row config (unknown keys were rejected by the schema);
        ``protected_paths`` are checked and expanded (ConfigError naming a bad one)."""
        values = {k: config[k] for k in cls._fields if k in config}
        values["protected_paths"] = confine.config_paths(
            config, "protected_paths", f"row '{row_id}' config")
        return cls(**values)


class Agent:
    """Sessions and their turns over the running tree's providers, tools and hooks.

    ``rt`` is the runtime context (registries and services of the running tree, read at
    every use so a reconcile takes effect on the next turn); ``store`` keeps session
    records across agent instances.
    """

    def __init__(self, rt: RuntimeContext, config: AgentConfig,
                 store: SessionStore | None = None) -> None:
        self._rt = rt
        self.config = config
        self.approver: Approver | None = None
        self._store: SessionStore = store or MemorySessionStore()
        self._sessions: dict[str, Session] = {}
        self._listeners: list[Listener] = []
        self._choice: dict[str, Any] = {"provider": None, "model": None,
                                        "reasoning_effort": None, "max_tokens": None}
        self._closed = False
        self._compacting: dict[str, asyncio.Lock] = {}
        self._unhook = rt.hooks.add_error_listener(self._on_hook_error)
        self._holdings = Holdings(self._store, self._sessions,
                                  lambda session: self.fire(session, "session_end"))

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
                    text = await run_bounded(text, self.config.hook_budget_s)
            except Exception as exc:
                what = "timed out" if isinstance(exc, BudgetExceeded) else f"failed: {exc}"
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
                                                       self.config.protected_paths))

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
        """Notify the hooks of ``event``; overrunning ``hook_budget_s`` is an ``error`` event.

        Hooks get a deep copy of ``payload``: they observe the agent's state, never share it.
        """
        dispatcher = self._rt.hooks
        hooks = dispatcher.hooks(event)
        if not hooks:
            return
        budget = self.config.hook_budget_s
        try:
            await run_bounded(dispatcher.emit(
                event, session_id=session.id, step=step, message=message,
                payload=copy.deepcopy(payload),
                attributes={} if turn is None else {"turn": turn}), budget)
        except BudgetExceeded:
            names = ", ".join(h.name for h in hooks)
            session.emit(events.ERROR, events.hook_error(
                f"hooks on {event} exceeded the agent's {float(budget)} s budget", names, event))

    # -- configuration and listeners ------------------------------------------------------

    def configure(self, *, provider: str | None, model: str | None,
                  reasoning_effort: str | None = None,
                  max_tokens: int | None = None) -> dict[str, str]:
        """Choose route, model and effort for later turns, checked now; returns them resolved.

        ``None`` keeps following the row's ``default_route``, the route's default model and
        its default effort. An unknown or retired model, an unknown effort, or one the
        route cannot send is an InvalidArgumentError naming it.
        """
        if reasoning_effort is not None and reasoning_effort not in EFFORTS:
            raise InvalidArgumentError(f"unknown reasoning effort '{reasoning_effort}' "
                                       f"(known: {', '.join(EFFORTS)})", code="unknown-effort")
        route, chosen, name = self._resolve(provider, model)
        refuse = getattr(chosen, "effort_refusal", None)
        problem = refuse(reasoning_effort) if refuse and reasoning_effort is not None else None
        if problem is not None:
            raise InvalidArgumentError(problem, code="unsupported-effort")
        self._choice = {"provider": provider, "model": model,
                        "reasoning_effort": reasoning_effort, "max_tokens": max_tokens}
        return {"provider": route, "model": name}

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Deliver every notification to ``fn(method, params)``; returns the unsubscribe."""
        self._listeners.append(fn)

        def remove() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)

        return remove

    def set_approver(self, fn: Approver | None) -> None:
        """Who decides a guardrail's ``ask``; None leaves it to the policy (never hangs)."""
        self.approver = fn

    def announce(self, method: str, params: Mapping[str, Any]) -> None:
        """Deliver a notification that is not one of this runtime's session events to
        every listener, as the servers forward them: ``subagent.*``, and the events of
        sub-agents' sessions relayed to the parent's clients. Nothing is stored: a
        sub-agent's events belong to its own runtime's log."""
        self._deliver(method, params)

    def emit(self, session_id: str, type: str, data: Mapping[str, Any]) -> bool:
        """Log event ``type`` on a live session, as a plugin reporting outside a tool call
        (an MCP server that died, a mode a client set); False when no such session runs."""
        session = self._sessions.get(session_id)
        if session is None or self._closed:
            return False
        session.emit(type, data)
        return True

    # -- sessions -------------------------------------------------------------------------

    async def new_session(self, *, cwd: str | None = None, session_id: str | None = None,
                          history: Any = None) -> str:
        """Create a session now; an id already in use is an InvalidArgumentError.

        ``history`` (a forked sub-agent's start) seeds the conversation with a copy of
        another one, checked first (:mod:`.seeding`): a bad one creates nothing.
        """
        self._check_open()
        if session_id is not None and session_id in self._sessions:
            raise InvalidArgumentError(f"session '{session_id}' already exists")
        messages = None if history is None else seeding.check_history(history)
        session = await self._create(session_id or events.new_id(), cwd)
        if messages:
            seeding.seed(session, messages)
            self._store.save(session.record)
        return session.id

    async def prompt(self, session_id: str, content_blocks: Sequence[Mapping[str, Any]], *,
                     cwd: str | None = None) -> str:
        """Queue a prompt and return its messageId at once; the turn runs in background.

        A full inbox (``max_queued`` prompts waiting) is SessionBusyError (retryable).
        """
        self._check_open()
        session = self._holdings.live(session_id, confirm=True) or await self._restore(session_id)
        if session is None:
            session = await self._create(session_id, cwd)
        if session.waiting() >= self.config.max_queued:
            raise SessionBusyError("session busy: queue full")
        message = events.user_message(content_blocks, events.new_id())
        start = len(session.inbox)
        session.inbox.append(message)
        session.emit(events.INBOX_SPLICED, events.inbox_received(start, message))
        if session.runner is None:
            session.set_status(Status.RUNNING)
            session.runner = asyncio.create_task(self._drain(session),
                                                 name=f"dsh-session-{session.id}")
        return message["id"]

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn (``turn/end`` says ``cancelled``); False when none runs."""
        session = self._get(session_id)
        task = session.turn_task
        if session.turn is None or session.cancel_requested or (task is not None and task.done()):
            return False
        session.cancel_requested = True
        session.turn.cancelled.set()
        if task is not None:
            task.cancel()
        return True

    async def resume(self, session_id: str) -> None:
        """Make a persisted session live again; unknown is SessionNotFoundError, running
        here or held by another runtime SessionBusyError."""
        self._check_open()
        session = self._holdings.live(session_id, confirm=True)
        if session is None:
            if await self._restore(session_id) is None:
                raise SessionNotFoundError(session_id)
        elif session.status is Status.RUNNING:
            raise SessionBusyError(f"session busy: '{session_id}' is running a turn")

    async def open_session(self, session_id: str, *, cwd: str | None = None) -> None:
        """Make ``session_id`` live without running a turn: a live one is left as it is,
        a stored one is loaded, an unknown one is created in ``cwd``.

        The original client's working-directory calls work on any session id this way
        (its docs: they create the session without running a turn).
        """
        self._check_open()
        if self._holdings.live(session_id) is None and await self._restore(session_id) is None:
            await self._create(session_id, cwd)

    def get_cwd(self, session_id: str) -> str:
        """The session's working directory."""
        return self._get(session_id).cwd

    def set_cwd(self, session_id: str, path: str) -> str:
        """Move the session (``path`` relative to its current directory); returns the new one."""
        try:
            return self._get(session_id).change_cwd(path)
        except NotADirectoryError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def list_sessions(self) -> list[dict[str, Any]]:
        """``[{sessionId, cwd, status, title}]`` of live and stored sessions, sorted by id.

        A stored session not live here reports ``idle``: a prompt or ``resume`` restores it.
        """
        found = {k: s.summary() for k, s in self._sessions.items()}
        for stored in self._store.summaries():
            found.setdefault(stored["sessionId"], {
                "sessionId": stored["sessionId"], "cwd": stored["cwd"],
                "status": Status.IDLE.value, "title": stored.get("title", "")})
        return [found[k] for k in sorted(found)]

    async def compact(self, session_id: str) -> dict[str, Any]:
        """Compact the session's history now (``session/compact``); returns what it did.

        ``{compacted, removedCount, keptCount, tokensBefore, tokensAfter}``. Unknown is
        SessionNotFoundError, running SessionBusyError; a failed summary is a
        CompactionError and changes nothing.
        """
        self._check_open()
        session = self._holdings.live(session_id, confirm=True) or await self._restore(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        if session.status is Status.RUNNING:
            raise SessionBusyError(f"session busy: '{session_id}' is running a turn")
        plan = self._plan()
        try:
            done = await self._compact(session, plan, "manual", None)
        except Exception as exc:
            raise CompactionError(f"compaction failed: {exc}",
                                  code=getattr(exc, "code", None) or "compaction-failed"
                                  ) from None
        self._store.save(session.record)
        if done is None:
            tokens = compaction.estimate(self._model_view(session))
            return {"compacted": False, "removedCount": 0, "keptCount": len(session.messages),
                    "tokensBefore": tokens, "tokensAfter": tokens}
        return {"compacted": True, "removedCount": done.removed, "keptCount": done.kept,
                "tokensBefore": done.tokens_before, "tokensAfter": done.tokens_after}

    async def compact_if_needed(self, session: Session, plan: Plan, turn: int) -> None:
        """Before a model request: compact when the history nears the context window.

        A failed summary is an ``error`` event and the request goes ahead uncompacted
        (the provider may still accept it; if not, its error ends the turn).
        """
        threshold = self.config.compact_at * plan.provider.context_window
        if threshold <= 0 or compaction.estimate(self._model_view(session)) < threshold:
            return
        try:
            await self._compact(session, plan, "auto", turn)
        except Exception as exc:
            logger.warning("compaction of session %s failed", session.id, exc_info=True)
            session.emit(events.ERROR, {"message": f"compaction failed: {exc}",
                                        "source": {"kind": "compaction"}})

    async def compact_for_overflow(self, session: Session, plan: Plan, turn: int) -> bool:
        """After the provider refused the history as too long: compact it now (reason
        ``overflow``). False when there was nothing to cut or the summary failed (an
        ``error`` event says which); the caller then ends the turn with a clear error."""
        try:
            done = await self._compact(session, plan, "overflow", turn)
        except Exception as exc:
            logger.warning("compaction of session %s failed", session.id, exc_info=True)
            session.emit(events.ERROR, {"message": f"compaction failed: {exc}",
                                        "source": {"kind": "compaction"}})
            return False
        return done is not None

    def history(self, session_id: str) -> list[dict[str, Any]]:
        """A live session's events so far, in ``seq`` order."""
        return list(self._get(session_id).record.events)

    def history_page(self, session_id: str, *, start_seq: int, limit: int,
                     max_bytes: int) -> HistoryPage:
        """A page of the session's log from ``start_seq`` (see
        :func:`~dsh_runtime.agent.store.page_of` for the bounds); unknown is
        SessionNotFoundError.

        A session live here is read from memory, which holds even an event whose append
        failed; any other (stored, or running in another runtime) from the store, which
        needs no lease to read.
        """
        session = self._holdings.live(session_id)
        if session is not None:
            return page_of(session.record.events, start_seq, limit, max_bytes)
        page = self._store.history_page(session_id, start_seq=start_seq, limit=limit,
                                        max_bytes=max_bytes)
        if page is None:
            raise SessionNotFoundError(session_id)
        return page

    async def close(self) -> None:
        """Cancel every turn, fire ``session_end``, save every session; bounded, idempotent."""
        if self._closed:
            return
        self._closed = True
        sessions = list(self._sessions.values())
        for session in sessions:
            await self.cancel(session.id)
        runners = [s.runner for s in sessions if s.runner is not None]
        if runners:
            _, late = await asyncio.wait(runners, timeout=CLOSE_BOUND)
            for task in late:
                task.cancel()
        ends = [asyncio.ensure_future(self.fire(s, "session_end")) for s in sessions]
        if ends:
            _, late = await asyncio.wait(ends, timeout=CLOSE_BOUND)
            for task in late:
                task.cancel()
        for session in sessions:
            self._save(session.record)
            self._holdings.release(session.id)
        self._unhook()
        self._holdings.close()

    # -- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DshError("the agent is closed")

    def _get(self, session_id: str) -> Session:
        session = self._holdings.live(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        return session

    def _save(self, record: SessionRecord) -> None:
        """Save after a turn or at close. A failure (a full disk) is logged, not raised:
        raised, it would end the session's runner, dropping its queued prompts, or stop
        ``close`` before the other sessions are saved; the next save that succeeds writes
        every event still missing."""
        try:
            self._store.save(record)
        except (SessionHeldError, StoreUnavailableError) as exc:
            logger.warning("did not save session %s: %s", record.session_id, exc)
        except Exception:
            logger.exception("could not save session %s", record.session_id)

    def _notify(self, method: str, params: Mapping[str, Any]) -> None:
        if method == "session.event":
            # Stored before any client sees it: what a client received survives a crash.
            session_id = params["sessionId"]
            try:
                self._store.append(session_id, params["event"])
            except (SessionHeldError, DuplicateEventError) as exc:
                # Another runtime runs this session now: neither store nor send its events.
                self._holdings.let_go(session_id, str(exc))
                return
            except StoreUnavailableError as exc:
                # Kept on this host (the store's spool) and stored once the database is
                # back, so the client may see it; the running turn ends with an error.
                self._holdings.store_away(session_id, exc)
            except Exception:
                # The next save writes what is missing; the session carries on.
                logger.exception("could not store an event of session %s", session_id)
        self._deliver(method, params)

    def _deliver(self, method: str, params: Mapping[str, Any]) -> None:
        for listener in tuple(self._listeners):
            try:
                listener(method, dict(params))
            except Exception:
                logger.exception("agent listener failed on %s", method)

    async def _create(self, session_id: str, cwd: str | None) -> Session:
        path = os.path.abspath(cwd or self._rt.cwd)
        if not os.path.isdir(path):
            raise InvalidArgumentError(f"not a directory: {path}")
        self._store.acquire(session_id)  # a runtime racing to create the same id: busy
        return await self._open(SessionRecord(session_id, path), resumed=False)

    async def _restore(self, session_id: str) -> Session | None:
        """Lease, then load (so no other runtime can add to the log after it is read)."""
        self._store.acquire(session_id)
        record = self._store.load(session_id)
        if record is None:
            self._holdings.release(session_id)
            return None
        session = await self._open(record, resumed=True)
        if recovery.close_interrupted(session):
            self._store.save(session.record)
        return session

    async def _open(self, record: SessionRecord, *, resumed: bool) -> Session:
        session = Session(record, self._notify)
        self._sessions[session.id] = session
        try:
            self._store.save(record)
        except BaseException:
            del self._sessions[session.id]
            self._holdings.release(session.id)
            raise
        await self.fire(session, "session_start",
                        payload={"cwd": record.cwd, "root": record.root, "resumed": resumed})
        return session

    def _resolve(self, provider: str | None, model: str | None) -> tuple[str, Provider, str]:
        """Route name, provider object and model; InvalidArgumentError naming what is wrong."""
        route = provider or self.config.default_route
        try:
            chosen = self._rt.service("llm:" + route)
        except PluginError:
            routes = ", ".join(self._routes()) or "none"
            raise InvalidArgumentError(f"unknown provider route '{route}' (registered: "
                                       f"{routes})", code="unknown-route") from None
        name = model or chosen.default_model
        refuse = getattr(chosen, "model_refusal", None)
        problem = refuse(name) if refuse is not None else None if chosen.accepts_model(
            name) else f"unknown model '{name}' for provider route '{route}'"
        if problem is not None:
            raise InvalidArgumentError(problem, code="unknown-model")
        return route, chosen, name

    def _routes(self) -> list[str]:
        """Published provider routes (``llm:<route>`` services), for error messages."""
        names = self._rt.service_names()
        return sorted(n.removeprefix("llm:") for n in names if n.startswith("llm:"))

    def _plan(self) -> Plan:
        choice = self._choice
        route, provider, model = self._resolve(choice["provider"], choice["model"])
        prompt = "\n\n".join([self.config.system_prompt,
                              *(p.text for p in self._rt.prompts.values())])
        return Plan(route, provider, model, self.config.max_steps, prompt,
                    choice["max_tokens"], choice["reasoning_effort"])

    async def _drain(self, session: Session) -> None:
        """The session's runner: one turn per queued prompt, then ``idle``."""
        try:
            while session.inbox and not self._closed:
                await self._turn(session, session.inbox.popleft())
        finally:
            session.runner = None
            session.set_status(Status.IDLE)

    async def _turn(self, session: Session, prompt: dict[str, Any]) -> None:
        record = session.record
        record.turns += 1
        turn = Turn(session, record.turns, prompt, self)
        session.turn = turn
        session.emit(events.TURN_START, events.turn_data(turn.number))
        session.emit(events.INBOX_SPLICED, events.inbox_taken(1))
        await self.fire(session, "before_turn", turn=turn.number,
                        message=events.message_text(prompt), payload=prompt)
        outcome = await self._outcome(session, turn)
        turn.close(outcome)
        session.turn = session.turn_task = None
        session.cancel_requested = False
        session.failure = None
        self._save(record)
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
            plan = self._plan()
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

    @staticmethod
    def _model_view(session: Session) -> list[dict[str, Any]]:
        system = session.record.system
        return [*([system] if system is not None else []), *session.messages]

    async def _compact(self, session: Session, plan: Plan, reason: str,
                       turn: int | None) -> compaction.Compaction | None:
        """Summarise the older part of the history; None when there is nothing to cut.

        One compaction per session at a time; the cut replaces only the prefix, so
        messages a concurrent turn appends meanwhile stay.
        """
        lock = self._compacting.setdefault(session.id, asyncio.Lock())
        async with lock:
            messages = session.messages
            window = plan.provider.context_window
            cut = compaction.split_point(messages, int(window * self.config.compact_keep))
            if cut == 0 and reason in ("manual", "overflow"):
                # the provider's count, not our estimate, said it is too long: cut back to
                # the running prompt at least
                cut = compaction.last_prompt(messages) or len(messages)
            if cut == 0 or (compaction.last_prompt(messages) < cut and not any(
                    m.get("role") == "assistant" for m in messages[:cut])):
                # Nothing to cut, or only the running turn's prompt: nothing to summarise.
                return None
            before = compaction.estimate(self._model_view(session))
            await self.fire(session, "before_compact", turn=turn, payload={
                "reason": reason, "messageCount": len(messages), "removeCount": cut,
                "tokensBefore": before, "contextWindow": window})
            text = await compaction.summarise(
                plan.provider, session_id=session.id, model=plan.model,
                messages=messages[:cut], max_tokens=plan.max_tokens)
            summary = compaction.summary_message(text, cut)
            messages[:cut] = [summary]
            session.record.context_shown = events.shown_sections(messages)
            done = compaction.Compaction(reason, cut, len(messages) - 1, before,
                                         compaction.estimate(self._model_view(session)))
            session.emit(compaction.COMPACTED, done.data(summary, turn))
            await self.fire(session, "on_compact", turn=turn, message=text, payload={
                "reason": reason, "removedCount": done.removed, "keptCount": done.kept,
                "tokensBefore": done.tokens_before, "tokensAfter": done.tokens_after,
                "summary": text})
            return done

    def _on_hook_error(self, error: HookError) -> None:
        session = self._sessions.get(error.session_id or "")
        if session is None:
            logger.warning("%s", error.message)
            return
        session.emit(events.ERROR, events.hook_error(error.message, error.hook, error.event))
