"""``todo_write`` through a real ``dsh --profile sdk``: each call is a ``plan/update``
event with the whole list, kept in the session's log (and its database)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from plankit import call, of, results, say, start

FIRST = [{"content": "Read the config", "status": "in_progress", "priority": "high"},
         {"content": "Raise the limit", "status": "pending"}]
SECOND = [{"content": "Read the config", "status": "completed", "priority": "high"},
          {"content": "Raise the limit", "status": "in_progress", "activeForm": "Raising"}]


def test_todo_write_emits_the_whole_list_each_time(tmp_path: Path, dsh_home: Path) -> None:
    script = [
        say("Planning.", call("todo_write", todos=FIRST)),
        say("Progress.", call("todo_write", todos=SECOND)),
        say("Bad item.", call("todo_write", todos=[{"content": "  ", "status": "pending"}])),
        say("Bad status.", call("todo_write", todos=[{"content": "x", "status": "done"}])),
        say("Done."),
    ]
    with start(tmp_path, script) as (run, _):
        events = run.turn("s1", "raise the limit")
        plans = of(events, "plan/update")
        assert plans == [
            {"entries": FIRST},
            {"entries": [SECOND[0], {"content": "Raise the limit", "status": "in_progress"}]},
        ]
        answers = results(events)
        assert answers[0] == (False, "Task list updated (2 tasks: 0 completed, 1 in progress, "
                                     "1 pending):\n[>] Read the config\n[ ] Raise the limit")
        assert answers[1][1].endswith("[x] Read the config\n[>] Raise the limit")
        assert answers[2] == (True, "Error: todos[0].content is empty")
        assert answers[3][0] and "status" in answers[3][1]
        assert of(events, "turn/end")[-1]["reason"]["kind"] == "completed"
        history = run.result("session/history", {"sessionId": "s1"})["events"]
        assert [e["data"] for e in history if e["type"] == "plan/update"] == plans

    with closing(sqlite3.connect(dsh_home / "sessions.db")) as db:
        stored = [json.loads(body)["data"] for (body,) in db.execute(
            "SELECT body FROM events WHERE session_id = 's1' AND type = 'plan/update' "
            "ORDER BY seq")]
    assert stored == plans
