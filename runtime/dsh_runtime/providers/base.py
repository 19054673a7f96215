"""The provider contract: one request type in, a stream of small chunk types out.

Every provider row publishes service ``llm:<route>``; the agent finds it by that name and
calls ``stream(request)``. Providers translate between their wire format and the shapes
here, so the agent loop never learns a vendor's JSON, and a test provider
(:mod:`.scripted`) exercises exactly the code a real one does.

Messages use the same shape the agent emits in its events, so history is stored once and
shown, persisted and sent without conversion::

    {"role": "system" | "user" | "assistant" | "tool", "content": [block, ...], "id": ...}
    block: {"type": "text", "text": str}
         | {"type": "tool-call", "id": str, "name": str, "arguments": "<JSON text>"}
    a tool message also has "toolCallId" and "isError".

A stream yields, in any interleaving, :class:`TextDelta`, :class:`ToolCallDelta` (fragments
joined by ``index``), at most one :class:`Usage`, and ends with one :class:`Finish`. Failures
are raised as :class:`ModelError`, whose ``code`` reaches the client in
``turn/end.data.reason.error.code``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, NamedTuple, Protocol

from dsh.errors import DshError

FinishReason = Literal["stop", "length", "tool-calls"]


class ToolSpec(NamedTuple):
    """What the model is told about one tool: its name, purpose and JSON-schema arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


class ModelRequest(NamedTuple):
    """One model call: the whole conversation so far plus the tools on offer.

    ``session_id`` lets stateful test providers keep per-session positions; real providers
    may ignore it. ``messages`` starts with the system message.
    """

    session_id: str
    model: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    reasoning_effort: str | None = None


class TextDelta(NamedTuple):
    """A fragment of the assistant's visible text."""

    text: str


class ToolCallDelta(NamedTuple):
    """A fragment of tool call number ``index`` (0-based within one response).

    ``id`` and ``name`` arrive once (usually first); ``arguments`` fragments are
    concatenated in arrival order into the call's JSON argument text.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class Usage(NamedTuple):
    """Token counts for one response."""

    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        """Input plus output, as clients display it."""
        return self.input_tokens + self.output_tokens


class Finish(NamedTuple):
    """Why the model stopped: ``stop``, ``length`` (token limit) or ``tool-calls``."""

    reason: FinishReason


Chunk = TextDelta | ToolCallDelta | Usage | Finish


class ModelError(DshError):
    """The model call failed; ``code`` is a short stable token clients can branch on."""

    def __init__(self, message: str, *, code: str = "model-error", retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class Provider(Protocol):
    """What a published ``llm:<route>`` service offers the agent."""

    default_model: str
    context_window: int

    def accepts_model(self, model: str) -> bool:
        """Whether ``model`` names a model this route can serve."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """Answer ``request`` as a stream of chunks ending with :class:`Finish`."""
        ...
