"""``AsyncDshClient``: one runtime process, started, used and shut down in order.

The client walks the readiness ladder of :mod:`dsh.sdk._lifecycle` on :meth:`start` and
the shutdown ladder on :meth:`close`; between the two it offers the SDK protocol as
sessions plus a low-level ``request``/``notify``/``subscribe``. It owns the process
(:mod:`._transport`) and the connection (:mod:`._router`, over the core
:class:`~dsh.core.peer.Peer`) but is referenced by neither, so
a client dropped without ``close()`` is collected and its finalizer kills the process
group; the same finalizer runs at interpreter exit.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dsh._version import __version__
from dsh.core.errors import (
    ClientClosedError,
    DshError,
    InitializeTimeoutError,
    JsonRpcError,
    ProtocolError,
    RuntimeExitedError,
)
from dsh.core.jsonrpc import INTERNAL_ERROR, Params
from dsh.sdk._config import ClientConfig
from dsh.sdk._diagnose import missing_sdk_server
from dsh.sdk._events import (
    ApprovalAnswer,
    ApprovalRequest,
    Decision,
    SessionMoved,
    approval_request,
    history_page,
    session_event,
    session_id,
    session_moved,
)
from dsh.sdk._launch import HeadStart
from dsh.sdk._lifecycle import ClientState, ErrorContext, Readiness, Stage, not_usable
from dsh.sdk._locate import RuntimeInfo
from dsh.sdk._router import AsyncSubscription, Handler, Predicate, Router
from dsh.sdk._transport import KILL_WAIT, RuntimeProcess

if TYPE_CHECKING:
    from dsh.sdk._session import AsyncSession

Answer = Decision | ApprovalAnswer
ApprovalCallback = Callable[[ApprovalRequest], Answer | Awaitable[Answer]]

log = logging.getLogger("dsh.sdk")


class AsyncDshClient:
    """An asyncio client of one dsh runtime process (``dsh --profile sdk`` by default).

    Use it as ``async with AsyncDshClient(config) as client:``, or call :meth:`start` and
    :meth:`close`. ``on_approval``, when given, is declared to the runtime at
    ``initialize`` and receives its ``approval/request`` calls (return ``"allow"``,
    ``"deny"`` or an :class:`ApprovalAnswer`, directly or awaitably); without it the
    profile's policy decides.
    """

    def __init__(self, config: ClientConfig | None = None, *,
                 on_approval: ApprovalCallback | None = None) -> None:
        self._config = config if config is not None else ClientConfig()
        self._on_approval = on_approval
        self._state = ClientState.NEW
        self._context = ErrorContext(self.config.profile, self.config.carrier)
        self._router: Router | None = None
        self._process: RuntimeProcess | None = None
        self._finalizer: weakref.finalize[[], AsyncDshClient] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._server_info: dict[str, Any] = {}

    # -- what it is -----------------------------------------------------------------------

    @property
    def config(self) -> ClientConfig:
        """The configuration this client was built with."""
        return self._config

    @property
    def state(self) -> ClientState:
        """The lifecycle state; ``failed`` once the runtime died or broke the protocol."""
        if (self._state is ClientState.READY and self._router is not None
                and self._router.failure is not None):
            return ClientState.FAILED
        return self._state

    @property
    def runtime(self) -> RuntimeInfo | None:
        """The runtime chosen at start: carrier, command, lookup source, version."""
        return self._context.runtime

    @property
    def server_info(self) -> dict[str, Any]:
        """The ``initialize`` answer (``serverInfo``, ``protocolVersion``, ``profile``)."""
        return dict(self._server_info)

    @property
    def pid(self) -> int | None:
        """The runtime's process id (kept after it exited, for diagnostics)."""
        return None if self._process is None else self._process.pid

    @property
    def exit_code(self) -> int | None:
        """The runtime's exit status once it ended (negative: killed by that signal)."""
        return None if self._process is None else self._process.exit_code

    @property
    def stderr_tail(self) -> tuple[str, ...]:
        """The runtime's last stderr lines (at most 200)."""
        return () if self._process is None else self._process.stderr_tail

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncDshClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Find, spawn and handshake with the runtime, up to ``tools_ready``.

        On any failure (or cancellation) the process is torn down before the error is
        raised, and the error names the stage that failed, the profile and the carrier.
        """
        await self._start(None)

    async def _start(self, head: HeadStart | None) -> None:
        """:meth:`start`, from ``head`` when the blocking client already did that part
        (before it loaded asyncio); a ``head`` not used is discarded."""
        if self._state is not ClientState.NEW:
            if head is not None:
                head.discard()
            raise self._not_usable("start")
        self._state = ClientState.STARTING
        try:
            await self._climb(head)
        except BaseException:
            await self._teardown(graceful=False)
            self._state = ClientState.CLOSED
            raise
        self._state = ClientState.READY

    async def close(self) -> None:
        """Shut the runtime down; idempotent, and safe to call concurrently.

        The ladder, each rung bounded by ``shutdown_timeout``: a ``shutdown`` request,
        closing stdin, ``SIGTERM`` to the process group, then ``SIGKILL``. If ``close``
        itself is cancelled, the group is killed at once before the cancellation goes on.
        """
        if self._state is ClientState.NEW:
            self._state = ClientState.CLOSED
            return
        if self._state is ClientState.STARTING:
            raise self._not_usable("close")
        if self._closed is not None:
            await asyncio.shield(self._closed)
            return
        if self._state is ClientState.CLOSED:
            return
        self._closed = asyncio.get_running_loop().create_future()
        self._state = ClientState.CLOSING
        try:
            await self._teardown(graceful=True)
        finally:
            self._state = ClientState.CLOSED
            self._closed.set_result(None)

    async def readiness(self) -> Readiness:
        """The stage reached and, from a ready runtime, whether it needs a reload."""
        reload_required: bool | None = None
        if self.state is ClientState.READY:
            status = await self.request("runtime/status")
            value = status.get("reloadRequired") if isinstance(status, dict) else None
            reload_required = value if isinstance(value, bool) else None
        return Readiness(self.state, self._context.reached, reload_required)

    # -- the protocol ---------------------------------------------------------------------

    async def request(self, method: str, params: Params | None = None, *,
                      timeout: float | None = None) -> Any:
        """Call ``method`` and return its result (low level: any method of the protocol).

        ``timeout`` defaults to ``config.request_timeout``. Raises :class:`JsonRpcError`
        for an error answer (:class:`BusyError` when retryable),
        :class:`RequestTimeoutError`, or the runtime's failure.
        """
        router = self._usable(method)
        limit = self.config.request_timeout if timeout is None else timeout
        return await router.call(method, params, limit)

    async def notify(self, method: str, params: Params | None = None) -> None:
        """Send a notification (no answer)."""
        router = self._usable(method)
        router.notify(method, params)
        await router.peer.drain()

    def subscribe(self, predicate: Predicate | None = None) -> AsyncSubscription:
        """Receive the runtime's notifications (those ``predicate`` accepts) from now on.

        Close the subscription when done: one left unread eventually pauses reading.
        """
        return self._usable("subscribe").subscribe(predicate)

    async def new_session(self, *, cwd: str | os.PathLike[str] | None = None,
                          mcp_servers: Sequence[Mapping[str, Any]] | None = None,
                          history: Sequence[Mapping[str, Any]] | None = None) -> AsyncSession:
        """Create a session (``session/new``); ``cwd`` defaults to the runtime's.

        ``mcp_servers`` connects MCP servers for this session only (ACP's shape:
        ``{name, command, args, env: [{name, value}]}`` or ``{type: "http", name, url,
        headers: [{name, value}]}``; the profile needs an ``mcp-servers`` row);
        ``history`` starts the session from a copy of another conversation's messages.
        """
        from dsh.sdk._session import AsyncSession

        params: dict[str, Any] = {} if cwd is None else {"cwd": os.path.abspath(os.fspath(cwd))}
        if mcp_servers is not None:
            params["mcpServers"] = [dict(server) for server in mcp_servers]
        if history is not None:
            params["history"] = [dict(message) for message in history]
        return AsyncSession(self, session_id(await self.request("session/new", params)))

    async def resume_session(self, session_id: str) -> AsyncSession:
        """Restore a persisted session (``session/resume``); missing or busy ones fail."""
        from dsh.sdk._session import AsyncSession

        await self.request("session/resume", {"sessionId": session_id})
        return AsyncSession(self, session_id)

    async def sessions(self, *, session_id: str | None = None, workspace: str | None = None,
                       limit: int | None = None) -> list[dict[str, Any]]:
        """Every session the runtime knows (``session/list``), sorted by id, each with its
        summary (title, times, turns, workspace, usage, cost: no log is read). Narrowed:
        ``session_id`` that one only, ``workspace`` the sessions of that workspace root,
        ``limit`` the ones updated last, newest first."""
        narrow = {key: value for key, value in (("sessionId", session_id),
                                                ("workspace", workspace), ("limit", limit))
                  if value is not None}
        return _list(await self.request("session/list", narrow or None), "sessions")

    async def history(self, session_id: str, *,
                      page_size: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Yield a session's stored events in seq order, one ``session/history`` page at a
        time (``page_size`` events a page; the runtime's default when None).

        Reading needs no lease: this works for a session another runtime is running, as
        far as that runtime has stored it. Events are ``{type, seq, time, data, ...}`` as
        the runtime keeps them.
        """
        params: dict[str, Any] = {"sessionId": session_id}
        if page_size is not None:
            params["limit"] = page_size
        while True:
            events, cursor = history_page(await self.request("session/history", params))
            for event in events:
                yield event
            if cursor is None:
                return
            if cursor == params.get("cursor"):
                raise ProtocolError(f"session/history did not move past cursor {cursor!r}")
            params["cursor"] = cursor

    async def moves(self, session_id: str | None = None) -> AsyncIterator[SessionMoved]:
        """Yield each :class:`SessionMoved` from now on (of ``session_id`` only, when
        given): a session this runtime gave back that another runtime continued. Leave
        the loop to stop listening; it ends with the client."""
        def wanted(notification: Any) -> bool:
            moved = session_moved(session_event(notification.params))
            return moved is not None and session_id in (None, moved.session_id)

        with self.subscribe(wanted) as subscription:
            async for notification in subscription:
                moved = session_moved(session_event(notification.params))
                if moved is not None:
                    yield moved

    async def models(self) -> list[dict[str, Any]]:
        """Each provider route and the models it names, default first (``models/list``):
        ``[{provider, models}]``. A route may accept models it does not name."""
        return _list(await self.request("models/list"), "routes")

    async def tools(self) -> list[dict[str, Any]]:
        """Name, description and parameter schema of every tool (``tools/list``)."""
        return _list(await self.request("tools/list"), "tools")

    # -- internals ------------------------------------------------------------------------

    async def _climb(self, head: HeadStart | None) -> None:
        context, config = self._context, self.config
        if head is None:
            head = HeadStart(config, os.environ)
            head.spawn()
        try:
            context.runtime = head.runtime
            if head.spec is None:
                assert head.error is not None
                raise head.error
            spec = head.spec
            self._reach(Stage.CONFIGURED)
            if head.error is not None:  # found and checked, but the OS refused to run it
                raise head.error
            router = self._router = Router(context)
            self._process = await RuntimeProcess.spawn(
                spec, router.peer, max_frame_bytes=config.max_frame_bytes,
                stderr_callback=config.stderr, child=head.child,
            )
            head.take()
        except DshError as exc:
            context.annotate(exc)
            raise
        finally:
            head.discard()  # a spawned runtime no transport took
        router.attach(self._process)
        self._finalizer = weakref.finalize(self, self._process.abort)
        self._reach(Stage.SPAWNED)
        if self._on_approval is not None:
            router.handle("approval/request", _approval_handler(self._on_approval))
        try:
            answer = await self._startup_call("initialize", self._initialize_params(spec.cwd))
        except RuntimeExitedError as exc:
            if exc.exit_code > 0 and exc.hint is None:
                exc.hint = await missing_sdk_server(spec, config.profile)
            raise
        self._server_info = answer if isinstance(answer, dict) else {}
        version = (self._server_info.get("serverInfo") or {}).get("version")
        if isinstance(version, str) and context.runtime is not None:
            context.runtime = replace(context.runtime, version=version)
        self._reach(Stage.HANDSHAKE)
        await self._startup_call("tools/list", None)
        self._reach(Stage.TOOLS_READY)
        context.started = True
        runtime = context.runtime
        assert runtime is not None
        log.info("dsh runtime ready: carrier %s, %s, version %s, pid %s, profile %s",
                 runtime.carrier, " ".join(runtime.command), runtime.version,
                 self.pid, config.profile)

    def _reach(self, stage: Stage) -> None:
        """Record ``stage`` as reached, and say so at DEBUG on the ``dsh.sdk`` logger: a
        slow start can then be read rung by rung (``scripts/bench.py`` times the
        ``handshake`` rung this way, as the moment ``initialize`` was answered)."""
        self._context.reached = stage
        log.debug("dsh runtime stage %s reached", stage.value)

    def _initialize_params(self, cwd: str) -> dict[str, Any]:
        config = self.config
        params: dict[str, Any] = {
            "cwd": cwd,
            "clientInfo": {"name": "dsh.sdk", "version": __version__},
        }
        optional = {"provider": config.provider, "model": config.model,
                    "reasoningEffort": config.reasoning_effort, "maxTokens": config.max_tokens}
        params.update({k: v for k, v in optional.items() if v is not None})
        if self._on_approval is not None:
            params["capabilities"] = {"approvals": True}
        return params

    async def _startup_call(self, method: str, params: Params | None) -> Any:
        assert self._router is not None
        try:
            return await self._router.call(method, params, self.config.initialize_timeout,
                                           timeout_error=InitializeTimeoutError)
        except JsonRpcError as exc:
            # The runtime is alive but refused (an unknown route, a bad profile): that is
            # a startup failure too, and says so.
            self._context.annotate(exc, self._router.stderr_tail())
            raise

    async def _teardown(self, *, graceful: bool) -> None:
        """Run the shutdown ladder; ``graceful`` tries the ``shutdown`` request first."""
        process, router = self._process, self._router
        if router is not None:
            router.closing = True
        if process is None or router is None:
            return
        timeout = self.config.shutdown_timeout
        try:
            if graceful and process.running and router.failure is None:
                try:
                    await router.call("shutdown", None, timeout)
                except DshError:
                    pass
                else:
                    await process.wait_exit(timeout)
            if process.running:
                process.close_stdin()
                if graceful:
                    await process.wait_exit(timeout)
            if process.running:
                process.terminate()
                await process.wait_exit(timeout)
            # Always: the runtime's own children left in its group go too.
            process.kill()
            if process.running:
                await process.wait_exit(KILL_WAIT)
            await process.release()
        except BaseException:
            process.abort()
            raise
        finally:
            router.fail(self._context.annotate(ClientClosedError("client is closed")))
            if self._finalizer is not None:
                self._finalizer.detach()

    async def _abort(self) -> None:
        """Kill the process group at once and release everything: for a client abandoned
        without ``close()`` (its owner is gone, so nobody waits for a graceful end)."""
        if self._state is ClientState.CLOSED or self._process is None:
            self._state = ClientState.CLOSED
            return
        assert self._router is not None
        self._router.closing = True
        self._process.abort()
        try:
            await self._process.wait_exit(KILL_WAIT)
            await self._process.release()
        finally:
            self._router.fail(self._context.annotate(ClientClosedError("client is closed")))
            self._state = ClientState.CLOSED
            if self._finalizer is not None:
                self._finalizer.detach()

    def _usable(self, what: str) -> Router:
        state = self.state
        if state is ClientState.READY:
            assert self._router is not None
            return self._router
        if state is ClientState.FAILED:
            assert self._router is not None and self._router.failure is not None
            raise self._router.failure
        raise self._not_usable(what)

    def _not_usable(self, what: str) -> DshError:
        return not_usable(self._state, what)


def _list(answer: Any, key: str) -> list[dict[str, Any]]:
    value = answer.get(key) if isinstance(answer, dict) else None
    return list(value) if isinstance(value, list) else []


def _approval_handler(callback: ApprovalCallback) -> Handler:
    """Wrap ``on_approval`` as the ``approval/request`` handler.

    A closure over the callback only: the router holding it must not keep the client
    alive.
    """

    async def handle(params: Params | None) -> dict[str, Any]:
        decision = callback(approval_request(params))
        if inspect.isawaitable(decision):
            decision = await decision
        if isinstance(decision, ApprovalAnswer):
            return decision.wire()
        if decision not in ("allow", "deny"):
            raise JsonRpcError(INTERNAL_ERROR, f"on_approval returned {decision!r}, not "
                               "'allow', 'deny' or an ApprovalAnswer")
        return {"decision": decision}

    return handle
