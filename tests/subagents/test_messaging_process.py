"""Sub-agent messaging with real processes: a parent ``dsh --profile sdk`` (driven by the
SDK client, scripted model) starts scripted children and reaches them with
``send_message``, ``interrupt_agent``, ``list_agents`` and ``subagent_fork``.

Ordering never rests on timing: a child that must still be busy runs a bash loop that
waits for a file the test creates (or never creates). What the tests check is what really
happened: files the children wrote, the children's own session logs (their
``sessions.db``, read while the parent holds the workspace), process ids, and the
notifications the parent sent. Waits are bounded only to turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.core.errors import JsonRpcError
from dsh.sdk import AsyncDshClient, ClientConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

GUARD = 60.0
WAIT_FOR_GO = "echo $$ > loop.pid; while [ ! -f go ]; do sleep 0.05; done"
WAIT_FOR_PID = "for _ in $(seq 200); do [ -s %s ] && break; sleep 0.05; done"
# The child's shell is unsandboxed here (the row's patches override the sandbox the parent
# hands down): these tests check host pids the child's bash reports with ``$$``.
CHILD_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.jsonl}}
- {id: agent, merge: {config: {default_route: scripted}}}
- {id: policy, config: {mode: allow-all}}
- {id: tools:shell, merge: {config: {sandbox: {mode: "off"}}}}
"""
PARENT_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.jsonl}}
- {id: agent, merge: {config: {default_route: scripted}}}
- id: tools:subagent
  config: {patches: [%s]}
