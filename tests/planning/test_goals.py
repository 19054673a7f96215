"""Goals through a real ``dsh --profile sdk``: rows in ``sessions.db``, compare-and-set
revisions, and the goal shown to the model at the start of every turn until completed."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from plankit import call, of, results, say, sections, start

OBJECTIVE = "Ship the v2 parser"


def goal_rows(home: Path) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(home / "sessions.db")) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(
            "SELECT session_id, id, revision, objective, status, max_rounds, rounds_used, "
            "blocked_reason FROM goals ORDER BY session_id, number")]


def test_goal_lifecycle_in_the_sessions_database(tmp_path: Path, dsh_home: Path) -> None:
    script = [
        # turn 1: create
        say("Setting the goal.", call("create_goal", objective=OBJECTIVE, max_goal_rounds=2)),
        say("Goal set."),
        # turn 2: round 1; block it, which stops the rounds
        say("Blocked.", call("update_goal", goal_id="g-1", revision=1, action="block",
                             blocked_reason="waiting for the grammar")),
        say("Waiting."),
        # turn 3: blocked; resume with a stale revision, a missing goal, a second goal
        say("Resuming.", call("update_goal", goal_id="g-1", revision=1, action="resume"),
            call("update_goal", goal_id="g-9", revision=1, action="complete"),
            call("create_goal", objective="Another"),
            call("update_goal", goal_id="g-1", revision=2, action="block"),
            call("update_goal", goal_id="g-1", revision=2, action="resume")),
        say("Resumed."),
        # turn 4: round 2 of 2; turn 5: used up, complete it
        say("Working."),
        say("Completing.", call("update_goal", goal_id="g-1", revision=3, action="complete"),
            call("get_goal")),
        say("Completed."),
        # turn 6: no goal any more
        say("Idle."),
    ]
    with start(tmp_path, script) as (run, _):
        turns = [run.turn("s1", f"turn {n}") for n in range(1, 7)]

        created = results(turns[0])[0]
        assert not created[0] and created[1].startswith("Created goal g-1 at revision 1")
        assert json.loads(created[1].splitlines()[1])["goal"] == {
            "goal_id": "g-1", "revision": 1, "status": "active", "objective": OBJECTIVE,
            "max_goal_rounds": 2, "rounds_used": 0, "blocked_reason": None}
        assert sections(turns[0], "goal") == []

        assert sections(turns[1], "goal") == [
            f"Goal g-1 (rev 1, round 1 of 2): {OBJECTIVE}\nKeep working toward it. Call "
            "update_goal with goal_id g-1, revision 1 and action 'complete' once it is done, "
            "or 'block' with a blocked_reason if you cannot go on."]
        assert sections(turns[2], "goal")[0].startswith(
            "Goal g-1 (rev 2) is blocked: waiting for the grammar")

        stale, missing, second, no_reason, resumed = results(turns[2])
        assert stale == (True, "Error: goal g-1 is at revision 2, not 1: it changed since you "
                               "read it; call get_goal and decide again")
        assert missing == (True, "Error: no goal 'g-9' in this session; its goal is g-1")
        assert second[0] and "already has goal g-1 (blocked, revision 2)" in second[1]
        assert no_reason == (True, "Error: blocked_reason must be a non-empty string")
        assert not resumed[0] and resumed[1].startswith("Goal g-1 is active at revision 3.")

        assert sections(turns[3], "goal")[0].startswith("Goal g-1 (rev 3, round 2 of 2)")
        assert sections(turns[4], "goal")[0].startswith(
            "Goal g-1 (rev 3, all 2 rounds used)")
        completed, read = results(turns[4])
        assert not completed[0] and completed[1].startswith("Goal g-1 is completed at revision 4")
        assert json.loads(read[1].splitlines()[1])["goal"]["status"] == "completed"
        assert sections(turns[5], "goal") == []
        assert [t for turn in turns for t in of(turn, "turn/end")
                if t["reason"]["kind"] != "completed"] == []
        updates = [d["goal"]["revision"] for turn in turns for d in of(turn, "goal/update")]
        assert updates == [1, 2, 3, 4]

    assert goal_rows(dsh_home) == [
        {"session_id": "s1", "id": "g-1", "revision": 4, "objective": OBJECTIVE,
         "status": "completed", "max_rounds": 2, "rounds_used": 2, "blocked_reason": None}]
