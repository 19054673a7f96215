"""The ``subagent`` tool with real processes: a parent ``dsh --profile sdk`` (driven by the
SDK client) whose scripted model calls the tool, and a child runtime with its own script.

The child's script runs ``env`` through its bash tool into a file in the shared working
directory, so the test reads what the child process really had. Waits are bounded only
to turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.sdk import AsyncDshClient, ClientConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

GUARD = 60.0

PARENT_SCRIPT = """\
- text: "delegating"
  tool_calls: [{name: subagent,
                arguments: {description: "env report", prompt: "report the environment"}}]
- text: "parent done"
"""
CHILD_SCRIPT = """\
- tool_calls: [{name: bash, arguments: {command: "env > child-env.txt"}}]
- text: "child answer 42"
"""
SLOW_CHILD_SCRIPT = """\
- {text: "thinking for a long time", delay_ms: 60000}
"""
CHILD_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
- {id: policy, config: {mode: allow-all}}
- {id: "tools:shell", merge: {config: {env: {set: {KEY_THE_RUNTIME_GOT: !env DEEPSEEK_API_KEY}}}}}
"""
PARENT_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
- id: tools:subagent
  disabled: false
  config: {patches: [%s], pass_env: [DEEPSEEK_API_KEY]}
"""


def setup(tmp_path: Path, child_script: str) -> Path:
    """Scripts and patches for parent and child; returns the parent's patch."""
    (tmp_path / "parent.yml").write_text(PARENT_SCRIPT)
    (tmp_path / "child.yml").write_text(child_script)
    (tmp_path / "child-patch.yml").write_text(CHILD_PATCH)
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(PARENT_PATCH % (tmp_path / "child-patch.yml"))
    return patch


def parent_config(home: Path, patch: Path, env: dict[str, str]) -> ClientConfig:
    return ClientConfig(profile="sdk", dsh_home=home, cwd=Path.cwd(), patches=[patch],
                        env=env, initialize_timeout=GUARD, request_timeout=GUARD)


def ends(note: Any) -> bool:
    """The start and end notifications of sub-agents (not their status changes)."""
    return note.method in ("subagent.started", "subagent.finished")


def child_homes(home: Path, parent: str) -> list[Path]:
    return sorted((home / "workspaces" / parent / "subagents").glob("*/home"))


def owner_pid(home: Path, session_id: str) -> int:
    """The pid of the runtime holding ``session_id`` in ``home``'s sessions database."""
    with sqlite3.connect(home / "sessions.db") as conn:
        row = conn.execute("SELECT owner_pid FROM sessions WHERE id = ?",
                           (session_id,)).fetchone()
    conn.close()
    assert row is not None and row[0] is not None, row
    return int(row[0])


def test_parent_runs_a_child_in_an_isolated_home_with_a_scrubbed_env(
        tmp_path: Path, dsh_home: Path) -> None:
    patch = setup(tmp_path, CHILD_SCRIPT)
    (dsh_home / "parent-canary.txt").write_text("only the parent's")
    (dsh_home / ".env").write_text("PARENT_HOME_ONLY=from-parent-home\n")
    env = {"SECRET_TOKEN": "canary-secret", "DEEPSEEK_API_KEY": "sk-passed-on-purpose",
           "VISIBLE_SETTING": "yes", "DSH_LOG_LEVEL": "debug"}

    async def scenario() -> tuple[Any, list[Any], list[Path], list[str]]:
        async with AsyncDshClient(parent_config(dsh_home, patch, env)) as client:
            with client.subscribe(ends) as sub:
                session = await client.new_session()
                result = await asyncio.wait_for(session.run("go"), GUARD)
                notes = [await asyncio.wait_for(sub.__anext__(), GUARD) for _ in range(2)]
            homes = child_homes(dsh_home, session.id)
            # Inspected while the parent runs: the workspace lives as long as it holds it.
            files = sorted(str(p.relative_to(homes[0])) for p in homes[0].rglob("*"))
            with sqlite3.connect(homes[0] / "sessions.db") as conn:
                ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
            conn.close()
            return result, notes, homes, files + ["ids:" + i for i in ids]

    result, notes, homes, listing = asyncio.run(scenario())
    assert result.stop_reason == "completed"
    assert result.final_text == "parent done"
    answers = [e.data["message"]["content"][0]["text"] for e in result.events
               if e.type == "tool/result"]
    assert answers == ["child answer 42"]
    started, finished = notes
    assert started.method == "subagent.started"
    assert finished.method == "subagent.finished"
    child = started.params["childSessionId"]
    assert started.params == {"parentSessionId": result.session_id, "childSessionId": child,
                              "agentId": started.params["agentId"]}
    assert started.params["agentId"].startswith("agent-")
    assert finished.params == {**started.params, "status": "completed"}

    assert len(homes) == 1 and homes[0].is_absolute()
    assert homes[0].is_relative_to(dsh_home / "workspaces" / result.session_id)
    assert f"ids:{child}" in listing  # the child's own sessions.db knows the child session
    assert "parent-canary.txt" not in listing and ".env" not in listing

    seen = dict(line.split("=", 1) for line in
                Path("child-env.txt").read_text().splitlines() if "=" in line)
    assert "SECRET_TOKEN" not in seen
    assert "PARENT_HOME_ONLY" not in seen
    assert not [k for k in seen if k.startswith("DSH_") and k != "DSH_HOME"]
    # pass_env reaches the child runtime (its shell gets it only as its policy sets it);
    # the child's shell, like any shell, leaves the secret out by default.
    assert "DEEPSEEK_API_KEY" not in seen
    assert seen.get("KEY_THE_RUNTIME_GOT") == "sk-passed-on-purpose"
    assert seen.get("VISIBLE_SETTING") == "yes"


