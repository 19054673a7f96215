"""Running one tool call: find the tool, check its arguments, ask the guardrails, call it.

Every way a call can fail ends as a tool result the model reads (``isError: true``), never
as an exception out of the turn: an unknown tool, arguments that do not fit the schema, a
guardrail's deny, an approval refused, a tool that raised. The agent-side failures also
carry ``error: {name, code}`` in the ``tool/result`` data, as the original runtime does for
argument errors, so clients can tell "the tool said no" from "the agent did not run it".

The decision order is fixed. First the boundary (:mod:`dsh.runtime.tools.confine`): the
call's declared path arguments are judged against the session's workspace root; one in a
protected directory (the dsh home) refuses the call, whatever any guardrail or person
would say; ones outside the root and the granted roots become ``ToolCall.outside``. Then
the guardrail chain (first deny wins, any ask asks; an empty chain asks about an
``outside`` call rather than allow it); an ``ask`` goes to the approver the protocol
server installed, and with none installed the call is denied, because a guardrail that
wanted a human and found none must not be overruled by silence (the shipped policy decides
unattended calls itself, see :mod:`dsh.runtime.tools.policy`). A call that runs with ``outside``
paths runs with exactly those paths allowed (``ToolContext.boundary``), so an approval is
never followed by the tool refusing the path; an ``allow-always`` answer also grants their
directories to the session (``grant``).

An approver answers a decision string or an :class:`Approval`: "allow" or "deny", whether
to remember it for the session (``memory``, :mod:`.choices`: a later call of the same tool
is then not asked about; a remembered deny refuses it whatever the guardrails say), and a
denial's note, which the model reads in the call's result. A remembered allow never
answers a call reaching outside the root: "always" on such a call grants its directories.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple, Protocol

from dsh.runtime.kernel.guardrails import Decision, GuardrailChain, Verdict
from dsh.runtime.tools import confine
from dsh.runtime.tools.base import (
    ArgumentError,
    Tool,
    ToolCall,
    ToolContext,
    ToolResult,
    check_arguments,
    parse_arguments,
)

ALLOW, ALLOW_ALWAYS, DENY = "allow", "allow-always", "deny"
MAX_NOTE_CHARS = 4000
"""A denial's note is cut to this many characters (it is the user's word to the model)."""


class Approval(NamedTuple):
    """An approver's answer: ``decision`` (``allow`` or ``deny``), whether to
    ``remember`` it for the rest of the session, and a denial's ``note`` to the model."""

    decision: str
    remember: bool = False
    note: str = ""


Approver = Callable[[str, dict[str, Any]], Awaitable["str | Approval"]]
"""``approver(session_id, tool_call) -> "allow" | "allow-always" | "deny" | Approval``
(installed by a protocol server). ``allow-always`` is ``Approval("allow", remember=True)``."""
Grant = Callable[[list[str]], None]
"""``grant(directories)``: add granted roots to the running call's session."""


class Memory(Protocol):
    """The running call's session's remembered decisions (:class:`.choices.Memory`)."""

    def recall(self, tool: str) -> str | None:
        """The decision remembered for ``tool``, if any."""
        ...

    def remember(self, tool: str, decision: str) -> None:
        """Remember ``decision`` for ``tool``."""
        ...

logger = logging.getLogger("dsh.agent")


class Asked(NamedTuple):
    """How a call's approval went: when it was asked and answered (wall clock, ns) and
    the decision (``allow``, ``allow-always`` or ``deny``); the ``after_tool_call`` hook's
    ``approval`` (telemetry's approval span)."""

    started_ns: int
    ended_ns: int
    decision: str


class Answer(NamedTuple):
    """A call's result and, when the agent refused or failed it, the ``{name, code}`` why;
    ``approval`` when a person was asked."""

    result: ToolResult
    error: Mapping[str, str] | None = None
    approval: Asked | None = None


def _refused(text: str, name: str, code: str) -> Answer:
    return Answer(ToolResult(text, is_error=True), {"name": name, "code": code})


