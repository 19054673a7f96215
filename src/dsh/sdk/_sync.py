"""``DshClient``: the blocking facade over :class:`AsyncDshClient`.

One background thread runs one event loop that owns the async client; every blocking
method submits a coroutine to it and waits. There is exactly one implementation of the
protocol (the async one), and calls from several threads interleave on the loop instead
of queueing behind a lock as they would with a thread per call. Interrupting a wait
(Ctrl-C) cancels the coroutine on the loop.

The thread and the loop exist from :meth:`DshClient.start`, which first does what needs
no loop (:class:`~._launch.HeadStart`: find the runtime, check the launch) and on POSIX
spawns the runtime before the thread starts; only a runtime the kernel ties to its
spawning thread is spawned by the loop thread instead. The loop is then made while the
runtime boots.

The thread and the runtime are released by :meth:`DshClient.close`; a client dropped
without it is collected and its finalizer kills the runtime's process group and stops the
thread (also at interpreter exit).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar

from dsh.core.errors import ClientClosedError, DshError
from dsh.core.jsonrpc import Notification, Params
from dsh.core.process import KILL_WAIT
from dsh.sdk._config import ClientConfig
from dsh.sdk._events import (
    ApprovalAnswer,
    ApprovalRequest,
    Decision,
    Event,
    Prompt,
    RunResult,
    SessionMoved,
)
from dsh.sdk._launch import HeadStart
from dsh.sdk._lifecycle import ClientState, Readiness, not_usable
from dsh.sdk._locate import RuntimeInfo

if TYPE_CHECKING:
    import asyncio

    from dsh.sdk._client import AsyncDshClient
    from dsh.sdk._router import AsyncSubscription, Predicate
    from dsh.sdk._session import AsyncSession

T = TypeVar("T")
SyncApprovalCallback = Callable[[ApprovalRequest], Decision | ApprovalAnswer]


class _LoopThread:
    """An event loop running on its own daemon thread until :meth:`stop`.

    It is given the client's :class:`HeadStart` and owns it until :meth:`ready` hands it
    back. A runtime not spawned yet (one the kernel ties to its spawning thread: this
    thread lives as long as the client) is spawned here before the loop is made, and
    boots meanwhile. :meth:`ready` waits for both.
    """

    def __init__(self, head: HeadStart) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._head: HeadStart | None = None
        self._failure: BaseException | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(head,),
                                       name="dsh-sdk-loop", daemon=True)
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.loop is not None

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def ready(self) -> HeadStart:
        """Wait until the loop runs; the head start, now the caller's (to hand to the
        async client, or to discard)."""
        self._ready.wait()
        if self._failure is not None:
            raise self._failure
        head, self._head = self._head, None
        if head is None:  # stopped before it was ready
            raise ClientClosedError("start: client is closed")
        return head

    def run(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run ``coro`` on the loop and wait for it; the caller's interruption cancels it."""
        if not self.alive:
            coro.close()
            raise ClientClosedError(f"{what}: client is closed")
        if self.on_loop_thread():
            coro.close()
            raise DshError(f"{what}: a DshClient method was called from the client's own "
                           "event-loop thread (a stderr callback?); it would wait on itself")
        import asyncio  # loaded by the loop thread before it ran

        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        """Stop the loop; the thread closes it and ends. Joined unless called from it.
        Before the loop runs, the thread discards its head start and ends instead."""
        with self._lock:
            self._stopped = True
            loop = self.loop
        if loop is not None and self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # already closed by the thread
                loop.call_soon_threadsafe(loop.stop)
        if not self.on_loop_thread():
            self.thread.join()

    def _serve(self, head: HeadStart) -> None:
        try:
            head.spawn()  # spawned already unless tied to this thread (or off POSIX)
            # asyncio and the async client load here, not at ``from dsh.sdk import
            # DshClient``: they cost more than the rest of the SDK's import together,
            # and here they overlap the runtime's boot (on POSIX it was just spawned).
            import asyncio

            import dsh.sdk._client  # noqa: F401

            loop = asyncio.new_event_loop()
        except BaseException as exc:
            head.discard()
            self._failure = exc
            self._ready.set()
            return
        with self._lock:
            if self._stopped:
                head.discard()
                loop.close()
                self._ready.set()
                return
            self.loop, self._head = loop, head
        asyncio.set_event_loop(loop)
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            # What the loop still holds: abandoned generators and approval-callback threads.
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()


