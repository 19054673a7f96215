"""The chat's runtime, through the SDK: one client, the session it talks in, what it hears.

The chat is an SDK client like any embedding program (:mod:`dsh.sdk`): it spawns the
chat profile (``dsh --profile chat``, on whichever carrier the SDK finds) and speaks the
protocol. :class:`Link` holds the client and the current session id, forwards every
notification to the app, turns the runtime's ``approval/request`` into an awaitable the
app answers, and knows when the runtime is gone, so the app can say so and start another
one on the next message (:meth:`Link.restart`), resuming the session where it was.

A session is created on the first message, not at start: a chat opened and left makes
none, and a first message whose route has no key is refused before any session exists.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from dsh.chat.options import ChatOptions
from dsh.core import idprefix
from dsh.core.errors import DshError
from dsh.core.jsonrpc import Notification
from dsh.sdk import ApprovalAnswer, ApprovalRequest, AsyncDshClient, ClientConfig

Listener = Callable[[Notification], None]
Asker = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer]]

STDERR_LINES = 200


class Link:
    """The runtime and the session of one chat."""

    def __init__(self, options: ChatOptions, listener: Listener, asker: Asker,
                 gone: Callable[[BaseException | None], None]) -> None:
        self.options = options
        self.session_id: str | None = None
        self.stderr: list[str] = []
        self._listener = listener
        self._asker = asker
        self._gone = gone
        self._client: AsyncDshClient | None = None
        self._pump: asyncio.Task[None] | None = None
        self._choice: dict[str, Any] = {}

    # -- the runtime -----------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the runtime is up and answering."""
        client = self._client
        return client is not None and client.state.value == "ready"

    @property
    def client(self) -> AsyncDshClient:
        """The running client (DshError when there is none)."""
        if self._client is None:
            raise DshError("the runtime is not running")
        return self._client

    async def start(self) -> None:
        """Spawn the runtime and wait until it is ready; notifications flow from then."""
        o = self.options
        config = ClientConfig(profile=o.profile, patches=list(o.patches), dsh_home=o.home,
                              cwd=o.cwd, provider=o.provider, model=o.model,
                              reasoning_effort=o.effort, initialize_timeout=120.0,
                              stderr=self._stderr)
        client = AsyncDshClient(config, on_approval=self._asker)
        await client.start()
        self._client = client
        subscription = client.subscribe()
        self._pump = asyncio.ensure_future(self._forward(subscription))

    async def _forward(self, subscription: Any) -> None:
        error: BaseException | None = None
        try:
            async for notification in subscription:
                self._listener(notification)
        except DshError as exc:  # the runtime died or broke the protocol
            error = exc
        finally:
            subscription.close()
        if self._client is not None and self._client.state.value != "closing":
            self._gone(error)

    def _stderr(self, line: str) -> None:
        self.stderr.append(line)
        del self.stderr[:-STDERR_LINES]

    async def restart(self) -> None:
        """A new runtime after the last one died; the session is resumed in it."""
        await self.close()
        self._client = None
        await self.start()
        if self.session_id is not None:
            await self.client.resume_session(self.session_id)
            await self._reapply()

    async def close(self) -> None:
        """Shut the runtime down (bounded); idempotent."""
        client = self._client
        if client is not None:
            with contextlib.suppress(DshError, OSError):
                await client.close()
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, DshError):
                await self._pump
            self._pump = None

    @property
    def exit_code(self) -> int | None:
        """The runtime's exit status, once it ended."""
        return None if self._client is None else self._client.exit_code

    # -- the session -----------------------------------------------------------------------

    async def request(self, method: str, **params: Any) -> Any:
        """One protocol call about the current session."""
        if self.session_id is None:
            raise DshError("no session yet: send a message first")
        return await self.client.request(method, {"sessionId": self.session_id, **params})

    async def ensure_session(self) -> str:
        """The current session, created now in the chat's directory if there is none."""
        if self.session_id is None:
            session = await self.client.new_session(cwd=self.options.cwd)
            self.session_id = session.id
            await self._reapply()
        return self.session_id

    async def resume(self, session_id: str) -> None:
        """Make ``session_id`` the current session (restored by the runtime)."""
        await self.client.resume_session(session_id)
        self.session_id = session_id
        await self._reapply()

    def leave(self) -> None:
        """No current session: the next message starts a new one."""
        self.session_id = None

    async def prompt(self, blocks: Sequence[dict[str, Any]]) -> str:
        """Queue a message on the session (created first if need be); its message id."""
        await self.ensure_session()
        answer = await self.request("session/prompt", contentBlocks=list(blocks))
        return str(answer["messageId"])

    async def cancel(self) -> bool:
        """Cancel the running turn or command."""
        if self.session_id is None or not self.alive:
            return False
        answer = await self.request("session/cancel")
        return bool(answer.get("cancelled")) if isinstance(answer, dict) else False

    async def choose(self, **changes: Any) -> dict[str, Any]:
        """Switch route, model or effort; kept, so a new or resumed session gets it too."""
        wire = {{"reasoning_effort": "reasoningEffort"}.get(k, k): v for k, v in changes.items()}
        if self.session_id is None:
            await self.ensure_session()
        settings = await self.request("session/model/set", **wire)
        self._choice.update(wire)
        return settings

    async def _reapply(self) -> None:
        """Give a new or resumed session the model choices made in this chat."""
        if self._choice and self.session_id is not None:
            with contextlib.suppress(DshError):
                await self.request("session/model/set", **self._choice)

    async def sessions(self, *, session_id: str | None = None, workspace: str | None = None,
                       limit: int | None = None) -> list[dict[str, Any]]:
        """Session summaries as ``session/list`` has them (no log is read), narrowed to
        one session, one workspace root, or the ``limit`` updated last (newest first)."""
        return await self.client.sessions(session_id=session_id, workspace=workspace,
                                          limit=limit)

    async def session_named(self, given: str) -> str:
        """The session id ``given`` names, whole or by its start (:mod:`dsh.core.idprefix`,
        as ``dsh sessions show`` reads it); ``given`` itself when it names none, for
        ``session/resume`` to refuse. DshError when it begins several. Every session is
        listed only when ``given`` is no session's whole id."""
        if await self.sessions(session_id=given):
            return given
        matches = idprefix.named(given, [str(e["sessionId"]) for e in await self.sessions()])
        if len(matches) > 1:
            raise DshError(idprefix.ambiguous(given, matches))
        return matches[0] if matches else given

    async def summary(self) -> dict[str, Any] | None:
        """The current session's summary (title, times, turns, usage, cost), if any."""
        if self.session_id is None:
            return None
        found = await self.sessions(session_id=self.session_id)
        return found[0] if found else None

    async def route_problem(self) -> str | None:
        """Why the next turn's route would fail before any request (a missing key)."""
        wanted = self.options.provider
        if self.session_id is not None:
            settings = await self.request("session/settings/get")
            wanted = settings.get("provider")
        wanted = self._choice.get("provider", wanted)
        for route in await self.client.models():
            if (route.get("provider") == wanted) or (wanted is None and route.get("default")):
                problem = route.get("problem")
                return problem if isinstance(problem, str) else None
        return None
