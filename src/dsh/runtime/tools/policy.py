"""The policy guardrail (``guardrail-policy``): which tool calls run without asking.

Every mode asks about a call that reaches outside the session's workspace root and its
granted roots (``call.outside``, judged by the agent from the call's path arguments,
see :mod:`dsh.runtime.tools.confine`): the root is the boundary of every mode, and only a
person (or ``unattended: allow``) can let a call past it. Paths in the dsh home never get
here: the agent refuses those calls itself. Within the root, modes (row config ``mode``):

``workspace`` (default)
    Non-mutating tools run. A mutating tool runs when it declares its path arguments
    (``path_arguments``), all of them inside the root; one that declares none is asked
    about. This is the original runtime's behaviour: work confined to the workspace needs
    no approval.
``allow-all``
    Everything inside the root runs.
``ask``
    Every mutating call is asked about.
``deny-mutating``
    Mutating calls are refused; the rest run.

A client may choose another mode for one session (``session/policy/set``, the chat's
``/approval``): it reaches the guardrail as ``call.policy`` and wins over the row's mode.

An ``ask`` needs someone to answer. When the protocol server installed no approver
(``call.can_ask`` is false), the policy answers itself with ``unattended`` (``deny`` by
default), so a client that never answers approvals is never left waiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.runtime.kernel.guardrails import Decision
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.tools import confine
from dsh.runtime.tools.base import ToolCall

MODES = ("workspace", "allow-all", "ask", "deny-mutating")


def decide(mode: str, call: ToolCall) -> tuple[Decision, str]:
    """The mode's answer about ``call``, before the unattended rule."""
    if mode == "deny-mutating" and call.tool.mutating:
        return Decision.DENY, f"'{call.name}' changes files and the policy denies that"
    if call.outside:
        return Decision.ASK, confine.outside_reason(call.name, call.outside, call.root)
    if mode == "allow-all" or not call.tool.mutating:
        return Decision.ALLOW, ""
    if mode == "ask":
        return Decision.ASK, f"'{call.name}' changes files"
    if getattr(call.tool, "path_arguments", None) is None:
        return Decision.ASK, f"'{call.name}' changes files and declares no path arguments"
    return Decision.ALLOW, ""


class PolicyGuardrail(Plugin):
    """Registers guardrail ``policy``; config ``mode`` and ``unattended``."""

    manifest = Manifest(
        id="guardrail-policy",
        version=__version__,
        capabilities=frozenset({Capability.GUARDRAIL}),
        description="Decides which tool calls run, ask, or are refused.",
        config_schema={
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": list(MODES), "default": "workspace"},
                "unattended": {
                    "type": "string", "enum": ["deny", "allow"], "default": "deny",
                    "description": "The answer to an 'ask' when no client can approve.",
                },
            },
            "additionalProperties": False,
        },
    )

    def apply(self, reg: Registrar) -> None:
        """Register the guardrail (it reads the row's current config on every call)."""
        reg.guardrail("policy", self.check)

    async def update(self, config: Mapping[str, Any]) -> bool:
        """A new mode applies to the next call."""
        self.config = config
        return True

    def check(self, call: ToolCall) -> tuple[Decision, str]:
        """The guardrail: the mode's decision, with ``ask`` resolved when nobody can answer."""
        decision, reason = decide(call.policy or self.config["mode"], call)
        if decision is Decision.ASK and not call.can_ask:
            unattended = Decision(self.config["unattended"])
            return unattended, (f"{reason}; no client can approve, so the policy says "
                                f"{unattended.value}")
        return decision, reason