class DshClient:
    """A blocking client of one dsh runtime process; see :class:`AsyncDshClient`.

    Use it as ``with DshClient(config) as client:``, or call :meth:`start` and
    :meth:`close`. ``on_approval`` is a plain function, run in a worker thread so it may
    block (ask a human) and may call this client.
    """

    def __init__(self, config: ClientConfig | None = None, *,
                 on_approval: SyncApprovalCallback | None = None) -> None:
        self._config = config if config is not None else ClientConfig()
        self._on_approval = on_approval
        # From start(): the loop thread, then the async client on it.
        self._engine: _LoopThread | None = None
        self._async: AsyncDshClient | None = None
        self._finalizer: weakref.finalize[[_LoopThread, AsyncDshClient], DshClient] | None = None
        self._closed = False

    # -- what it is -----------------------------------------------------------------------

    @property
    def config(self) -> ClientConfig:
        """The configuration this client was built with."""
        return self._config

    @property
    def state(self) -> ClientState:
        """The lifecycle state (see :class:`ClientState`)."""
        if self._async is not None:
            return self._async.state
        if self._closed:
            return ClientState.CLOSED
        return ClientState.NEW if self._engine is None else ClientState.STARTING

    @property
    def runtime(self) -> RuntimeInfo | None:
        """The runtime chosen at start: carrier, command, lookup source, version."""
        return None if self._async is None else self._async.runtime

    @property
    def server_info(self) -> dict[str, Any]:
        """The ``initialize`` answer."""
        return {} if self._async is None else self._async.server_info

    @property
    def pid(self) -> int | None:
        """The runtime's process id."""
        return None if self._async is None else self._async.pid

    @property
    def exit_code(self) -> int | None:
        """The runtime's exit status once it ended (negative: killed by that signal)."""
        return None if self._async is None else self._async.exit_code

    @property
    def stderr_tail(self) -> tuple[str, ...]:
        """The runtime's last stderr lines (at most 200)."""
        return () if self._async is None else self._async.stderr_tail

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> DshClient:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the runtime up to ``tools_ready`` (see :meth:`AsyncDshClient.start`).

        A failed start leaves the client closed, its loop thread included: ``with`` never
        reaches ``__exit__`` when ``__enter__`` raises, so nothing else would stop it.
        """
        if self._closed:
            raise not_usable(ClientState.CLOSED, "start")
        if self._async is not None:  # started before: the async client says how far
            self._start(self._async.start())
            return
        if self._engine is not None:
            raise not_usable(ClientState.STARTING, "start")
        head: HeadStart | None = None
        try:
            head = HeadStart(self._config, os.environ)
            if not head.tied:  # it watches this process: any thread may spawn it, now
                head.spawn()
            engine = self._engine = _LoopThread(head)
            # The thread's until ready() hands it back: the thread discards it itself
            # when it fails, or is stopped before it is ready.
            head = None
            head = engine.ready()
            from dsh.sdk._client import AsyncDshClient  # the loop thread imported it

            client = self._async = AsyncDshClient(self._config,
                                                  on_approval=_in_thread(self._on_approval))
            self._finalizer = weakref.finalize(self, _abandon, engine, client)
            starting, head = client._start(head), None  # from here the client owns it
        except BaseException:
            if head is not None:
                head.discard()
            self.close()
            raise
        self._start(starting)

    def _start(self, starting: Coroutine[Any, Any, None]) -> None:
        try:
            self._run(starting, "start")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Shut the runtime down and stop the loop thread; idempotent."""
        engine = self._engine
        if engine is None:
            self._closed = True
            return
        if engine.alive and self._async is not None:
            try:
                engine.run(self._async.close(), "close")
            finally:
                engine.stop()
        else:
            engine.stop()
        self._closed = self._async is None
        if self._finalizer is not None:
            self._finalizer.detach()

    def readiness(self) -> Readiness:
        """The stage reached and whether the runtime needs a reload."""
        if self._async is None:
            return Readiness(self.state, None, None)
        return self._run(self._async.readiness(), "readiness")

    # -- the protocol ---------------------------------------------------------------------

    def request(self, method: str, params: Params | None = None, *,
                timeout: float | None = None) -> Any:
        """Call ``method`` and return its result (see :meth:`AsyncDshClient.request`)."""
        engine, client = self._client(method)
        return engine.run(client.request(method, params, timeout=timeout), method)

    def notify(self, method: str, params: Params | None = None) -> None:
        """Send a notification (no answer)."""
        engine, client = self._client(method)
        engine.run(client.notify(method, params), method)

    def subscribe(self, predicate: Predicate | None = None) -> Subscription:
        """Receive the runtime's notifications (those ``predicate`` accepts) from now on;
        ``predicate`` runs on the client's loop thread."""
        engine, client = self._client("subscribe")
        return Subscription(engine, engine.run(_call(client.subscribe, predicate),
                                               "subscribe"))

    def new_session(self, *, cwd: str | os.PathLike[str] | None = None,
                    mcp_servers: Sequence[Mapping[str, Any]] | None = None,
                    history: Sequence[Mapping[str, Any]] | None = None) -> Session:
        """Create a session (see :meth:`AsyncDshClient.new_session`)."""
        engine, client = self._client("session")
        return Session(engine, engine.run(client.new_session(
            cwd=cwd, mcp_servers=mcp_servers, history=history), "session"))

    def resume_session(self, session_id: str) -> Session:
        """Restore a persisted session; missing or busy ones fail."""
        engine, client = self._client("session")
        return Session(engine, engine.run(client.resume_session(session_id), "session"))

    def sessions(self, *, session_id: str | None = None, workspace: str | None = None,
                 limit: int | None = None) -> list[dict[str, Any]]:
        """Every session the runtime knows, sorted by id, or narrowed (see
        :meth:`AsyncDshClient.sessions`)."""
        engine, client = self._client("sessions")
        return engine.run(client.sessions(session_id=session_id, workspace=workspace,
                                          limit=limit), "sessions")

    def models(self) -> list[dict[str, Any]]:
        """Each provider route and the models it names (``models/list``)."""
        engine, client = self._client("models")
        return engine.run(client.models(), "models")

    def tools(self) -> list[dict[str, Any]]:
        """Name, description and parameter schema of every tool."""
        engine, client = self._client("tools")
        return engine.run(client.tools(), "tools")

    def history(self, session_id: str, *,
                page_size: int | None = None) -> Iterator[dict[str, Any]]:
        """Yield a session's stored events in seq order, page by page (see
        :meth:`AsyncDshClient.history`)."""
        engine, client = self._client("history")
        return _blocking(engine, client.history(session_id, page_size=page_size), "history")

    def moves(self, session_id: str | None = None) -> Iterator[SessionMoved]:
        """Yield each session that moved to another runtime from now on (see
        :meth:`AsyncDshClient.moves`); blocks until one does."""
        engine, client = self._client("moves")
        return _blocking(engine, client.moves(session_id), "moves")

    def _client(self, what: str) -> tuple[_LoopThread, AsyncDshClient]:
        """The loop thread and the async client, once :meth:`start` made them; before
        that, the error the async client gives for ``what`` in this state."""
        if self._engine is None or self._async is None:
            raise not_usable(self.state, what)
        return self._engine, self._async

    def _run(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        engine, _ = self._client(what)
        return engine.run(coro, what)


class Session:
    """A session of a :class:`DshClient` (see :class:`AsyncSession`)."""

    def __init__(self, engine: _LoopThread, session: AsyncSession) -> None:
        self._engine = engine
        self._async = session

    @property
    def id(self) -> str:
        """The session id (``resume_session`` takes it back)."""
        return self._async.id

    def __repr__(self) -> str:
        return f"<Session {self.id}>"

    def run(self, prompt: Prompt, *,
            trace_context: Mapping[str, str] | None = None) -> RunResult:
        """Send ``prompt`` and wait for its run to end (``trace_context``: the W3C trace
        context of its turn, see :class:`~dsh.sdk.ClientConfig`)."""
        return self._engine.run(self._async.run(prompt, trace_context=trace_context), "run")

    def stream(self, prompt: Prompt, *,
               trace_context: Mapping[str, str] | None = None) -> Iterator[Event]:
        """Send ``prompt`` and yield this session's events until it is idle again."""
        return _blocking(self._engine,
                         self._async.stream(prompt, trace_context=trace_context), "stream")

    def history(self, *, page_size: int | None = None) -> Iterator[dict[str, Any]]:
        """Yield this session's stored events in seq order, page by page."""
        return _blocking(self._engine, self._async.history(page_size=page_size), "history")

    def cancel(self) -> bool:
        """Cancel the running turn; ``True`` if one was cancelled."""
        return self._engine.run(self._async.cancel(), "cancel")

    def mode(self) -> str:
        """The session's mode: ``default`` or ``plan``."""
        return self._engine.run(self._async.mode(), "mode")

    def set_mode(self, mode: str) -> str:
        """Switch between ``default`` and ``plan``; returns the mode."""
        return self._engine.run(self._async.set_mode(mode), "mode")

    def settings(self) -> dict[str, Any]:
        """What the next turn and tool calls use (see :meth:`AsyncSession.settings`)."""
        return self._engine.run(self._async.settings(), "settings")

    def set_model(self, **choice: Any) -> dict[str, Any]:
        """Switch ``provider``, ``model`` or ``reasoning_effort`` from the next turn on."""
        return self._engine.run(self._async.set_model(**choice), "set_model")

    def set_policy(self, mode: str | None) -> dict[str, Any]:
        """Switch the policy mode (None: the profile's) from the next tool call on."""
        return self._engine.run(self._async.set_policy(mode), "set_policy")

    def forget_approvals(self) -> dict[str, Any]:
        """Forget the approvals remembered for this session."""
        return self._engine.run(self._async.forget_approvals(), "forget_approvals")

    def changes(self) -> dict[str, Any]:
        """The files this session's tools changed, with their diffs."""
        return self._engine.run(self._async.changes(), "changes")

    def usage(self) -> dict[str, Any]:
        """Tokens, cost and context in use so far."""
        return self._engine.run(self._async.usage(), "usage")

    def shell(self, command: str) -> dict[str, Any]:
        """Run ``command`` yourself in the session's sandbox; the model reads it next."""
        return self._engine.run(self._async.shell(command), "shell")


class Subscription:
    """Blocking view of an :class:`AsyncSubscription`; iterate it or call :meth:`get`."""

    def __init__(self, engine: _LoopThread, subscription: AsyncSubscription) -> None:
        self._engine = engine
        self._async = subscription

    def get(self, timeout: float | None = None) -> Notification:
        """The next notification; :class:`TimeoutError` after ``timeout`` seconds."""
        import asyncio

        try:
            return self._engine.run(_within(self._async.get(), timeout), "subscription")
        except asyncio.TimeoutError:
            raise TimeoutError(f"no notification within {timeout:g} s") from None

    def close(self) -> None:
        """Stop receiving."""
        if self._engine.alive:
            self._engine.run(_call(self._async.close), "subscription")

    def __iter__(self) -> Iterator[Notification]:
        while not self._async.closed:
            try:
                yield self._engine.run(_next(self._async), "subscription")
            except StopAsyncIteration:
                return

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _call(fn: Callable[..., T], *args: Any) -> T:
    """Run a plain function on the loop thread (router state is the loop's alone)."""
    return fn(*args)


def _blocking(engine: _LoopThread, iterator: AsyncIterator[T], what: str) -> Iterator[T]:
    """Iterate an async iterator of the client's loop from this thread; leaving early
    closes it on the loop."""
    try:
        while True:
            try:
                yield engine.run(_next(iterator), what)
            except StopAsyncIteration:
                return
    finally:
        if engine.alive:
            engine.run(iterator.aclose(), what)  # type: ignore[attr-defined]


async def _next(iterator: Any) -> Any:
    return await iterator.__anext__()


async def _within(awaitable: Awaitable[T], timeout: float | None) -> T:
    import asyncio

    return await asyncio.wait_for(awaitable, timeout)


def _in_thread(
    callback: SyncApprovalCallback | None,
) -> Callable[[ApprovalRequest], Awaitable[Decision | ApprovalAnswer]] | None:
    """Run a blocking approval callback off the loop (it may wait for a human)."""
    if callback is None:
        return None

    async def approve(request: ApprovalRequest) -> Decision | ApprovalAnswer:
        import asyncio

        return await asyncio.to_thread(callback, request)

    return approve


def _abandon(engine: _LoopThread, client: AsyncDshClient) -> None:
    """Finalizer of a dropped :class:`DshClient`: kill the runtime, stop the thread."""
    if not engine.alive:
        return
    if engine.on_loop_thread():
        # Collected on the loop itself (a cycle broken by the collector there): nothing
        # may block here, so kill without waiting and let the thread wind down.
        if client._process is not None:
            client._process.abort()
        engine.stop()
        return
    import asyncio

    assert engine.loop is not None
    future = asyncio.run_coroutine_threadsafe(client._abort(), engine.loop)
    try:
        future.result(KILL_WAIT * 2)
    except Exception:
        # Best effort in a finalizer: the group was already sent SIGKILL.
        pass
    finally:
        engine.stop()
