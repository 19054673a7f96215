"""The agent service's session API: configure, sessions, cwd, resume, listeners, config."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from pathlib import Path

import pytest
from agentkit import Booted, rows, text, write_script

from dsh.core.errors import InvalidArgumentError, SessionBusyError, SessionNotFoundError
from dsh.runtime.agent.service import Agent, AgentConfig
from dsh.runtime.agent.store import MemorySessionStore
from dsh.runtime.servers.errors import code_of


def test_configure_resolves_defaults_and_rejects_unknown_routes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Booted(rows(write_script(tmp_path, [{"text": "hi"}]))) as b:
            assert b.agent.configure(provider=None, model=None) == {
                "provider": "scripted", "model": "scripted"}
            assert b.agent.configure(provider="scripted", model="any-model-id") == {
                "provider": "scripted", "model": "any-model-id"}
            with pytest.raises(InvalidArgumentError) as info:
                b.agent.configure(provider="nope", model=None)
            assert code_of(info.value) == -32602 and info.value.code == "unknown-route"
            assert info.value.message.startswith("unknown provider route 'nope' (registered:")
            # A failed configure keeps the previous choice.
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            (context,) = b.of("s1", "request/context")
            assert context == {"provider": "scripted", "model": "any-model-id",
                               "contextWindow": 128000}

    asyncio.run(scenario())


def test_sessions_cwd_listing_and_history(tmp_path: Path) -> None:
    sub = Path("sub")
    sub.mkdir()

    async def scenario() -> None:
        async with Booted(rows(write_script(tmp_path, [{"text": "hi"}]))) as b:
            agent = b.agent
            made = await agent.new_session()
            assert await agent.new_session(cwd=str(sub), session_id="b") == "b"
            with pytest.raises(InvalidArgumentError, match="already exists"):
                await agent.new_session(session_id="b")
            with pytest.raises(InvalidArgumentError, match="not a directory"):
                await agent.new_session(cwd="missing")
            assert agent.get_cwd("b") == os.path.abspath(sub)
            assert agent.get_cwd(made) == os.getcwd()
            assert agent.set_cwd("b", "..") == os.getcwd()
            with pytest.raises(InvalidArgumentError) as info:
                agent.set_cwd("b", "missing")
            assert code_of(info.value) == -32602
            for call in (agent.get_cwd, agent.history):
                with pytest.raises(SessionNotFoundError, match="unknown session 'x'"):
                    call("x")
            await agent.prompt("a-new", text("Fix the   build\nplease"), cwd=str(sub))
            await b.idle("a-new")
            listing = agent.list_sessions()
            assert [s["sessionId"] for s in listing] == sorted([made, "b", "a-new"])
            entry = next(s for s in listing if s["sessionId"] == "a-new")
            assert entry == {"sessionId": "a-new", "cwd": os.path.abspath(sub),
                             "status": "idle", "title": "Fix the build please"}
            history = agent.history("a-new")
            assert [e["seq"] for e in history] == list(range(len(history)))
            assert history == b.events("a-new")

    asyncio.run(scenario())


def test_resume(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "slow", "delay_ms": 3_600_000}])

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            with pytest.raises(SessionNotFoundError) as info:
                await b.agent.resume("x")
            assert (code_of(info.value), info.value.message) == (-32602, "unknown session 'x'")
            await b.agent.new_session(session_id="s1")
            await b.agent.resume("s1")
            await b.agent.prompt("s1", text("slow"))
            with pytest.raises(SessionBusyError) as info:
                await b.agent.resume("s1")
            assert code_of(info.value) == -32001

    asyncio.run(scenario())


def test_a_store_carries_sessions_to_another_agent(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "one"}, {"text": "two"}])
    store = MemorySessionStore()

    async def scenario() -> None:
        async with Booted(rows(script)) as b:
            rt, config = b.kernel.context, AgentConfig(default_route="scripted")
            first = Agent(rt, config, store)
            await first.prompt("kept", text("remember me"))
            while first.list_sessions()[0]["status"] != "idle":
                await asyncio.sleep(0)
            await first.close()
            second = Agent(rt, config, store)
            seen: list[tuple[str, dict]] = []
            second.add_listener(lambda m, p: seen.append((m, p)))
            with pytest.raises(SessionNotFoundError):
                second.history("kept")
            # Stored, not live here: nothing runs to cancel; an unknown id is not found.
            assert await second.cancel("kept") is False
            with pytest.raises(SessionNotFoundError):
                await second.cancel("never")
            await second.resume("kept")
            before = second.history("kept")
            assert before[-1]["data"]["reason"] == {"kind": "completed"}
            assert second.list_sessions()[0]["title"] == "remember me"
            await second.prompt("kept", text("and now"))
            while not any(p.get("status") == "idle" for _, p in seen):
                await asyncio.sleep(0)
            after = second.history("kept")
            assert [e["seq"] for e in after] == list(range(len(after)))
            assert [e["type"] for e in after].count("system/message") == 1
            assert after[-1]["data"] == {"turn": 2, "reason": {"kind": "completed"}}
            await second.close()

    asyncio.run(scenario())


def test_listeners_unsubscribe_and_a_failing_listener_is_isolated(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with Booted(rows(write_script(tmp_path, [{"text": "hi"}]))) as b:
            kept: list[str] = []

            def broken(method: str, params: dict) -> None:
                raise RuntimeError("listener bug")

            b.agent.add_listener(broken)
            remove = b.agent.add_listener(lambda m, p: kept.append(m))
            remove()
            remove()
            await b.agent.prompt("s1", text("hi"))
            await b.idle("s1")
            assert kept == []
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "completed"}

    with caplog.at_level(logging.ERROR, logger="dsh.agent"):
        asyncio.run(scenario())
    assert "agent listener failed" in caplog.text


def test_config_changes_apply_in_place(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "hi"}])

    async def scenario() -> None:
        tree = rows(script)
        async with Booted(tree) as b:
            agent = b.agent
            await agent.new_session(session_id="s1")
            changed = copy.deepcopy(tree)
            changed[0]["config"]["max_queued"] = 5
            diff = await b.kernel.reconcile(changed)
            assert diff.updated == {"agent"}
            assert b.kernel.context.service("agent") is agent
            assert agent.config.max_queued == 5
            assert agent.get_cwd("s1") == os.getcwd()

    asyncio.run(scenario())
