"""The tool contract: what every tool offers the agent, and what the agent offers a tool.

A tool is any object with ``name``, ``description``, ``parameters`` (the JSON schema the
model sees), ``mutating`` and ``async call(args, ctx)``. Tools are registered in a
plugin's ``apply`` with ``reg.tool(obj)``; the agent validates the model's arguments
against ``parameters`` before calling (:func:`check_arguments`), so ``call`` only ever sees
arguments of the declared shape. A tool reports its own failures as
``ToolResult(text, is_error=True)``; an exception escaping ``call`` is turned into one by
the agent, so no tool can crash a turn.

Optional: ``path_arguments``, the names of arguments that are filesystem paths (relative to
the session's working directory). The agent judges them against the session's boundary
(:mod:`dsh.runtime.tools.confine`) before any guardrail: a path in the dsh home refuses
the call, a path outside the workspace root makes it ask (:attr:`ToolCall.outside`), and
an approval reaches the tool as :attr:`ToolContext.boundary` allowing exactly those paths.
The workspace policy allows a mutating call unasked only when it declares them, so a
mutating tool that does not is asked about rather than trusted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from dsh.core.errors import ConfigError, InvalidArgumentError
from dsh.runtime.kernel.schema import validate

if TYPE_CHECKING:
    import asyncio

    from dsh.runtime.tools.clientside import ClientSide
    from dsh.runtime.tools.confine import Boundary

__all__ = ["ArgumentError", "Image", "Tool", "ToolCall", "ToolContext", "ToolResult",
           "check_arguments", "parse_arguments"]


class Image(NamedTuple):
    """An image a tool hands the model: ``data`` is base64, ``mime_type`` e.g. image/png."""

    mime_type: str
    data: str


class ToolResult(NamedTuple):
    """What a tool answers; ``text`` is what the model reads.

    ``images`` travel with the text as image content blocks; a tool only returns them when
    :attr:`ToolContext.images_supported` says the model can take them. ``diff`` is for
    clients, never the model: a file change (:func:`dsh.runtime.tools.filediff.file_diff`)
    the agent puts in the ``tool/result`` event's ``data.diff``. ``facts`` are what the
    call reports about how it ran (the sandbox rung that confined a command, the MCP server
    that answered), for the ``after_tool_call`` hook and telemetry; the model never sees
    them either. Keys are dotted names (``sandbox.rung``), values strings or numbers.
    """

    text: str
    is_error: bool = False
    images: tuple[Image, ...] = ()
    diff: Mapping[str, Any] | None = None
    facts: Mapping[str, Any] = MappingProxyType({})


def _emit_nowhere(type: str, data: Mapping[str, Any]) -> None:
    """The ``emit`` of a context with no session behind it (unit tests of a tool)."""


def _no_history() -> list[dict[str, Any]]:
    return []


def _keep_nothing() -> Callable[[], None]:
    """The ``keep`` of a context with no session behind it: nothing to hold."""
    return lambda: None


class ToolContext(NamedTuple):
    """A running call's view of its session.

    ``cancelled`` is set when the client cancels the turn; the call's task is cancelled
    too, so only tools that hand work to threads or processes need to watch it.
    ``emit(type, data)`` logs a session event (``plan/update``, ...) that clients receive
    like the agent's own; ``history()`` is a deep copy of the conversation so far (what a
    forked sub-agent starts from); ``images_supported`` says whether the turn's model
    route accepts image content, so a tool can refuse clearly instead of sending bytes the
    provider would reject. ``boundary`` is what the call may reach: the session's fixed
    workspace root, its granted roots, the protected directories, and the paths this call
    was approved for; a file tool opens paths only through it
    (:func:`dsh.runtime.tools.confine.of` gives a context without one a boundary rooted at
    its cwd). ``keep()`` holds the session in this runtime (its lease kept, so no other
    runtime continues it meanwhile) while work the call started lives on after it (a
    background job, a sub-agent); call the function it returns when that work ends.
    ``call_id`` is the running call's id; ``client`` what the session's client
    offers to do for the tools (its files, its terminal: :mod:`dsh.runtime.tools.clientside`),
    None when it offers nothing.
    """

    session_id: str
    env: Mapping[str, str]
    cancelled: asyncio.Event
    get_cwd: Callable[[], str]
    change_cwd: Callable[[str], str]
    emit: Callable[[str, Mapping[str, Any]], object] = _emit_nowhere
    history: Callable[[], list[dict[str, Any]]] = _no_history
    images_supported: bool = False
    boundary: Boundary | None = None
    keep: Callable[[], Callable[[], None]] = _keep_nothing
    call_id: str = ""
    client: ClientSide | None = None

    @property
    def cwd(self) -> str:
        """The session's current working directory (absolute)."""
        return self.get_cwd()

    def set_cwd(self, path: str) -> str:
        """Move the session to ``path`` (relative to the current directory).

        Returns the new absolute directory; raises NotADirectoryError when there is none.
        """
        return self.change_cwd(path)


class Tool(Protocol):
    """What ``reg.tool`` accepts."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    mutating: bool

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Do the work; report failures as ``ToolResult(..., is_error=True)``."""
        ...


class ToolCall(NamedTuple):
    """One call as guardrails and approvers see it, before it runs.

    ``can_ask`` says whether someone can be asked: a guardrail that would answer ``ask``
    with nobody to ask decides itself instead (the profile's policy), so a client that
    never answers approvals is never left hanging. ``outside`` are the real paths the
    call's path arguments reach outside the workspace root and the granted roots: the
    call runs only if it is approved (or a guardrail allows it), and then reaches exactly
    those. ``root`` is the workspace root (real path) they were judged against.
    ``policy`` is the policy mode a client chose for the session (``session/policy/set``),
    None when the policy row's own mode applies.
    """

    session_id: str
    call_id: str
    name: str
    arguments: Mapping[str, Any]
    cwd: str
    tool: Tool
    can_ask: bool
    outside: tuple[str, ...] = ()
    root: str = ""
    policy: str | None = None


class ArgumentError(InvalidArgumentError):
    """The model's arguments do not fit the tool; the message is written for the model."""


def parse_arguments(text: str) -> Any:
    """Decode the JSON argument text of a tool call (empty text means no arguments)."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ArgumentError(f"invalid arguments: not valid JSON ({exc})") from None


def check_arguments(tool: Tool, args: Any) -> dict[str, Any]:
    """``args`` checked against ``tool.parameters``, with declared defaults filled in.

    Uses the kernel's schema subset: keywords it does not know (``pattern``, ``oneOf``)
    are not checked here, and the tool remains responsible for them.
    """
    if not isinstance(args, Mapping):
        raise ArgumentError("invalid arguments: expected a JSON object")
    prefix = f"row '{tool.name}' config"
    try:
        return validate(tool.parameters, args, row_id=tool.name)
    except ConfigError as exc:
        # The kernel words its errors for row config; say "arguments" to the model.
        detail = exc.message.removeprefix(prefix).lstrip(".: ")
        raise ArgumentError(f"invalid arguments: {detail}") from None
