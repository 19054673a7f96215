"""The approval that succeeds: an approved out-of-root call does exactly what was approved.

Issue 19: the user was asked to approve a write to ``../x``, said yes, and the tool then
refused it anyway ("path escapes the working directory"). Here, through real processes:

* an SDK client with ``capabilities.approvals`` approves a write to ``../x.txt`` and the
  write happens; the next out-of-root write asks again (and, denied, does not happen); a
  move out of the root is approved, and the root stays where it was;
* an ACP client answers ``allow_always``: the directory is granted to the session, later
  writes there run unasked, a write to another directory asks again, and after
  ``session/load`` in a new runtime the grant still holds.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from boundarykit import Attack

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "acp"))
from acpkit import Recorder, acp_client, write_patch

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")


def test_an_sdk_approval_grants_exactly_that_call(tmp_path: Path) -> None:
    parent = tmp_path / "a"
    work = parent / "work"
    work.mkdir(parents=True)
    (work / "mine.txt").write_text("mine\n")
    calls = [
        {"name": "write_file", "arguments": {"path": "../x.txt", "content": "approved"}},
        {"name": "write_file", "arguments": {"path": "../y.txt", "content": "denied"}},
        {"name": "read_file", "arguments": {"path": "../x.txt"}},
        {"name": "working_directory", "arguments": {"cd": ".."}},
        {"name": "read_file", "arguments": {"path": "work/mine.txt"}},  # still the root
        {"name": "write_file", "arguments": {"path": "here.txt", "content": "denied"}},
    ]
    answers = iter(["allow", "deny", "allow", "allow", "deny"])
    with Attack(tmp_path, calls, cwd=work, approvals=True) as attack:
        turn = attack.turn(answer=lambda call: next(answers))
        attack.close()
    texts = turn.texts()
    assert texts[0] == "Created ../x.txt (8 bytes)."
    assert (parent / "x.txt").read_text() == "approved"
    assert turn.results[1]["error"] and "the client denied" in texts[1]
    assert not (parent / "y.txt").exists()
    assert texts[2] == "     1\tapproved"
    assert texts[3] == f"Current working directory: {json.dumps(str(parent))}"
    assert texts[4] == "     1\tmine"
    assert turn.results[5]["error"] and not (parent / "here.txt").exists()
    assert [(a["name"], a["outside"]) for a in turn.asked] == [
        ("write_file", [str(parent / "x.txt")]), ("write_file", [str(parent / "y.txt")]),
        ("read_file", [str(parent / "x.txt")]), ("working_directory", [str(parent)]),
        ("write_file", [str(parent / "here.txt")])]
    assert all("outside the workspace root" in a["reason"] for a in turn.asked)


class Answers(Recorder):
    """An ACP client answering permission requests from a list, in order."""

    def __init__(self, *answers: str) -> None:
        super().__init__()
        self.queue = list(answers)

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any,
                                 **kwargs: Any) -> Any:
        self.answer = self.queue.pop(0)
        return await super().request_permission(options, session_id, tool_call, **kwargs)


def test_acp_allow_always_grants_the_directory_and_survives_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parent, other = tmp_path / "a", tmp_path / "b"
    work = parent / "work"
    work.mkdir(parents=True)
    other.mkdir()
    monkeypatch.chdir(work)
    script = [{"text": "", "tool_calls": [
        {"name": "write_file", "arguments": {"path": "../x.txt", "content": "x"}},
        {"name": "write_file", "arguments": {"path": "../y.txt", "content": "y"}},
        {"name": "write_file", "arguments": {"path": "../../b/z.txt", "content": "z"}}]},
        {"text": "written"}]
    patch = write_patch(tmp_path, script, mode="workspace")
    first = Answers("allow_always", "reject_once")

    async def run_first() -> str:
        async with acp_client(first, tmp_path, patch) as conn:
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            answer = await asyncio.wait_for(conn.prompt(
                session_id=session.session_id,
                prompt=[{"type": "text", "text": "write"}]), 30)
            assert answer.stop_reason == "end_turn"
            return session.session_id

    session_id = asyncio.run(run_first())
    assert (parent / "x.txt").read_text() == "x" and (parent / "y.txt").read_text() == "y"
    assert not (other / "z.txt").exists()
    assert len(first.permissions) == 2  # x (always), then z in another directory
    options = {o.option_id: o.name for o in first.permissions[0]["options"]}
    assert options["allow_always"] == f"Always allow access to {parent} in this session"
    (parent / "x.txt").unlink()
    (parent / "y.txt").unlink()

    second = Answers("reject_once")

    async def run_second() -> None:
        async with acp_client(second, tmp_path, patch) as conn:
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            answer = await asyncio.wait_for(conn.prompt(
                session_id=session_id, prompt=[{"type": "text", "text": "again"}]), 30)
            assert answer.stop_reason == "end_turn"

    asyncio.run(run_second())
    # The grant was kept with the session: only the other directory asks.
    assert len(second.permissions) == 1
    assert (parent / "x.txt").read_text() == "x" and (parent / "y.txt").read_text() == "y"
    assert not (other / "z.txt").exists()