"""


def setup(tmp_path: Path, parent: list[dict[str, Any]], child: list[dict[str, Any]]) -> Path:
    """Write both scripts (JSON lines) and patches; returns the parent's patch."""
    (tmp_path / "parent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in parent))
    (tmp_path / "child.jsonl").write_text("".join(json.dumps(r) + "\n" for r in child))
    (tmp_path / "child-patch.yml").write_text(CHILD_PATCH)
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(PARENT_PATCH % (tmp_path / "child-patch.yml"))
    return patch


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted response making one tool call."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def config(home: Path, patch: Path) -> ClientConfig:
    return ClientConfig(profile="sdk", dsh_home=home, cwd=Path.cwd(), patches=[patch],
                        initialize_timeout=GUARD, request_timeout=GUARD)


def results(run: Any) -> list[dict[str, Any]]:
    """``{text, isError}`` of each tool result of a run, in order."""
    return [{"text": e.data["message"]["content"][0]["text"],
             "isError": e.data["message"]["isError"]}
            for e in run.events if e.type == "tool/result"]


def child_log(home: Path, parent: str, child: str) -> list[dict[str, Any]]:
    """The events of session ``child`` as the child runtime stored them in its own home."""
    for db in (home / "workspaces" / parent / "subagents").glob("*/home/sessions.db"):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            rows = conn.execute("SELECT body FROM events WHERE session_id = ? ORDER BY seq",
                                (child,)).fetchall()
        if rows:
            return [json.loads(body) for (body,) in rows]
    raise AssertionError(f"no child home holds session {child}")


def owner_pid(home: Path, parent: str, child: str) -> int:
    """The pid of the child runtime holding session ``child`` (from its own home)."""
    for db in (home / "workspaces" / parent / "subagents").glob("*/home/sessions.db"):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            row = conn.execute("SELECT owner_pid FROM sessions WHERE id = ?",
                               (child,)).fetchone()
        if row is not None:
            return int(row[0])
    raise AssertionError(f"no child home holds session {child}")


def prompts(log: list[dict[str, Any]]) -> list[str]:
    """The text of each prompt the child's turns took (user messages from clients)."""
    return [e["data"]["content"][0]["text"] for e in log if e["type"] == "user/message"
            and e["data"].get("source", {}).get("kind") == "user"]


def turn_ends(log: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["reason"]["kind"] for e in log if e["type"] == "turn/end"]


async def status(sub: Any, agent_id: str, wanted: str) -> dict[str, Any]:
    """Read ``subagent.*`` notifications until ``agent_id`` reports ``wanted``."""
    while True:
        note = await asyncio.wait_for(sub.__anext__(), GUARD)
        if note.params.get("agentId") == agent_id and note.params.get("status") == wanted:
            return note.params


async def _exists(path: Path) -> None:
    """Return once ``path`` exists and is not empty (the caller bounds the wait)."""
    while not (path.exists() and path.stat().st_size):
        await asyncio.sleep(0.02)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_send_message_queues_behind_the_running_turn_of_a_background_child(
        tmp_path: Path, dsh_home: Path) -> None:
    patch = setup(tmp_path, [
        call("subagent", description="writer", prompt="wait for go", run_in_background=True),
        call("send_message", agent_id="agent-1", message="write the second file"),
        {"text": "parent turn 1 done"},
        call("list_agents"),
        {"text": "parent turn 2 done"},
    ], [
        call("bash", command=WAIT_FOR_GO),
        {"text": "first answer"},
        call("bash", command="echo from-child > second.txt"),
        {"text": "second answer"},
    ])

    async def scenario() -> tuple[Any, Any, dict[str, Any], list[dict[str, Any]]]:
        async with AsyncDshClient(config(dsh_home, patch)) as client:
            with client.subscribe(lambda n: n.method.startswith("subagent.")) as sub:
                session = await client.new_session()
                first = await asyncio.wait_for(session.run("go"), GUARD)
                assert not Path("second.txt").exists()  # the child is still in turn 1
                Path("go").touch()
                idle = await status(sub, "agent-1", "idle")
            log = child_log(dsh_home, session.id, idle["childSessionId"])
            second = await asyncio.wait_for(session.run("how are they?"), GUARD)
            return first, second, idle, log

    first, second, idle, log = asyncio.run(scenario())
    assert first.final_text == "parent turn 1 done"
    started, queued = results(first)
    assert started["text"].startswith("Started sub-agent agent-1 in the background")
    assert queued == {"text": "Queued for agent-1: it runs after its current turn.",
                      "isError": False}
    assert Path("second.txt").read_text() == "from-child\n"
    assert idle["parentSessionId"] == first.session_id
    assert prompts(log) == ["wait for go", "write the second file"]
    assert turn_ends(log) == ["completed", "completed"]

    listing = json.loads(results(second)[0]["text"])["agents"]
    assert listing == [{"id": "agent-1", "description": "writer", "status": "idle", "cwd": ".",
                        "background": True, "forked": False, "lastTurn": "completed",
                        "answer": "second answer"}]
    sections = [e.data for e in second.events if e.type == "user/message"
                and e.data["source"]["kind"] == "runtime-context"
                and e.data["source"]["sections"][0]["name"] == "subagents"]
    assert len(sections) == 1
    assert "agent-1 (writer) is idle" in sections[0]["content"][0]["text"]
    assert "second answer" in sections[0]["content"][0]["text"]


def test_interrupt_cancels_the_running_turn_and_queued_messages_still_run(
        tmp_path: Path, dsh_home: Path) -> None:
    patch = setup(tmp_path, [
        call("subagent", description="sleeper", prompt="sleep", run_in_background=True),
        call("send_message", agent_id="agent-1", message="then say something"),
        # The child's bash has started (its pid is written) before it is interrupted.
        call("bash", command=WAIT_FOR_PID % "loop.pid"),
        call("interrupt_agent", agent_id="agent-1"),
        {"text": "parent turn 1 done"},
        call("interrupt_agent", agent_id="agent-1"),
        call("interrupt_agent", agent_id="agent-7"),
        {"text": "parent turn 2 done"},
    ], [
        call("bash", command=WAIT_FOR_GO),
        {"text": "after the interrupt"},
    ])

    async def scenario() -> tuple[Any, Any, list[dict[str, Any]]]:
        async with AsyncDshClient(config(dsh_home, patch)) as client:
            with client.subscribe(lambda n: n.method.startswith("subagent.")) as sub:
                session = await client.new_session()
                first = await asyncio.wait_for(session.run("go"), GUARD)
                idle = await status(sub, "agent-1", "idle")
            log = child_log(dsh_home, session.id, idle["childSessionId"])
            second = await asyncio.wait_for(session.run("again"), GUARD)
            return first, second, log

    first, second, log = asyncio.run(scenario())
    interrupted = results(first)[3]
    assert interrupted == {"text": "Interrupted agent-1's running turn; messages queued for "
                                   "it still run.", "isError": False}
    assert not Path("go").exists()  # turn 1 never finished by itself
    assert gone(int(Path("loop.pid").read_text()))  # its bash loop was killed with it
    assert prompts(log) == ["sleep", "then say something"]
    assert turn_ends(log) == ["cancelled", "completed"]
    again, unknown = results(second)
    assert again == {"text": "Sub-agent agent-1 is idle: no turn to interrupt.",
                     "isError": False}
    assert unknown["isError"] and "no sub-agent 'agent-7' in this session" in unknown["text"]
    assert second.final_text == "parent turn 2 done"


def test_list_agents_and_a_message_to_a_finished_agent(tmp_path: Path, dsh_home: Path) -> None:
    Path("sub").mkdir()
    Path("go").touch()  # only in the parent's directory: the child in sub/ keeps waiting
    patch = setup(tmp_path, [
        call("subagent", description="quick one", prompt="wait for go"),
        call("subagent", description="in sub", prompt="wait for go", cwd="sub",
             run_in_background=True),
        call("list_agents", scope="descendants"),
        call("send_message", agent_id="agent-1", message="more?"),
        call("send_message", agent_id="agent-9", message="hello?"),
        call("subagent", description="escape", prompt="x", cwd=".."),
        {"text": "parent done"},
    ], [
        call("bash", command=WAIT_FOR_GO),
        {"text": "done waiting"},
    ])

    async def scenario() -> tuple[Any, list[dict[str, Any]], int]:
        async with AsyncDshClient(config(dsh_home, patch)) as client:
            with client.subscribe(lambda n: n.method.startswith("subagent.")) as sub:
                session = await client.new_session()
                run = await asyncio.wait_for(session.run("go"), GUARD)
                notes = [(await asyncio.wait_for(sub.__anext__(), GUARD)).params
                         for _ in range(6)]
                # The background child's bash has started before the parent goes away.
                await asyncio.wait_for(_exists(Path("sub/loop.pid")), GUARD)
            pid = owner_pid(dsh_home, session.id, notes[4]["childSessionId"])
            assert not gone(pid)
        return run, notes, pid

    run, notes, pid = asyncio.run(scenario())
    quick, background, listing, finished, unknown, escape = results(run)
    assert quick == {"text": "done waiting", "isError": False}
    assert background["text"].startswith("Started sub-agent agent-2")
    assert json.loads(listing["text"])["agents"] == [
        {"id": "agent-1", "description": "quick one", "status": "finished", "cwd": ".",
         "background": False, "forked": False, "lastTurn": "completed",
         "answer": "done waiting"},
        {"id": "agent-2", "description": "in sub", "status": "running", "cwd": "sub",
         "background": True, "forked": False},
    ]
    assert finished["isError"] and "agent-1 has finished" in finished["text"]
    assert unknown["isError"] and "no sub-agent 'agent-9'" in unknown["text"]
    assert escape["isError"] and "outside the workspace root" in escape["text"]
    assert run.final_text == "parent done"  # every bad call was a tool error, nothing more
    assert [(n["agentId"], n.get("status")) for n in notes] == [
        ("agent-1", None), ("agent-1", "running"), ("agent-1", "idle"),
        ("agent-1", "completed"), ("agent-2", None), ("agent-2", "running")]
    # The parent exited: the background child's runtime and its bash loop went with it.
    assert gone(pid)
    assert gone(int(Path("sub/loop.pid").read_text()))


def test_fork_starts_the_child_with_the_parent_conversation(
        tmp_path: Path, dsh_home: Path) -> None:
    patch = setup(tmp_path, [
        {"text": "noted", "tool_calls": [{"name": "subagent_fork", "arguments": {
            "description": "recall", "prompt": "what was the password?"}}]},
        {"text": "parent done"},
    ], [{"text": "forked answer"}])

    async def scenario() -> tuple[Any, list[dict[str, Any]], list[str]]:
        async with AsyncDshClient(config(dsh_home, patch)) as client:
            with client.subscribe(lambda n: n.method == "subagent.started") as sub:
                session = await client.new_session()
                run = await asyncio.wait_for(
                    session.run("remember: the password is swordfish"), GUARD)
                started = await asyncio.wait_for(sub.__anext__(), GUARD)
            log = child_log(dsh_home, session.id, started.params["childSessionId"])
            refused = []
            for history in ("nope", [{"role": "tool", "toolCallId": "x", "content": []}],
                            [{"role": "assistant", "content": [{
                                "type": "tool-call", "id": "c1", "name": "n",
                                "arguments": "{}"}]}]):
                with pytest.raises(JsonRpcError) as caught:
                    await client.request("session/new", {"history": history})
                assert caught.value.code == -32602
                refused.append(caught.value.message)
        return run, log, refused

    run, log, refused = asyncio.run(scenario())
    assert results(run) == [{"text": "forked answer", "isError": False}]
    seeded = [e for e in log if e["type"] in ("user/message", "assistant/message",
                                              "tool/result")]
    texts = [(e["type"], (e["data"].get("message") or e["data"])["content"][0].get("text"))
             for e in seeded]
    assert texts[0] == ("user/message", "remember: the password is swordfish")
    fork_call = seeded[2]["data"]["message"]["content"]
    assert [b["name"] for b in fork_call if b["type"] == "tool-call"] == ["subagent_fork"]
    assert texts[3][0] == "tool/result" and texts[3][1].startswith("You are now a forked")
    assert all(e["data"].get("turn", 0) == 0 for e in seeded[:4])
    assert ("user/message", "what was the password?") in texts[4:]
    assert turn_ends(log) == ["completed"]
    assert refused[0] == '"history" must be an array of messages'
    assert "no earlier assistant message left unanswered" in refused[1]
    assert "tool call 'c1' has no result" in refused[2]