async def execute(
    block: Mapping[str, Any],
    *,
    tools: Mapping[str, Tool],
    guardrails: GuardrailChain,
    approver: Approver | None,
    context: ToolContext,
    grant: Grant | None = None,
    memory: Memory | None = None,
    policy: str | None = None,
) -> Answer:
    """Run the tool call ``block`` (a ``tool-call`` content block) to an :class:`Answer`;
    ``policy`` is the session's own policy mode, ``memory`` its remembered decisions.

    Cancellation propagates: it is the turn's, not the call's, to report.
    """
    name, call_id = block["name"], block["id"]
    tool = tools.get(name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        return _refused(f"Error: unknown tool '{name}' (available: {available})",
                        "UnknownToolError", "UNKNOWN_TOOL")
    try:
        args = check_arguments(tool, parse_arguments(block["arguments"]))
    except ArgumentError as exc:
        return _refused(f"Error: {exc}", "ToolArgsError", "INVALID_ARGS")
    boundary = confine.of(context)
    try:
        reached = confine.reach(boundary, context.cwd, tool, args)
    except confine.PathError as exc:
        return _refused(f"Error: {exc}", "ToolArgsError", "INVALID_ARGS")
    if reached.protected:
        value, holder = reached.protected[0]
        return _refused(f"Error: {confine.protected_error(value, holder)}",
                        "ToolDeniedError", "PROTECTED")
    call = ToolCall(context.session_id, call_id, name, args, context.cwd, tool,
                    can_ask=approver is not None, outside=reached.outside,
                    root=boundary.root, policy=policy)
    verdict = await guardrails.check(call)
    if verdict.decision is Decision.ALLOW and call.outside and not len(guardrails):
        verdict = Verdict(Decision.ASK, confine.outside_reason(name, call.outside,
                                                               boundary.root))
    if verdict.decision is Decision.DENY:
        return _refused(f"Error: denied by {verdict.reason}", "ToolDeniedError", "DENIED")
    remembered = memory.recall(name) if memory is not None else None
    if remembered == DENY:
        return _refused(f"Error: the user denied '{name}' for the rest of this session",
                        "ToolDeniedError", "DENIED")
    decision, approval = ALLOW, None
    if verdict.decision is Decision.ASK and not (remembered == ALLOW and not call.outside):
        asked = time.time_ns()
        decision, refusal = await _approve(call, block, verdict.reason, approver, memory)
        if approver is not None:
            approval = Asked(asked, time.time_ns(), decision)
        if refusal is not None:
            return refusal._replace(approval=approval)
    if call.outside:
        context = context._replace(boundary=boundary.allowing(call.outside))
        if decision == ALLOW_ALWAYS and grant is not None:
            grant(confine.grant_dirs(call.outside))
    try:
        result = await tool.call(args, context)
    except Exception as exc:
        logger.debug("tool %s raised", name, exc_info=True)
        return _refused(f"Error: tool '{name}' failed: {type(exc).__name__}: {exc}",
                        "ToolFailedError", "TOOL_FAILED")._replace(approval=approval)
    if not isinstance(result, ToolResult):
        return _refused(f"Error: tool '{name}' returned {type(result).__name__}, not a result",
                        "ToolFailedError", "TOOL_FAILED")._replace(approval=approval)
    return Answer(result, approval=approval)


async def _approve(call: ToolCall, block: Mapping[str, Any], reason: str,
                   approver: Approver | None,
                   memory: Memory | None) -> tuple[str, Answer | None]:
    """The approver's decision, and the refusal unless it allowed. A failing approver
    denies. The request carries ``outside`` when the call reaches beyond the root. An
    answer to remember is remembered (an allow of an ``outside`` call as a grant)."""
    if approver is None:
        return DENY, _refused(f"Error: needs approval ({reason}) and no client can approve",
                              "ToolDeniedError", "DENIED")
    request: dict[str, Any] = {"callId": call.call_id, "name": call.name,
                               "arguments": block["arguments"], "cwd": call.cwd,
                               "reason": reason}
    if call.outside:
        request["outside"] = list(call.outside)
    try:
        answer = approval(await approver(call.session_id, request))
    except Exception:
        logger.warning("approver failed for tool %s; denying", call.name, exc_info=True)
        answer = Approval(DENY)
    if answer.remember and memory is not None and (answer.decision == DENY
                                                   or not call.outside):
        memory.remember(call.name, answer.decision)
    if answer.decision == ALLOW:
        return (ALLOW_ALWAYS if answer.remember else ALLOW), None
    text = "Error: the client denied this tool call"
    note = answer.note.strip()[:MAX_NOTE_CHARS]
    if note:
        text += f". The user's note: {note}"
    return DENY, _refused(text, "ToolDeniedError", "DENIED")


def approval(answer: Any) -> Approval:
    """An approver's answer as an :class:`Approval`; anything unknown denies."""
    if isinstance(answer, Approval):
        return answer if answer.decision in (ALLOW, DENY) else Approval(DENY)
    if answer == ALLOW_ALWAYS:
        return Approval(ALLOW, remember=True)
    return Approval(ALLOW if answer == ALLOW else DENY)
