"""``dsh --profile acp`` driven by the ``agent-client-protocol`` package's own client.

The client is the PyPI package's ``ClientSideConnection`` (written to the ACP schema by
people who never saw dsh); the agent is the real ``dsh`` process with the scripted
provider. The policy row is set to ``ask`` so a ``write_file`` call needs the client's
permission.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from acpkit import OFFLINE_PATCH, Recorder, acp_client, write_patch

acp = pytest.importorskip("acp")

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

WRITE_SCRIPT = [
    {"text": "I will write the note.",
     "tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "hi"}}],
     "usage": {"inputTokens": 40, "outputTokens": 10}},
    {"reasoning": "The tool said it wrote the file.", "text": "Done: note.txt is written.",
     "usage": {"inputTokens": 60, "outputTokens": 6}},
]
SLOW_SCRIPT = [{"text": "thinking for a long time", "delay_ms": 600_000}]


def text(value: str) -> object:
    return acp.text_block(value)


async def start(conn: object, cwd: Path) -> str:
    """initialize + session/new; checks the handshake on the way."""
    init = await conn.initialize(protocol_version=1)
    assert init.protocol_version == 1
    assert init.agent_capabilities.load_session is True
    prompt_caps = init.agent_capabilities.prompt_capabilities
    assert (prompt_caps.image, prompt_caps.audio, prompt_caps.embedded_context) == \
        (False, False, True)
    assert init.auth_methods == []
    assert init.agent_info.name == "dsh"
    session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
    return session.session_id


def test_prompt_streams_updates_and_asks_permission(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, WRITE_SCRIPT)
    recorder = Recorder("allow_once")

    async def main() -> None:
        async with acp_client(recorder, tmp_path, patch) as conn:
            session_id = await start(conn, Path.cwd())
            answer = await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=[text("write a note")]), 30)
            assert answer.stop_reason == "end_turn"
            assert all(sid == session_id for sid, _ in recorder.updates)

    asyncio.run(main())
    assert (Path.cwd() / "note.txt").read_text() == "hi"
    assert recorder.agent_text() == "I will write the note.Done: note.txt is written."
    # The model's reasoning arrives as thought chunks, never inside the message text.
    thoughts = "".join(u.content.text for u in recorder.of("agent_thought_chunk"))
    assert thoughts == "The tool said it wrote the file."
    [call] = recorder.of("tool_call")
    assert (call.kind, call.status, call.title) == ("edit", "pending", "Write note.txt")
    assert call.raw_input == {"path": "note.txt", "content": "hi"}
    assert call.locations[0].path == str(Path.cwd() / "note.txt")
    [asked] = recorder.permissions
    assert asked["toolCall"].tool_call_id == call.tool_call_id
    assert {"allow_once", "reject_once"} <= {o.kind for o in asked["options"]}
    progress = recorder.of("tool_call_update")
    assert [u.status for u in progress] == ["in_progress", "completed"]
    assert "Created note.txt" in progress[-1].content[0].content.text
    kinds = recorder.kinds()
    assert kinds.index("tool_call") < kinds.index("tool_call_update")
    usage = recorder.of("usage_update")
    assert usage and usage[-1].used == 66 and usage[-1].size > 0
    assert recorder.of("session_info_update")[0].title == "write a note"
    assert recorder.forbidden == []


@pytest.mark.parametrize("answer", ["reject_once", "cancelled"])
def test_a_refused_permission_fails_the_call_not_the_turn(tmp_path: Path, answer: str) -> None:
    patch = write_patch(tmp_path, WRITE_SCRIPT)
    recorder = Recorder(answer)

    async def main() -> None:
        async with acp_client(recorder, tmp_path, patch) as conn:
            session_id = await start(conn, Path.cwd())
            answer = await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=[text("write a note")]), 30)
            assert answer.stop_reason == "end_turn"

    asyncio.run(main())
    assert not (Path.cwd() / "note.txt").exists()
    assert len(recorder.permissions) == 1
    [result] = recorder.of("tool_call_update")
    assert result.status == "failed"
    assert "denied" in result.content[0].content.text


def test_allow_always_is_remembered_for_the_session(tmp_path: Path) -> None:
    twice = [{"text": "", "tool_calls": [
        {"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}},
        {"name": "write_file", "arguments": {"path": "b.txt", "content": "b"}}]},
        {"text": "both written"}]
    patch = write_patch(tmp_path, twice)
    recorder = Recorder("allow_always")

    async def main() -> None:
        async with acp_client(recorder, tmp_path, patch) as conn:
            session_id = await start(conn, Path.cwd())
            answer = await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=[text("two files")]), 30)
            assert answer.stop_reason == "end_turn"

    asyncio.run(main())
    assert len(recorder.permissions) == 1
    assert (Path.cwd() / "a.txt").exists() and (Path.cwd() / "b.txt").exists()


@pytest.mark.parametrize("wait_for_turn", [True, False])
def test_cancel_ends_the_turn_with_cancelled(tmp_path: Path, wait_for_turn: bool) -> None:
    """A cancel mid-turn, and one sent right behind the prompt (possibly before its turn
    has started), both answer ``stopReason: cancelled``, and the session stays usable."""
    patch = write_patch(tmp_path, [*SLOW_SCRIPT, {"text": "after the cancel"}])
    recorder = Recorder()

    async def main() -> None:
        async with acp_client(recorder, tmp_path, patch) as conn:
            session_id = await start(conn, Path.cwd())
            turn = asyncio.ensure_future(
                conn.prompt(session_id=session_id, prompt=[text("think")]))
            if wait_for_turn:
                while not recorder.of("session_info_update"):  # emitted as the turn opens
                    await asyncio.sleep(0.01)
            else:
                await asyncio.sleep(0)
            await conn.cancel(session_id=session_id)
            answer = await asyncio.wait_for(turn, 30)
            assert answer.stop_reason == "cancelled"
            if wait_for_turn:  # the slow answer was used up: the next one is quick
                again = await asyncio.wait_for(
                    conn.prompt(session_id=session_id, prompt=[text("again")]), 30)
                assert again.stop_reason == "end_turn"
                assert recorder.agent_text().endswith("after the cancel")

    asyncio.run(main())


def test_load_session_in_a_new_process_replays_the_history(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, WRITE_SCRIPT)
    first = Recorder("allow_once")
    frames: list[dict] = []

    async def run_first() -> str:
        async with acp_client(first, tmp_path, patch) as conn:
            session_id = await start(conn, Path.cwd())
            await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=[text("write a note")]), 30)
            return session_id

    session_id = asyncio.run(run_first())
    second = Recorder()

    async def run_second() -> None:
        async with acp_client(second, tmp_path, patch, frames=frames) as conn:
            init = await conn.initialize(protocol_version=1)
            assert init.agent_capabilities.load_session is True
            await conn.load_session(cwd=str(Path.cwd()), session_id=session_id, mcp_servers=[])

    asyncio.run(run_second())
    assert second.kinds() == ["user_message_chunk", "session_info_update",
                              "agent_message_chunk", "tool_call", "tool_call_update",
                              "agent_thought_chunk", "agent_message_chunk"]
    assert second.of("user_message_chunk")[0].content.text == "write a note"
    assert second.agent_text() == first.agent_text()
    assert second.of("tool_call")[0].tool_call_id == first.of("tool_call")[0].tool_call_id
    assert second.of("tool_call_update")[0].status == "completed"
    # Every replayed update is on the wire before the session/load answer.
    answer_at = next(i for i, f in enumerate(frames) if "result" in f and f["id"] == 1)
    updates_at = [i for i, f in enumerate(frames) if f.get("method") == "session/update"]
    assert updates_at and max(updates_at) < answer_at


def test_mcp_servers_are_accepted_and_connected(tmp_path: Path) -> None:
    from acp.schema import McpServerStdio

    patch = write_patch(tmp_path, WRITE_SCRIPT)
    test_server = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_test_server.py"

    async def main() -> None:
        async with acp_client(Recorder(), tmp_path, patch) as conn:
            await conn.initialize(protocol_version=1)
            server = McpServerStdio(name="files", command=sys.executable,
                                    args=[str(test_server)], env=[])
            session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[server])
            assert session.session_id

    asyncio.run(main())
    assert "Traceback" not in (tmp_path / "agent-stderr.log").read_text()


def test_config_options_switch_model_effort_and_policy(tmp_path: Path) -> None:
    """``configOptions`` (ACP's session config options) offer the session's model,
    reasoning effort and policy mode; a switch applies to the next turn, a bad value is
    refused and changes nothing."""
    patch = write_patch(tmp_path, [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}}]},
        {"text": "refused, as you asked"}], mode="workspace")
    recorder = Recorder("allow_once")

    async def main() -> None:
        async with acp_client(recorder, tmp_path, patch) as conn:
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(Path.cwd()), mcp_servers=[])
            options = {o.root.id if hasattr(o, "root") else o.id: o
                       for o in session.config_options}
            assert set(options) == {"model", "thought_level", "policy"}
            model = options["model"]
            model = getattr(model, "root", model)
            assert model.current_value == "scripted/scripted"
            values = [o.value for o in model.options]
            assert "deepseek-official/deepseek-v4-pro" in values
            answer = await conn.set_config_option(session_id=session.session_id,
                                                  config_id="policy", value="deny-mutating")
            current = {getattr(o, "root", o).id: getattr(o, "root", o).current_value
                       for o in answer.config_options}
            assert current["policy"] == "deny-mutating"
            with pytest.raises(acp.RequestError):
                await conn.set_config_option(session_id=session.session_id,
                                             config_id="thought_level", value="enormous")
            await asyncio.wait_for(conn.prompt(session_id=session.session_id,
                                               prompt=[text("write a.txt")]), 30)

    asyncio.run(main())
    assert not (Path.cwd() / "a.txt").exists()  # deny-mutating refused the write
    assert recorder.permissions == []
