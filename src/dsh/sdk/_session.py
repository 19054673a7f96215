"""``AsyncSession``: one agent session of a client, and the meaning of "a run".

A run is what the protocol defines (``docs/contracts.md``, "The SDK protocol"):
``session/prompt`` answers at once with a ``messageId`` and queues the message; the run
begins at that message's inbox receipt (an ``agent/inbox/spliced`` event whose
``data.inserted[].id`` is the id) and ends at the session's next ``session.status idle``,
which means its queue is drained.
The subscription is opened *before* the prompt is sent, so no event of the run can slip
by between the answer and the first read; events before the receipt belong to earlier
prompts and are skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from dsh.core.errors import ProtocolError
from dsh.core.jsonrpc import Notification
from dsh.sdk._config import trace_carrier
from dsh.sdk._events import (
    Event,
    Prompt,
    RunResult,
    content_blocks,
    is_receipt,
    message_id,
    run_result,
    session_event,
    status_of,
)

if TYPE_CHECKING:
    from dsh.sdk._client import AsyncDshClient

_SESSION_METHODS = frozenset({"session.event", "session.status"})
_UNSET: Any = object()


class AsyncSession:
    """A session of an :class:`AsyncDshClient` (from ``new_session``/``resume_session``)."""

    def __init__(self, client: AsyncDshClient, session_id: str) -> None:
        self._client = client
        self._id = session_id

    @property
    def id(self) -> str:
        """The session id, as the runtime knows it (``resume_session`` takes it back)."""
        return self._id

    def __repr__(self) -> str:
        return f"<AsyncSession {self._id}>"

    async def run(self, prompt: Prompt, *,
                  trace_context: Mapping[str, str] | None = None) -> RunResult:
        """Send ``prompt`` (a string or content blocks) and wait for its run to end.

        ``trace_context`` is a W3C trace context carrier for this prompt's turn (see
        :class:`~dsh.sdk.ClientConfig`), sent as the request's ``_meta``.
        """
        events = [event async for event in self.stream(prompt, trace_context=trace_context)]
        return run_result(self._id, events)

    async def stream(self, prompt: Prompt, *,
                     trace_context: Mapping[str, str] | None = None) -> AsyncIterator[Event]:
        """Send ``prompt`` and yield this session's events as they arrive, from the
        prompt's inbox receipt until the session is idle again.

        Leaving the loop early stops listening, not the turn: use :meth:`cancel` for that.
        """
        blocks = content_blocks(prompt)
        params: dict[str, Any] = {"sessionId": self._id, "contentBlocks": blocks}
        if trace_context is not None:
            params["_meta"] = dict(trace_carrier(trace_context))
        with self._client.subscribe(self._mine) as subscription:
            answer = await self._client.request("session/prompt", params)
            queued = message_id(answer)
            received = False
            async for notification in subscription:
                if notification.method == "session.status":
                    if received and status_of(notification.params, self._id) == "idle":
                        return
                    continue
                event = session_event(notification.params)
                if event is None:
                    continue
                if not received:
                    received = is_receipt(event, queued)
                    if not received:
                        continue
                yield event

    def history(self, *, page_size: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Yield this session's stored events in seq order, page by page (see
        :meth:`AsyncDshClient.history`)."""
        return self._client.history(self._id, page_size=page_size)

    async def cancel(self) -> bool:
        """Cancel the running turn (``session/cancel``); ``True`` if one was cancelled.

        The run then ends normally, its ``stop_reason`` being ``cancelled``.
        """
        answer = await self._client.request("session/cancel", {"sessionId": self._id})
        return bool(answer.get("cancelled")) if isinstance(answer, dict) else False

    async def mode(self) -> str:
        """The session's mode (``session/mode/get``): ``default`` or ``plan``."""
        answer = await self._client.request("session/mode/get", {"sessionId": self._id})
        return str(answer["mode"])

    async def set_mode(self, mode: str) -> str:
        """Switch to ``plan`` (tools that change files are refused until the model's plan
        is approved) or back to ``default`` (``session/mode/set``); returns the mode."""
        answer = await self._client.request("session/mode/set",
                                            {"sessionId": self._id, "mode": mode})
        return str(answer["mode"])

    async def settings(self) -> dict[str, Any]:
        """What the session's next turn and tool calls use (``session/settings/get``):
        ``provider``, ``model``, ``reasoningEffort``, ``contextWindow``, ``policy`` (its
        own mode, None: the profile's ``policyDefault``), ``remembered`` approvals."""
        return await self._call("session/settings/get")

    async def set_model(self, *, provider: Any = _UNSET, model: Any = _UNSET,
                        reasoning_effort: Any = _UNSET) -> dict[str, Any]:
        """Switch the route, model or effort from the next turn on
        (``session/model/set``; None goes back to the default). Checked at once: an
        unknown route, model or effort is a :class:`JsonRpcError` naming what is accepted.
        Returns :meth:`settings`."""
        params = {wire: value for wire, value in (
            ("provider", provider), ("model", model), ("reasoningEffort", reasoning_effort))
            if value is not _UNSET}
        return await self._call("session/model/set", params)

    async def set_policy(self, mode: str | None) -> dict[str, Any]:
        """Switch the policy mode from the next tool call on (``session/policy/set``):
        ``workspace``, ``ask``, ``allow-all``, ``deny-mutating``, or None for the
        profile's own. Returns :meth:`settings`."""
        return await self._call("session/policy/set", {"mode": mode})

    async def forget_approvals(self) -> dict[str, Any]:
        """Forget the approvals remembered for this session; returns :meth:`settings`."""
        return await self._call("session/approvals/forget")

    async def changes(self) -> dict[str, Any]:
        """The files this session's tools wrote or edited (``session/changes``):
        ``{changes: [{path, tool, callId, turn, seq, diff?}], files: [paths]}``."""
        return await self._call("session/changes")

    async def usage(self) -> dict[str, Any]:
        """Tokens, cost and context in use so far (``session/usage``)."""
        return await self._call("session/usage")

    async def shell(self, command: str) -> dict[str, Any]:
        """Run ``command`` yourself with the session's shell tool and sandbox
        (``session/shell``); the model reads it with the next prompt.
        ``{output, isError}``; a running turn is a :class:`BusyError`."""
        return await self._call("session/shell", {"command": command})

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self._client.request(method, {"sessionId": self._id, **(params or {})})
        if not isinstance(answer, dict):
            raise ProtocolError(f"{method} answered {answer!r}, not an object")
        return answer

    def _mine(self, notification: Notification) -> bool:
        params = notification.params
        return (notification.method in _SESSION_METHODS and isinstance(params, dict)
                and params.get("sessionId") == self._id)
