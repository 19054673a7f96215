"""The ``agent`` service: the one API every protocol server drives sessions through.

Servers (SDK, ACP, web, headless) never touch sessions, providers or tools directly; they
call :class:`Agent` and forward what its listeners receive. The contract is written down in
``briefs/agent-api.md``; in short:

* ``prompt`` answers a ``messageId`` at once and queues the message on the session (created
  on first use); one background runner per session takes queued prompts one turn at a
  time, so prompts run in order, and ``session.status idle`` is sent when the inbox drains.
* ``cancel`` cancels the running turn; when none runs, the most recent prompt whose turn
  has not started (a cancel right behind its prompt). Other queued prompts still run.
* The agent speaks no protocol: it raises :mod:`dsh.core.errors` (an unknown session is
  ``SessionNotFoundError``, a running one ``SessionBusyError``, a bad route, model or
  effort ``InvalidArgumentError``), and the servers turn them into answers through one
  table (:mod:`dsh.runtime.servers.errors`).
* It is the facade of its parts: the live sessions (:mod:`.sessiontable`, under
  :mod:`.leasing`), the turn runner (:mod:`.turns`, one queue per session), compaction
  (:mod:`.compactor`), persistence and delivery (:mod:`.journal`) and hook firing
  (:mod:`.lifecycle`). Each part is a module of its own; the servers see only this class.
* Lifecycle hooks are fired through the kernel's dispatcher, each bounded by the kernel's
  per-hook budget and every event by ``hook_budget_s`` in total; a hook's failure becomes
  an ``error`` event on its session and the agent carries on.
* One runtime per session at a time: a session runs here only under this runtime's lease
  in the store, taken when the session is created, restored or taken back, and given
  back a short while after its work ends (:mod:`.leasing`), so another runtime (a
  terminal, the web page, another host) can continue it; the next prompt here takes it
  back. Another runtime's session is ``SessionHeldError`` (busy, naming its holder); a
  session whose lease this runtime lost is let go at once: its turn is cancelled,
  nothing more of it is stored, and its clients are told (``error`` and ``turn/end``
  with code ``lease-lost``, then ``session/moved``, outside the log); a released one
  that another runtime continued is dropped here and its clients told
  ``session/moved``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsh.core.errors import (
    CompactionError,
    DshError,
    InvalidArgumentError,
    SessionBusyError,
    SessionNotFoundError,
)
from dsh.runtime.agent import choices, compaction, events, seeding, usershell
from dsh.runtime.agent.compactor import Compactor, model_view
from dsh.runtime.agent.journal import Journal, Listener
from dsh.runtime.agent.leasing import Holdings
from dsh.runtime.agent.lifecycle import Lifecycle
from dsh.runtime.agent.session import Session, Status
from dsh.runtime.agent.sessiontable import SessionTable
from dsh.runtime.agent.settings import AgentConfig
from dsh.runtime.agent.store import (
    HistoryPage,
    MemorySessionStore,
    SessionStore,
    page_of,
    summaries_named,
)
from dsh.runtime.agent.toolrun import Approver
from dsh.runtime.agent.turns import TurnRunner
from dsh.runtime.kernel.hooks import HookError
from dsh.runtime.kernel.plugin import RuntimeContext
from dsh.runtime.tools.clientside import ClientSide

CLOSE_BOUND = 2.0
"""Seconds ``close`` waits for cancelled turns, and again for ``session_end`` hooks."""

logger = logging.getLogger("dsh.agent")


class Agent:
    """Sessions and their turns over the running tree's providers, tools and hooks.

    ``rt`` is the runtime context (registries and services of the running tree, read at
    every use so a reconcile takes effect on the next turn); ``store`` keeps session
    records across agent instances. ``config`` may be replaced while the agent runs (a
    live reload): every part reads it at its next use.
    """

    def __init__(self, rt: RuntimeContext, config: AgentConfig,
                 store: SessionStore | None = None) -> None:
        self.config = config
        self._closed = False
        store = store or MemorySessionStore()
        sessions: dict[str, Session] = {}
        self._lifecycle = Lifecycle(rt, self._hook_budget)
        holdings = Holdings(store, sessions,
                            lambda session: self._lifecycle.fire(session, "session_end"),
                            lambda method, params: self._journal.deliver(method, params),
                            lambda: self.config.max_idle_sessions)
        self._journal = Journal(store, holdings)
        self._sessions = SessionTable(sessions, holdings, self._journal, self._lifecycle,
                                      default_cwd=rt.cwd)
        self._compactor = Compactor(self._settings, self._lifecycle)
        self._turns = TurnRunner(rt, self._settings, self._lifecycle, self._journal,
                                 self._compactor, self._is_closed)
        self._unhook = rt.hooks.add_error_listener(self._on_hook_error)

    # -- configuration and listeners ------------------------------------------------------

    def configure(self, *, provider: str | None, model: str | None,
                  reasoning_effort: str | None = None,
                  max_tokens: int | None = None) -> dict[str, str]:
        """Choose route, model and effort for later turns (:meth:`.turns.TurnRunner.configure`)."""
        return self._turns.configure(provider=provider, model=model,
                                     reasoning_effort=reasoning_effort, max_tokens=max_tokens)

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Deliver every notification to ``fn(method, params)``; returns the unsubscribe."""
        return self._journal.add_listener(fn)

    @property
    def approver(self) -> Approver | None:
        """Who decides a guardrail's ``ask`` now (None: the policy)."""
        return self._turns.approver

    def set_approver(self, fn: Approver | None) -> None:
        """Who decides a guardrail's ``ask``; None leaves it to the policy (never hangs)."""
        self._turns.approver = fn

    def set_client_side(self, lookup: Callable[[str], ClientSide | None] | None) -> None:
        """Who does file and terminal work for a session's tools: ``lookup(session_id)``
        gives the session's client's offer (:mod:`dsh.runtime.tools.clientside`), or None
        for dsh's own; installed by a protocol server whose client advertised it."""
        self._turns.client_sides = lookup

    def announce(self, method: str, params: Mapping[str, Any]) -> None:
        """Deliver a notification that is not one of this runtime's session events to
        every listener, as the servers forward them: ``subagent.*``, and the events of
        sub-agents' sessions relayed to the parent's clients. Nothing is stored: a
        sub-agent's events belong to its own runtime's log."""
        self._journal.deliver(method, params)

    def emit(self, session_id: str, type: str, data: Mapping[str, Any], *,
             in_turn: bool = False) -> bool:
        """Log event ``type`` on a live session, as a plugin reporting outside a tool call
        (an MCP server that died, a mode a client set); False when no such session runs
        here (or it is parked: its lease was given back, so this runtime writes nothing
        to its log until it takes it back).

        ``in_turn``: only while the session runs a turn (False otherwise), for a report a
        client's run must collect: the caller keeps it for the next turn instead of
        logging it between runs, where no run's result would hold it."""
        session = self._sessions.find(session_id)
        if session is None or session.parked is not None or self._closed or (
                in_turn and session.turn is None):
            return False
        session.emit(type, data)
        return True

    # -- sessions -------------------------------------------------------------------------

    async def new_session(self, *, cwd: str | None = None, session_id: str | None = None,
                          history: Any = None) -> str:
        """Create a session now; an id already in use (live here or stored) is an
        InvalidArgumentError.

        ``history`` (a forked sub-agent's start) seeds the conversation with a copy of
        another one, checked first (:mod:`.seeding`): a bad one creates nothing.
        """
        self._check_open()
        if session_id is not None and self._sessions.known(session_id):
            raise InvalidArgumentError(f"session '{session_id}' already exists")
        messages = None if history is None else seeding.check_history(history)
        session = await self._sessions.create(session_id or events.new_id(), cwd)
        if messages:
            seeding.seed(session, messages)
            self._journal.store.save(session.record)
        return session.id

    async def prompt(self, session_id: str, content_blocks: Sequence[Mapping[str, Any]], *,
                     cwd: str | None = None, trace: Mapping[str, str] | None = None) -> str:
        """Queue a prompt and return its messageId at once; the turn runs in background
        (the session is restored, or created in ``cwd``, on first use). ``trace`` is the
        client's W3C trace context for the turn (``traceparent``, ``tracestate``).

        A full inbox (``max_queued`` prompts waiting) is SessionBusyError (retryable). A
        prompt that would create a session first checks that its turn could reach the
        model (:meth:`.turns.TurnRunner.check_ready`: route, model, key); if not, it is
        an InvalidArgumentError naming the problem and nothing is created or written.
        """
        self._check_open()
        with self._turns.arriving(session_id) as arrival:
            session = None
            if self._sessions.known(session_id):
                session = await self._sessions.confirmed(session_id)
            if session is None:
                self._turns.check_ready()
                session = await self._sessions.create(session_id, cwd)
            return self._turns.enqueue(session, content_blocks, trace,
                                        cancelled=arrival.cancelled)

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn (``turn/end`` says ``cancelled``) or the user's shell
        command (:meth:`shell`); when neither runs, the most recent prompt whose turn has
        not started, even one still on its way (its turn ends ``cancelled`` as it starts;
        other queued prompts still run). False when there is nothing to cancel, a stored
        session's included (it runs nothing here); unknown is SessionNotFoundError."""
        session = self._sessions.live(session_id)
        if ((session is None or session.turn is None)
                and self._turns.cancel_waiting(session_id, session)):
            return True
        if session is None:
            if self._sessions.known(session_id):
                return False
            raise SessionNotFoundError(session_id)
        if usershell.cancel(session):
            return True
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
        session = await self._sessions.confirmed(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        if session.status is Status.RUNNING:
            raise SessionBusyError(f"session busy: '{session_id}' is running a turn")

    async def open_session(self, session_id: str, *, cwd: str | None = None) -> None:
        """Make ``session_id`` live without running a turn: a live one is left as it is,
        a stored one is loaded, an unknown one is created in ``cwd``.

        The original client's working-directory calls work on any session id this way
        (its docs: they create the session without running a turn).
        """
        self._check_open()
        if await self._sessions.confirmed(session_id) is None:
            await self._sessions.create(session_id, cwd)

    async def take(self, session_id: str) -> None:
        """Make a session this runtime's now, without running a turn: held here already,
        taken back from parked, or restored from the store; unknown is
        SessionNotFoundError, one another runtime holds SessionHeldError. What a client's
        change to a session outside a turn (its mode) needs before it is logged."""
        self._check_open()
        if await self._sessions.confirmed(session_id) is None:
            raise SessionNotFoundError(session_id)

    def get_cwd(self, session_id: str) -> str:
        """The session's working directory."""
        return self._sessions.get(session_id).cwd

    def set_cwd(self, session_id: str, path: str) -> str:
        """Move the session (``path`` relative to its current directory); returns the new one."""
        try:
            return self._sessions.get(session_id).change_cwd(path)
        except NotADirectoryError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def list_sessions(self, *, session_id: str | None = None, workspace: str | None = None,
                      limit: int | None = None) -> list[dict[str, Any]]:
        """The listing entries of live and stored sessions, sorted by id:
        ``{sessionId, cwd, workspace, status, title, createdAt, updatedAt, turns, usage,
        costUsd}`` (:mod:`.summary`), from the store's summaries (no log is read); narrowed
        to one session, one workspace root, or the ``limit`` updated last (newest first)
        as :meth:`.sessiontable.SessionTable.listing` says."""
        return self._sessions.listing(session_id=session_id, workspace=workspace,
                                      limit=limit)

    def sessions_named(self, given: str) -> list[str]:
        """The stored session ids ``given`` names, whole or by its start
        (:func:`dsh.core.idprefix.named`); the listing is read only when ``given`` is no
        stored id itself."""
        return [e["sessionId"] for e in summaries_named(self._journal.store, given)]

    def latest_session(self, workspace: str) -> str | None:
        """The stored session of workspace root ``workspace`` (a real path) updated last,
        or None: what ``--continue`` continues."""
        found = self._journal.store.summaries(workspace=workspace, newest_first=True,
                                              limit=1)
        return found[0]["sessionId"] if found else None

    async def compact(self, session_id: str) -> dict[str, Any]:
        """Compact the session's history now (``session/compact``); returns what it did.

        ``{compacted, removedCount, keptCount, tokensBefore, tokensAfter}``. Unknown is
        SessionNotFoundError, running SessionBusyError; a failed summary is a
        CompactionError and changes nothing.
        """
        self._check_open()
        session = await self._sessions.confirmed(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        if session.status is Status.RUNNING:
            raise SessionBusyError(f"session busy: '{session_id}' is running a turn")
        plan = self._turns.plan(session)
        done_with = session.keep()  # the summary's model call is work: the lease stays
        try:
            done = await self._compactor.compact(session, plan, "manual", None)
        except Exception as exc:
            raise CompactionError(f"compaction failed: {exc}",
                                  code=getattr(exc, "code", None) or "compaction-failed"
                                  ) from None
        finally:
            done_with()
        self._journal.store.save(session.record)
        if done is None:
            tokens = compaction.estimate(model_view(session))
            return {"compacted": False, "removedCount": 0, "keptCount": len(session.messages),
                    "tokensBefore": tokens, "tokensAfter": tokens}
        return {"compacted": True, "removedCount": done.removed, "keptCount": done.kept,
                "tokensBefore": done.tokens_before, "tokensAfter": done.tokens_after}

    # -- a session's own choices (:mod:`.choices`) -----------------------------------------

    async def settings(self, session_id: str) -> dict[str, Any]:
        """What the session's next turn uses (``{provider, model, reasoningEffort,
        contextWindow}``), its own ``policy`` mode (null: the profile's) and its
        ``remembered`` decisions; a stored session is restored first."""
        session = await self._session(session_id)
        own = session.record.settings
        return {**choices.current(self._turns, session), "policy": own.get("policy"),
                "remembered": dict(own.get("remembered") or {})}

    def has_guardrail(self, name: str) -> bool:
        """Whether the running tree has a guardrail called ``name`` (``policy``)."""
        return name in self._turns.guardrails.names()

    def catalogue(self) -> list[dict[str, Any]]:
        """Each route and the models it names (:meth:`.turns.TurnRunner.catalogue`)."""
        return self._turns.catalogue()

    async def set_model(self, session_id: str, *, provider: Any = choices.UNSET,
                        model: Any = choices.UNSET,
                        reasoning_effort: Any = choices.UNSET) -> dict[str, Any]:
        """Switch the session's route, model or effort from its next turn on, checked now
        (:func:`.choices.choose_model`); returns :meth:`settings`."""
        session = await self._session(session_id)
        switched = choices.choose_model(self._turns, session, provider=provider, model=model,
                                        reasoning_effort=reasoning_effort)
        return {**await self.settings(session_id), **switched}

    async def set_policy(self, session_id: str, mode: Any) -> dict[str, Any]:
        """Put the session in policy ``mode`` (null: the profile's) from its next tool call
        on; InvalidArgumentError for a mode not accepted or a profile without a policy."""
        session = await self._session(session_id)
        mode = choices.check_policy(mode)
        if not self.has_guardrail("policy"):
            raise InvalidArgumentError("this profile has no policy (no guardrail-policy row)",
                                       code="no-policy")
        choices.update(session, {"policy": mode})
        return await self.settings(session_id)

    async def forget_decisions(self, session_id: str) -> dict[str, Any]:
        """Forget the approvals remembered for the session; returns :meth:`settings`."""
        choices.forget(await self._session(session_id))
        return await self.settings(session_id)

    async def shell(self, session_id: str, command: str) -> dict[str, Any]:
        """Run the user's own ``command`` with the session's shell tool (its sandbox),
        record it where the model reads it next turn (:mod:`.usershell`); returns
        ``{output, isError}``. A running turn is SessionBusyError."""
        session = await self._session(session_id)
        return await usershell.run(session, command, self._turns, self._journal)

    async def _session(self, session_id: str) -> Session:
        self._check_open()
        session = await self._sessions.confirmed(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        return session

    def history(self, session_id: str) -> list[dict[str, Any]]:
        """A live session's events so far, in ``seq`` order."""
        return list(self._sessions.get(session_id).record.events)

    def log(self, session_id: str) -> Sequence[Mapping[str, Any]]:
        """A live session's event log itself, in ``seq`` order: not a copy, so many
        readers (event streams) share it as it grows; read it, never change it."""
        return self._sessions.get(session_id).record.events

    def history_page(self, session_id: str, *, start_seq: int, limit: int,
                     max_bytes: int) -> HistoryPage:
        """A page of the session's log from ``start_seq`` (see
        :func:`~dsh.runtime.agent.store.page_of` for the bounds); unknown is
        SessionNotFoundError.

        A session held here is read from memory, which holds even an event whose append
        failed; any other (parked, stored, or running in another runtime) from the
        store, which needs no lease to read. A page that reaches the end of a log a dead
        runtime left inside a turn has that turn closed first (``interrupted``, in the
        store: :meth:`~.store.SessionStore.close_abandoned`).
        """
        session = self._sessions.live(session_id)
        if session is not None and session.parked is None:
            return page_of(session.record.events, start_seq, limit, max_bytes)
        store = self._journal.store
        page = store.history_page(session_id, start_seq=start_seq, limit=limit,
                                  max_bytes=max_bytes)
        if page is None:
            raise SessionNotFoundError(session_id)
        if page.next_seq is None and store.close_abandoned(session_id):
            page = store.history_page(session_id, start_seq=start_seq, limit=limit,
                                      max_bytes=max_bytes) or page
        return page

    async def close(self) -> None:
        """Cancel every turn, fire ``session_end``, save every session; bounded, idempotent."""
        if self._closed:
            return
        self._closed = True
        sessions = self._sessions.all()
        for session in sessions:
            await self.cancel(session.id)
        runners = [s.runner for s in sessions if s.runner is not None]
        if runners:
            _, late = await asyncio.wait(runners, timeout=CLOSE_BOUND)
            for task in late:
                task.cancel()
        ends = [asyncio.ensure_future(self._lifecycle.fire(s, "session_end"))
                for s in sessions]
        if ends:
            _, late = await asyncio.wait(ends, timeout=CLOSE_BOUND)
            for task in late:
                task.cancel()
        holdings = self._sessions.holdings
        holdings.close()
        for session in sessions:
            if session.parked is None:  # a parked one is saved, its lease given back
                self._journal.save(session.record)
                holdings.release(session.id)
        self._unhook()

    # -- internals ------------------------------------------------------------------------

    def _settings(self) -> AgentConfig:
        return self.config

    def _hook_budget(self) -> float:
        return self.config.hook_budget_s

    def _is_closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise DshError("the agent is closed")

    def _on_hook_error(self, error: HookError) -> None:
        session = self._sessions.find(error.session_id or "")
        if session is None:
            logger.warning("%s", error.message)
            return
        session.emit(events.ERROR, events.hook_error(error.message, error.hook, error.event))
