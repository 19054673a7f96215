"""The policy guardrail's decisions, mode by mode."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from agentkit import NoteTool, Untyped

from dsh.runtime.kernel.guardrails import Decision
from dsh.runtime.tools import confine
from dsh.runtime.tools.base import ToolCall
from dsh.runtime.tools.confine import Boundary
from dsh.runtime.tools.policy import PolicyGuardrail, decide
from dsh.runtime.tools.working_directory import WorkingDirectory


def call(tool: Any, can_ask: bool = False, **arguments: Any) -> ToolCall:
    """The call as the agent builds it: path arguments judged against the root (the cwd)."""
    boundary = Boundary.at(os.getcwd())
    reached = confine.reach(boundary, os.getcwd(), tool, arguments)
    return ToolCall("s", "c1", tool.name, arguments, os.getcwd(), tool, can_ask,
                    outside=reached.outside, root=boundary.root)


@pytest.mark.parametrize(("mode", "tool", "args", "expected"), [
    ("workspace", WorkingDirectory(), {"cd": "/"}, Decision.ASK),
    ("workspace", WorkingDirectory(), {"cd": "."}, Decision.ALLOW),
    ("allow-all", WorkingDirectory(), {"cd": "/"}, Decision.ASK),
    ("allow-all", NoteTool(), {"path": "../b.txt"}, Decision.ASK),
    ("allow-all", NoteTool(), {"path": "b.txt"}, Decision.ALLOW),
    ("deny-mutating", NoteTool(), {"path": "../b.txt"}, Decision.DENY),
    ("workspace", NoteTool(), {"path": "a/b.txt"}, Decision.ALLOW),
    ("workspace", NoteTool(), {"path": "../b.txt"}, Decision.ASK),
    ("workspace", NoteTool(), {"path": "/etc/passwd"}, Decision.ASK),
    ("workspace", Untyped(), {}, Decision.ASK),
    ("allow-all", Untyped(), {}, Decision.ALLOW),
    ("ask", Untyped(), {}, Decision.ASK),
    ("ask", WorkingDirectory(), {}, Decision.ALLOW),
    ("deny-mutating", NoteTool(), {"path": "a"}, Decision.DENY),
    ("deny-mutating", WorkingDirectory(), {}, Decision.ALLOW),
])
def test_decide(mode: str, tool: Any, args: dict, expected: Decision) -> None:
    assert decide(mode, call(tool, **args))[0] is expected


def test_a_symlink_out_of_the_workspace_is_outside() -> None:
    Path("out").symlink_to(Path.cwd().parent)
    decision, reason = decide("workspace", call(NoteTool(), path="out/x.txt"))
    assert decision is Decision.ASK
    # The path reached, then the root it lies outside of: each named as what it is (the
    # message used to put the path where the root belongs, "outside the root (PATH)").
    assert reason == (f"'write_note' reaches {Path.cwd().parent.resolve() / 'x.txt'}, "
                      f"outside the workspace root {Path.cwd().resolve()}")


def test_unattended_asks_follow_the_config() -> None:
    strict = PolicyGuardrail("policy", {"mode": "ask", "unattended": "deny"})
    lenient = PolicyGuardrail("policy", {"mode": "ask", "unattended": "allow"})
    assert strict.check(call(Untyped()))[0] is Decision.DENY
    assert lenient.check(call(Untyped()))[0] is Decision.ALLOW
    assert strict.check(call(Untyped(), can_ask=True))[0] is Decision.ASK
