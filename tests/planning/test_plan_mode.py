"""Plan mode through a real ``dsh --profile sdk``: writes refused until the client
approves the plan; the file on disk is the verdict."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from plankit import call, of, results, say, sections, start

PLAN = "1. Write notes.txt with the findings."
WRITE = call("write_file", path="notes.txt", content="findings\n")


def test_plan_mode_refuses_writes_until_the_client_approves_the_plan(tmp_path: Path,
                                                                      dsh_home: Path) -> None:
    script = [
        say("Writing first.", WRITE),
        say("Here is my plan.", call("exit_plan_mode", plan=PLAN)),
        say("Trying again.", WRITE),
        say("Revised plan.", call("exit_plan_mode", plan=PLAN + " Then stop.")),
        say("Now writing.", WRITE),
        say("Done."),
    ]
    with start(tmp_path, script, approvals=True) as (run, work):
        session = run.result("session/new")["sessionId"]
        assert run.result("session/mode/get", {"sessionId": session})["mode"] == "default"
        assert run.result("session/mode/set", {"sessionId": session, "mode": "plan"}) == {
            "mode": "plan"}
        run.decisions = ["deny", "allow"]
        events = run.turn(session, "note the findings")

        answers = results(events)
        assert [error for error, _ in answers] == [True, True, True, False, False]
        assert "plan mode: 'write_file' may change files" in answers[0][1]
        assert "exit_plan_mode" in answers[0][1]
        assert answers[1][1] == "Error: the client denied this tool call"
        assert "plan mode" in answers[2][1]  # refused: still planning after the denial
        assert "The user approved the plan" in answers[3][1]
        assert (work / "notes.txt").read_text() == "findings\n"

        assert [a["toolCall"]["name"] for a in run.asked] == ["exit_plan_mode"] * 2
        assert PLAN in run.asked[0]["toolCall"]["arguments"]
        assert of(events, "mode/update") == [{"mode": "default", "reason": "plan-approved"}]
        assert sections(events, "plan-mode")[0].startswith("Plan mode is on")
        assert run.result("session/mode/get", {"sessionId": session})["mode"] == "default"
        assert of(events, "turn/end")[-1]["reason"]["kind"] == "completed"

    with closing(sqlite3.connect(dsh_home / "sessions.db")) as db:
        modes = [json.loads(body)["data"] for (body,) in db.execute(
            "SELECT body FROM events WHERE session_id = ? AND type = 'mode/update' "
            "ORDER BY seq", (session,))]
    # The client's switch is logged too, so a replay knows the session was planning.
    assert modes == [{"mode": "plan", "reason": "client"},
                     {"mode": "default", "reason": "plan-approved"}]


def test_start_in_plan_mode_without_an_approving_client_stays_read_only(
        tmp_path: Path) -> None:
    rows = [{"id": "tools:plan", "merge": {"config": {"start_in_plan_mode": True}}}]
    script = [
        say("Writing.", WRITE),
        say("Plan.", call("exit_plan_mode", plan=PLAN)),
        say("Listing.", call("list_directory", path=".")),
        say(PLAN),
    ]
    with start(tmp_path, script, rows=rows) as (run, work):
        events = run.turn("s1", "note the findings")
        answers = results(events)
        assert [error for error, _ in answers] == [True, True, False]
        assert "plan mode" in answers[0][1]
        assert "no client can approve a plan here" in answers[1][1]
        assert not (work / "notes.txt").exists()
        assert run.result("session/mode/get", {"sessionId": "s1"})["mode"] == "plan"
        assert of(events, "mode/update") == []
        assert of(events, "turn/end")[-1]["reason"]["kind"] == "completed"


def test_mode_methods_refuse_bad_input(tmp_path: Path) -> None:
    with start(tmp_path, [say("Hi.")]) as (run, _):
        session = run.result("session/new")["sessionId"]
        bad = run.call("session/mode/set", {"sessionId": session, "mode": "yolo"})
        assert bad["error"]["code"] == -32602
        assert "unknown mode 'yolo' (modes: default, plan)" in bad["error"]["message"]
        missing = run.call("session/mode/set", {"sessionId": "nope", "mode": "plan"})
        assert missing["error"]["code"] == -32602
        state = run.result("session/mode/get", {"sessionId": session})
        assert [m["id"] for m in state["availableModes"]] == ["default", "plan"]


def test_unattended_exit_allow_leaves_plan_mode_without_a_client(tmp_path: Path) -> None:
    rows = [{"id": "tools:plan", "merge": {"config": {"start_in_plan_mode": True,
                                                      "unattended_exit": "allow"}}}]
    script = [
        say("Plan.", call("exit_plan_mode", plan=PLAN)),
        say("Writing.", WRITE),
        say("Leaving again.", call("exit_plan_mode", plan=PLAN)),
        say("Done."),
    ]
    with start(tmp_path, script, rows=rows) as (run, work):
        events = run.turn("s1", "note the findings")
        answers = results(events)
        assert [error for error, _ in answers] == [False, False, True]
        assert "not in plan mode" in answers[2][1]
        assert (work / "notes.txt").read_text() == "findings\n"
        assert of(events, "mode/update") == [{"mode": "default", "reason": "plan-approved"}]
        assert run.asked == []
