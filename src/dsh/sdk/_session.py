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

    def _mine(self, notification: Notification) -> bool:
        params = notification.params
        return (notification.method in _SESSION_METHODS and isinstance(params, dict)
                and params.get("sessionId") == self._id)