def test_cancelling_the_parent_turn_kills_the_child(tmp_path: Path, dsh_home: Path) -> None:
    patch = setup(tmp_path, SLOW_CHILD_SCRIPT)

    async def scenario() -> tuple[int, list[Any], list[str]]:
        async with AsyncDshClient(parent_config(dsh_home, patch, {})) as client:
            with client.subscribe(ends) as sub:
                session = await client.new_session()
                run = asyncio.ensure_future(session.run("go"))
                started = await asyncio.wait_for(sub.__anext__(), GUARD)
                child = started.params["childSessionId"]
                pid = owner_pid(child_homes(dsh_home, session.id)[0], child)
                os.kill(pid, 0)  # alive while the parent's turn runs
                assert await session.cancel() is True
                finished = await asyncio.wait_for(sub.__anext__(), GUARD)
                result = await asyncio.wait_for(run, GUARD)
            return pid, [started, finished], [result.stop_reason, finished.params["status"]]

    pid, notes, reasons = asyncio.run(scenario())
    assert [n.method for n in notes] == ["subagent.started", "subagent.finished"]
    assert reasons == ["cancelled", "cancelled"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # closed and reaped before subagent.finished was sent


def test_a_child_that_cannot_start_is_a_tool_error(tmp_path: Path, dsh_home: Path) -> None:
    patch = setup(tmp_path, CHILD_SCRIPT)
    (tmp_path / "child-patch.yml").write_text("- insert: [{id: broken, name: no-such-plugin}]\n")

    async def scenario() -> Any:
        async with AsyncDshClient(parent_config(dsh_home, patch, {})) as client:
            session = await client.new_session()
            return await asyncio.wait_for(session.run("go"), GUARD)

    result = asyncio.run(scenario())
    results = [e.data for e in result.events if e.type == "tool/result"]
    assert results[0]["message"]["isError"] is True
    assert "did not start" in results[0]["message"]["content"][0]["text"]
    assert result.final_text == "parent done"


def test_a_child_route_from_env_is_named_not_quoted(tmp_path: Path, dsh_home: Path) -> None:
    """The tool row's ``provider`` read with ``!env`` (here naming no route, a value that
    may be a secret): the child refuses it, and the parent's tool error, session log and
    log name the variable instead of quoting the child's message."""
    patch = setup(tmp_path, CHILD_SCRIPT)
    with patch.open("a") as f:
        f.write("- {id: 'tools:subagent', merge: {config: {provider: !env CHILD_ROUTE}}}\n")
    value = f"canary-route-{os.urandom(8).hex()}"
    env = {"CHILD_ROUTE": value, "DSH_LOG_LEVEL": "debug"}
    stderr: list[str] = []
    config = dataclasses.replace(parent_config(dsh_home, patch, env), stderr=stderr.append)

    async def scenario() -> tuple[Any, list[Any]]:
        async with AsyncDshClient(config) as client:
            session = await client.new_session()
            result = await asyncio.wait_for(session.run("go"), GUARD)
            history = [e async for e in client.history(session.id)]
            return result, history

    result, history = asyncio.run(scenario())
    text = next(e.data for e in result.events if e.type == "tool/result")[
        "message"]["content"][0]["text"]
    assert "did not start" in text and "<!env CHILD_ROUTE>" in text, text
    assert value not in text
    assert value not in repr(history)
    assert value not in "\n".join(stderr)
    with sqlite3.connect(dsh_home / "sessions.db") as conn:
        stored = [r[0] for r in conn.execute("SELECT body FROM events")]
    conn.close()
    assert stored and not [row for row in stored if value in str(row)]
