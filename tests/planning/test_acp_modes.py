"""Plan mode and the task list over ACP: session modes on ``session/new``,
``session/set_mode``, the ``plan`` and ``current_mode_update`` session updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acpkit import RawAcp, write_patch

from dsh.runtime.servers.acp_mapping import UpdateMapper

TODOS = [{"content": "Survey", "status": "completed"},
         {"content": "Write notes", "status": "pending", "priority": "high"}]
SCRIPT = [
    {"text": "Listing tasks.", "tool_calls": [{"name": "todo_write",
                                                "arguments": {"todos": TODOS}}]},
    {"text": "Writing.", "tool_calls": [{"name": "write_file",
                                         "arguments": {"path": "notes.txt", "content": "n"}}]},
    {"text": "Plan.", "tool_calls": [{"name": "exit_plan_mode",
                                      "arguments": {"plan": "Write notes.txt"}}]},
    {"text": "Writing.", "tool_calls": [{"name": "write_file",
                                         "arguments": {"path": "notes.txt", "content": "n"}}]},
    {"text": "Done."},
]


def ev(type: str, **data: Any) -> dict[str, Any]:
    return {"type": type, "seq": 0, "time": 0, "data": data}


def test_plan_and_mode_events_map_to_acp_updates() -> None:
    mapper = UpdateMapper("/w")
    plan = ev("plan/update", entries=TODOS)
    expected = {"sessionUpdate": "plan", "entries": [
        {"content": "Survey", "priority": "medium", "status": "completed"},
        {"content": "Write notes", "priority": "high", "status": "pending"}]}
    assert mapper.live(plan) == [expected]
    assert mapper.live(ev("mode/update", mode="default")) == [
        {"sessionUpdate": "current_mode_update", "currentModeId": "default"}]
    # Replay rebuilds the task list, but not a mode switch session/load answers anyway.
    assert mapper.replay([plan, ev("mode/update", mode="default")]) == [expected]


def test_session_modes_over_acp(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    raw = RawAcp(write_patch(tmp_path, SCRIPT, mode="workspace"))
    try:
        assert "result" in raw.call("initialize", {"protocolVersion": 1})
        created = raw.call("session/new", {"cwd": str(work), "mcpServers": []})["result"]
        assert created["modes"]["currentModeId"] == "default"
        assert [m["id"] for m in created["modes"]["availableModes"]] == ["default", "plan"]
        session = created["sessionId"]
        bad = raw.call("session/set_mode", {"sessionId": session, "modeId": "yolo"})
        assert bad["error"]["code"] == -32602
        set_mode = raw.call("session/set_mode", {"sessionId": session, "modeId": "plan"})
        assert set_mode["result"] == {}

        asked: list[dict[str, Any]] = []

        def approve(frame: dict[str, Any]) -> dict[str, Any]:
            asked.append(frame["params"]["toolCall"])
            return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}

        rid = raw.request("session/prompt", {"sessionId": session,
                                             "prompt": [{"type": "text", "text": "plan"}]})
        frames = raw.until(lambda f: f.get("id") == rid and "method" not in f, approve)
        assert frames[-1]["result"] == {"stopReason": "end_turn"}
        updates = [f["params"]["update"] for f in frames
                   if f.get("method") == "session/update"]
        kinds = [u["sessionUpdate"] for u in updates]
        assert kinds.count("plan") == 1 and kinds.count("current_mode_update") == 1
        assert next(u for u in updates if u["sessionUpdate"] == "current_mode_update") == {
            "sessionUpdate": "current_mode_update", "currentModeId": "default"}
        assert [(c["kind"], c["rawInput"]) for c in asked] == [
            ("switch_mode", {"plan": "Write notes.txt"})]
        statuses = [u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update"
                    and u.get("status") in ("completed", "failed")]
        assert statuses == ["completed", "failed", "completed", "completed"]
        assert (work / "notes.txt").read_text() == "n"

        loaded = raw.call("session/load", {"sessionId": session, "cwd": str(work),
                                           "mcpServers": []})
        assert loaded["result"]["modes"]["currentModeId"] == "default"
        raw.close_stdin()
        assert raw.wait() == 0
    finally:
        raw.finish()
