"""The agent's extension points for run-time tools and context: tool sources, context
sections, and what a tool's context offers (events, history, images)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentkit import JOURNAL, Booted, rows, text, write_script


def call(name: str) -> dict[str, Any]:
    return {"text": "calling", "tool_calls": [{"name": name, "arguments": {}}]}


SOURCE = {"id": "source", "name": "agentkit:FixtureToolSource", "config": {"session": "s1"}}


def results(b: Booted, session: str) -> list[str]:
    return [r["message"]["content"][0]["text"] for r in b.of(session, "tool/result")]


def test_a_tool_source_offers_tools_to_its_session_only(tmp_path: Path) -> None:
    script = write_script(tmp_path, [call("only_here"), {"text": "done"}])

    async def scenario() -> None:
        async with Booted(rows(script, extra=[SOURCE])) as b:
            for session in ("s1", "s2", "boom"):
                await b.agent.prompt(session, text("go"))
                await b.idle(session)
            assert results(b, "s1") == ["only in s1"]
            assert results(b, "s2")[0].startswith("Error: unknown tool 'only_here'")
            # A failing source costs its own tools, never the registered ones.
            assert "inspect" in results(b, "boom")[0]
            assert b.of("boom", "turn/end")[-1]["reason"] == {"kind": "completed"}

    asyncio.run(scenario())


def test_a_registered_tool_wins_over_a_source_tool_of_the_same_name(tmp_path: Path) -> None:
    script = write_script(tmp_path, [call("inspect"), {"text": "done"}])

    async def scenario() -> None:
        async with Booted(rows(script, extra=[SOURCE])) as b:
            await b.agent.prompt("s1", text("go"))
            await b.idle("s1")
            assert results(b, "s1")[0].startswith("history had")

    asyncio.run(scenario())


def test_tool_context_emits_events_copies_history_and_carries_images(tmp_path: Path) -> None:
    script = write_script(tmp_path, [call("inspect"), {"text": "done"}])

    async def scenario() -> None:
        async with Booted(rows(script, extra=[SOURCE])) as b:
            await b.agent.prompt("s1", text("go"))
            await b.idle("s1")
            assert b.of("s1", "fixture/note") == [{"said": "hello"}]
            (result,) = b.of("s1", "tool/result")
            # history: the prompt, the working-directory context, the assistant message.
            assert result["message"]["content"] == [
                {"type": "text", "text": "history had 3 messages"},
                {"type": "image", "mimeType": "image/png", "data": "aGk="}]
            assert ("images", False) in JOURNAL  # the scripted model takes no images
            assert len(b.agent.history("s1")) > 3

    asyncio.run(scenario())


def sections(b: Booted, session: str) -> list[str]:
    """The plugin context sections the session was sent, in order."""
    shown = []
    for message in b.of(session, "user/message"):
        for section in message.get("source", {}).get("sections", ()):
            if section["name"] != "working-directory:current":
                shown.append(f"{section['name']}={section['text']}")
    return shown


def test_context_sections_are_sent_when_they_change(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    same = {"id": "ctx", "name": "agentkit:FixtureContext", "config": {"text": "ship it"}}
    every = {"id": "ctx", "name": "agentkit:FixtureContext",
             "config": {"text": "ship it", "every_turn": True}}

    async def scenario(row: dict[str, Any]) -> list[str]:
        async with Booted(rows(script, extra=[row])) as b:
            for n in range(3):
                await b.agent.prompt("s1", text(f"prompt {n}"))
                await b.idle("s1", n + 1)
            assert [j[2] for j in JOURNAL if j[0] == "context"] == [1, 2, 3]
            return sections(b, "s1")

    assert asyncio.run(scenario(same)) == ["goal=ship it"]
    assert asyncio.run(scenario(every)) == [f"goal=ship it (turn {n})" for n in (1, 2, 3)]


def test_a_failing_context_section_is_an_error_event_and_the_turn_goes_on(
        tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "fine"}])
    row = {"id": "ctx", "name": "agentkit:FixtureContext",
           "config": {"text": "goal", "broken": True}}

    async def scenario() -> None:
        async with Booted(rows(script, extra=[row])) as b:
            await b.agent.prompt("s1", text("go"))
            await b.idle("s1")
            (error,) = b.of("s1", "error")
            assert error["message"] == ("context 'broken' of row 'ctx' failed: "
                                        "no context today")
            assert sections(b, "s1") == ["goal=goal"]
            assert b.of("s1", "turn/end")[0]["reason"] == {"kind": "completed"}

    asyncio.run(scenario())
