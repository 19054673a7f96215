"""A sub-agent shares its parent's workspace root and its parent's protections.

Real processes: a parent ``dsh --profile sdk`` (home inside its workspace) starts a
``subagent`` in ``sub``; the child runs the stock ``sdk-minimal`` tree with only a scripted
model patched in. The child may write anywhere in the parent's root (``../`` from its own
directory), but nothing outside it (asked, and nobody answers the child's approvals), and
neither the parent's dsh home nor its own (which lies inside the parent's) is reachable.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from dsh.sdk import AsyncDshClient, ClientConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")

GUARD = 60.0


def test_the_child_works_in_the_parents_root(tmp_path: Path) -> None:
    work = tmp_path / "work"
    home = work / "dsh-home"
    (work / "sub").mkdir(parents=True)
    home.mkdir(mode=0o700)
    (home / ".env").write_text("PARENT_ONLY=1\n")
    child_calls = [
        {"name": "write_file", "arguments": {"path": "../from-child.txt", "content": "ok"}},
        {"name": "write_file", "arguments": {"path": str(tmp_path / "outside.txt"),
                                             "content": "escaped"}},
        {"name": "write_file", "arguments": {"path": "../dsh-home/patch.yml",
                                             "content": "[]"}},
        {"name": "write_file", "arguments": {"path": "../dsh-home/workspaces/x.txt",
                                             "content": "into the child's home's parent"}},
    ]
    child_script = [*({"text": "", "tool_calls": [c]} for c in child_calls),
                    {"text": "child done"}]
    parent_script = [{"text": "", "tool_calls": [{"name": "subagent", "arguments": {
        "description": "writer", "prompt": "write", "cwd": "sub"}}]}, {"text": "parent done"}]
    (tmp_path / "parent.json").write_text(json.dumps(parent_script))
    (tmp_path / "child.json").write_text(json.dumps(child_script))
    (tmp_path / "child-patch.yml").write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.json}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n")
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.json}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n"
        "- id: tools:subagent\n"
        "  disabled: false\n"
        f"  merge: {{config: {{patches: [{json.dumps(str(tmp_path / 'child-patch.yml'))}]}}}}\n")
    config = ClientConfig(profile="sdk", dsh_home=home, cwd=work, patches=[patch],
                          initialize_timeout=GUARD, request_timeout=GUARD)

    async def scenario() -> str:
        async with AsyncDshClient(config) as client:
            session = await client.new_session()
            result = await asyncio.wait_for(session.run("go"), GUARD)
        assert result.stop_reason == "completed", result
        return next(e.data["message"]["content"][0]["text"] for e in result.events
                    if e.type == "tool/result")

    assert asyncio.run(scenario()) == "child done"
    assert (work / "from-child.txt").read_text() == "ok"  # the parent's root is the child's
    assert not (tmp_path / "outside.txt").exists()
    assert not (home / "patch.yml").exists()
    assert not (home / "workspaces" / "x.txt").exists()
