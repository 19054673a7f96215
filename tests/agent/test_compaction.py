"""Context compaction: by size, by hand (``compact`` / ``session/compact``), and resume.

A real kernel runs the real agent, the scripted provider (whose next scripted response
is also what answers a summarisation request) and the SQLite sessions service; a spy hook
records every request the model is sent, so tests check what the model saw.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from agentkit import JOURNAL, Booted, rows, text, write_script

from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.sdk import AsyncDshClient, ClientConfig

REQUESTS: list[list[dict[str, Any]]] = []
LONG_PROMPT = "Please look at this long description. " * 10  # ~380 chars
LONG_ANSWER = "Here is a long first answer with many details. " * 7  # ~330 chars
SUMMARY = "SUMMARY: the user described a task; the assistant answered at length."


class RequestSpy(Plugin):
    """Records the messages of every model request (``before_model_request``)."""

    manifest = Manifest(id="request-spy", version="1",
                        capabilities=frozenset({Capability.LIFECYCLE}))

    def apply(self, reg: Registrar) -> None:
        reg.hook("before_model_request", "spy", self._spy)
        reg.hook("before_compact", "before", self._journal)
        reg.hook("on_compact", "after", self._journal)

    async def _spy(self, event: Any) -> None:
        REQUESTS.append([dict(m) for m in event.payload.messages])

    async def _journal(self, event: Any) -> None:
        JOURNAL.append((event.type, event.session_id, dict(event.payload)))


def tree(script: str, **agent: Any) -> list[dict[str, Any]]:
    """The agent on the sessions service, a scripted model with a small window, the spy."""
    base = rows(script, agent=agent, extra=[
        {"id": "sessions", "name": "sessions-sqlite"},
        {"id": "spy", "name": "test_compaction:RequestSpy"}])
    for row in base:
        if row["id"] == "agent":
            row["inject"] = ["sessions"]
        if row["id"] == "llm-scripted":
            row["config"]["context_window"] = 400
    return base


def kinds(messages: list[dict[str, Any]]) -> list[str]:
    return [m.get("source", {}).get("kind", "?") for m in messages]


def test_a_history_near_the_window_is_compacted_before_the_request(tmp_path: Path) -> None:
    REQUESTS.clear()
    script = write_script(tmp_path, [{"text": LONG_ANSWER}, {"text": SUMMARY},
                                     {"text": "second answer"}])

    async def scenario() -> tuple[list[dict], list[Any]]:
        async with Booted(tree(script, compact_at=0.5)) as b:
            await b.agent.prompt("s1", text(LONG_PROMPT))
            await b.idle("s1")
            await b.agent.prompt("s1", text("next"))
            await b.idle("s1", 2)
            return b.events("s1"), list(JOURNAL)

    log, journal = asyncio.run(scenario())
    compacted = [e["data"] for e in log if e["type"] == "context/compacted"]
    assert len(compacted) == 1
    data = compacted[0]
    assert (data["reason"], data["turn"], data["removedCount"], data["keptCount"]) == (
        "auto", 2, 2, 2)
    assert data["tokensAfter"] < data["tokensBefore"]
    assert SUMMARY in data["summary"]["content"][0]["text"]
    # The summarisation request carried the removed prompt; the next request did not.
    assert kinds(REQUESTS[-1]) == ["system-prompt", "compaction-summary", "model", "user"]
    assert LONG_PROMPT not in str(REQUESTS[-1])
    ends = [e["data"]["reason"]["kind"] for e in log if e["type"] == "turn/end"]
    assert ends == ["completed", "completed"]
    assert [e[0] for e in journal] == ["before_compact", "on_compact"]
    assert journal[0][2]["reason"] == "auto" and journal[0][2]["removeCount"] == 2
    assert journal[1][2]["summary"] == SUMMARY
    # The log is append-only: every message event is still there.
    prompts = [e for e in log if e["type"] == "user/message"
               and e["data"]["source"]["kind"] == "user"]
    assert len(prompts) == 2


def test_a_compacted_session_resumes_with_the_compacted_history(tmp_path: Path) -> None:
    REQUESTS.clear()
    first = write_script(tmp_path, [{"text": LONG_ANSWER}, {"text": SUMMARY},
                                    {"text": "second answer"}], "first.jsonl")
    second = write_script(tmp_path, [{"text": "third answer"}], "second.jsonl")

    async def scenario() -> list[dict[str, Any]]:
        async with Booted(tree(first, compact_at=0.5)) as b:
            await b.agent.prompt("s1", text(LONG_PROMPT))
            await b.idle("s1")
            await b.agent.prompt("s1", text("next"))
            await b.idle("s1", 2)
        before = list(REQUESTS[-1])
        async with Booted(tree(second, compact_at=0.5)) as b:
            await b.agent.resume("s1")
            await b.agent.prompt("s1", text("and now?"))
            await b.idle("s1")
            assert b.of("s1", "turn/end")[-1]["reason"]["kind"] == "completed"
        return [*before, {"split": True}, *REQUESTS[-1]]

    seen = asyncio.run(scenario())
    split = seen.index({"split": True})
    before, after = seen[:split], seen[split + 1:]
    assert kinds(after) == [*kinds(before), "model", "user"]
    assert [m["id"] for m in after[:len(before)]] == [m["id"] for m in before]
    assert LONG_PROMPT not in str(after)


def test_compact_by_hand_keeps_the_last_turn(tmp_path: Path) -> None:
    REQUESTS.clear()
    script = write_script(tmp_path, [{"text": "a1"}, {"text": "a2"}, {"text": SUMMARY},
                                     {"text": "a3"}])

    async def scenario() -> tuple[dict[str, Any], list[dict], list[Any]]:
        async with Booted(tree(script, compact_at=0)) as b:
            for n, prompt in enumerate(("one", "two"), 1):
                await b.agent.prompt("s1", text(prompt))
                await b.idle("s1", n)
            answer = await b.agent.compact("s1")
            await b.agent.prompt("s1", text("three"))
            await b.idle("s1", 3)
            return answer, b.events("s1"), list(JOURNAL)

    answer, log, journal = asyncio.run(scenario())
    assert answer["compacted"] is True
    assert (answer["removedCount"], answer["keptCount"]) == (3, 2)  # one, context, a1
    assert [e["data"]["reason"] for e in log if e["type"] == "context/compacted"] == [
        "manual"]
    assert [e[0] for e in journal] == ["before_compact", "on_compact"]
    assert kinds(REQUESTS[-1]) == ["system-prompt", "compaction-summary", "user", "model",
                                   "user"]
    assert "one" not in [m["content"][0]["text"] for m in REQUESTS[-1]]


def test_session_compact_over_the_sdk_protocol(tmp_path: Path, dsh_home: Path) -> None:
    script = tmp_path / "script.yml"
    script.write_text('- text: "a1"\n- text: "a2"\n- text: "the summary"\n')
    patch = tmp_path / "patch.yml"
    patch.write_text("- insert:\n"
                     "    - {id: llm-scripted, name: llm-scripted, "
                     "config: {script: !path script.yml}}\n"
                     "- {id: agent, merge: {config: {default_route: scripted}}}\n")
    config = ClientConfig(profile="sdk", dsh_home=dsh_home, cwd=os.getcwd(),
                          patches=[patch], request_timeout=30)

    async def scenario() -> tuple[Any, Any, list[str]]:
        async with AsyncDshClient(config) as client:
            session = await client.new_session()
            await session.run("one")
            await session.run("two")
            answer = await client.request("session/compact", {"sessionId": session.id})
            unknown = None
            try:
                await client.request("session/compact", {"sessionId": "nope"})
            except Exception as exc:  # the JSON-RPC error, as the client raises it
                unknown = exc
            history = await client.request("session/history", {"sessionId": session.id})
            return answer, unknown, [e["type"] for e in history["events"]]

    answer, unknown, types = asyncio.run(scenario())
    assert answer["compacted"] is True and answer["removedCount"] == 3
    assert getattr(unknown, "code", None) == -32602
    assert types.count("context/compacted") == 1
