"""The policy guardrail (``guardrail-policy``): which tool calls run without asking.

Modes (row config ``mode``):

``workspace`` (default)
    Non-mutating tools run. A mutating tool runs when every path argument it declares
    (``path_arguments``) resolves inside the session's working directory; otherwise, or
    when it declares none, the call is asked about. This is the original runtime's
    behaviour: work confined to the working directory needs no approval.
``allow-all``
    Everything runs.
``ask``
    Every mutating call is asked about.
``deny-mutating``
    Mutating calls are refused; the rest run.

An ``ask`` needs someone to answer. When the protocol server installed no approver
(``call.can_ask`` is false), the policy answers itself with ``unattended`` (``deny`` by
default), so a client that never answers approvals is never left waiting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dsh._version import __version__

from dsh_runtime.guardrails import Decision
from dsh_runtime.plugin import Capability, Manifest, Plugin, Registrar
from dsh_runtime.tools.base import ToolCall

MODES = ("workspace", "allow-all", "ask", "deny-mutating")


def decide(mode: str, call: ToolCall) -> tuple[Decision, str]:
    """The mode's answer about ``call``, before the unattended rule."""
    if mode == "allow-all" or not call.tool.mutating:
        return Decision.ALLOW, ""
    if mode == "deny-mutating":
        return Decision.DENY, f"'{call.name}' changes files and the policy denies that"
    if mode == "ask":
        return Decision.ASK, f"'{call.name}' changes files"
    paths = getattr(call.tool, "path_arguments", None)
    if paths is None:
        return Decision.ASK, f"'{call.name}' changes files and declares no path arguments"
    for name in paths:
        value = call.arguments.get(name)
        if isinstance(value, str) and not _inside(call.cwd, value):
            return Decision.ASK, f"'{call.name}' {name} is outside the working directory"
    return Decision.ALLOW, ""


def _inside(cwd: str, path: str) -> bool:
    """Whether ``path`` (relative to ``cwd``) stays under ``cwd``, symlinks resolved.

    A leading ``~`` is expanded as the file tools expand it (``confine.resolve``): judged
    literally, ``~/../x`` looked inside while the tool went to the home's parent. For a
    tool that does not expand it (``bash``'s ``workdir``) this only asks more often.
    """
    root = os.path.realpath(cwd)
    target = os.path.realpath(os.path.join(cwd, os.path.expanduser(path) if path.startswith("~")
                                           else path))
    try:
        return os.path.commonpath([root, target]) == root
    except ValueError:  # different drives (Windows)
        return False


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
        decision, reason = decide(self.config["mode"], call)
        if decision is Decision.ASK and not call.can_ask:
            unattended = Decision(self.config["unattended"])
            return unattended, (f"{reason}; no client can approve, so the policy says "
                                f"{unattended.value}")
        return decision, reason
