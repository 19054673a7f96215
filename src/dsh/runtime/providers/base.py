"""The provider contract: one request type in, a stream of small chunk types out.

Every provider row publishes service ``llm:<route>``; the agent finds it by that name and
calls ``stream(request)``. Providers translate between their wire format and the shapes
here, so the agent loop never learns a vendor's JSON, and a test provider
(:mod:`.scripted`) exercises exactly the code a real one does.

Messages use the same shape the agent emits in its events, so history is stored once and
shown, persisted and sent without conversion::

    {"role": "system" | "user" | "assistant" | "tool", "content": [block, ...], "id": ...}
    block: {"type": "text", "text": str}
         | {"type": "reasoning", "text": str, "signature"?: str, "redacted"?: str,
            "field"?: str}
         | {"type": "tool-call", "id": str, "name": str, "arguments": "<JSON text>"}
    a tool message also has "toolCallId" and "isError".

A ``reasoning`` block is the model's thinking (DeepSeek's ``reasoning_content``, an
Anthropic ``thinking`` block, a Responses API reasoning item), kept apart from the
answer's ``text`` so that nothing that reads the answer ever shows it. ``signature``,
``redacted`` and ``field`` are what the wire format that produced the block needs to send
it back the way it came, opaque to everything else and sent back unchanged, only to the
route that produced them: the Anthropic format's thinking signature and the encrypted
payload of a ``redacted_thinking`` block; a Responses reasoning item's id (``signature``),
its ``encrypted_content`` (``redacted``) and whether its text came as ``summary`` or
``content`` (``field``); for chat completions the response field the reasoning came in
(``field``: ``reasoning_content``, ``reasoning``, ``reasoning_details``) and, for
OpenRouter's ``reasoning_details``, the details themselves as JSON text (``redacted``).

A stream yields, in any interleaving, :class:`TextDelta`, :class:`ReasoningDelta`,
:class:`ToolCallDelta` (fragments joined by ``index``), at most one :class:`Usage`, and
ends with one :class:`Finish`. Failures are raised as :class:`ModelError`, whose ``code``
reaches the client in ``turn/end.data.reason.error.code``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, NamedTuple, Protocol

from dsh.core.errors import DshError

FinishReason = Literal["stop", "length", "tool-calls"]

EFFORTS = ("none", "off", "minimal", "low", "medium", "high", "xhigh", "max", "ultra")
"""Every reasoning effort a client may ask for. ``none`` and the original runtime's ``off``
turn thinking off; the others are the levels DeepSeek's thinking-mode guide maps (OpenAI's
``minimal`` … ``xhigh`` and DeepSeek's ``max``/``ultra``). Which of them a route can send is
the route's to say (:meth:`Provider.effort_refusal`)."""
OFF_EFFORTS = frozenset({"none", "off"})


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
    route: str = ""
    """The route the agent asked (``source.provider`` of the messages this route wrote, so
    route-bound reasoning such as signed thinking goes back only where it came from)."""


class TextDelta(NamedTuple):
    """A fragment of the assistant's visible text."""

    text: str


class ReasoningDelta(NamedTuple):
    """A fragment of reasoning block number ``index`` (0-based within one response).

    ``text`` fragments are joined in order; ``signature``, ``redacted`` and ``field`` (what
    the wire format needs to send the block back, see the module docstring) arrive whole
    and are kept with the block, the last one given winning.
    """

    text: str = ""
    index: int = 0
    signature: str | None = None
    redacted: str | None = None
    field: str | None = None


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
    """Token counts for one response, and what they cost when the route has prices.

    ``input_tokens`` counts the whole prompt, cached or not; ``cache_hit_tokens`` is the
    part served from the provider's prompt cache (DeepSeek's ``prompt_cache_hit_tokens``,
    Anthropic's ``cache_read_input_tokens``) and ``cache_write_tokens`` the part written to
    it (Anthropic's ``cache_creation_input_tokens``); None where the server does not say.
    ``reasoning_tokens`` are the output tokens spent thinking. ``estimated`` is True when
    the server sent no usage and the counts were estimated from the text (about four
    characters a token).
    """

    input_tokens: int
    output_tokens: int
    cache_hit_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    estimated: bool = False

    @property
    def cache_miss_tokens(self) -> int | None:
        """Prompt tokens that were neither read from nor written to the cache."""
        if self.cache_hit_tokens is None:
            return None
        return max(0, self.input_tokens - self.cache_hit_tokens - (self.cache_write_tokens or 0))

    @property
    def total_tokens(self) -> int:
        """Input plus output, as clients display it."""
        return self.input_tokens + self.output_tokens


class Finish(NamedTuple):
    """Why the model stopped: ``stop``, ``length`` (token limit) or ``tool-calls``."""

    reason: FinishReason


Chunk = TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish


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

    # Optional (looked up with getattr, so older providers keep working):
    #   model_refusal(model) -> str | None: why ``model`` cannot be used (a retired id),
    #       checked when a client chooses it; None when it can.
    #   effort_refusal(effort, model) -> str | None: why this route cannot send
    #       ``effort`` to ``model`` (the route's wire form, or the model's own efforts).
    #   supports_images_for(model) -> bool: image input for that model (else the
    #       ``supports_images`` attribute).
    #   context_window_for(model) -> int: that model's window (else ``context_window``).

    def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """Answer ``request`` as a stream of chunks ending with :class:`Finish`."""
        ...
