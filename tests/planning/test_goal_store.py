"""Where goals live: the sessions database (migrated from version 1, surviving a
restart) or, in a tree without it, memory; and the pure state machine's refusals."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from agentkit import Booted, rows, text, write_script
from plankit import call, results, say, sections, start

from dsh.runtime.planning.goalstore import Goal, GoalError, change
from dsh.runtime.sessions import schema
from dsh.runtime.sessions.sqlite_store import SqliteSessionStore


def test_a_version_1_database_gains_the_goals_table_and_keeps_its_sessions(
        tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        for statement in schema._V1.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute("INSERT INTO sessions (id, profile, cwd, status, created_at, updated_at) "
                   "VALUES ('old', 'sdk', '/', 'closed', 0, 0)")
        db.execute("PRAGMA user_version = 1")
    store = SqliteSessionStore(path, profile="sdk")
    try:
        conn = store.connection
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert conn.execute("SELECT count(*) FROM goals").fetchone()[0] == 0
        assert [r[0] for r in conn.execute("SELECT id FROM sessions")] == ["old"]
    finally:
        store.close()


def test_a_goal_survives_a_restart_of_the_runtime(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    with start(first, [say("Set.", call("create_goal", objective="Port the CLI")),
                       say("Ok.")]) as (run, _):
        run.turn("s1", "set a goal")
    with start(second, [say("Still on it.", call("get_goal"))]) as (run, _):
        assert run.result("session/resume", {"sessionId": "s1"}) == {}
        events = run.turn("s1", "go on")
        assert sections(events, "goal")[0].startswith("Goal g-1 (rev 1, round 1 of 20): "
                                                      "Port the CLI")
        assert results(events)[0][1].startswith("Goal g-1 is active at revision 1.")


def test_without_a_sessions_database_goals_are_kept_in_memory_and_say_so(
        tmp_path: Path) -> None:
    script = write_script(tmp_path, [
        say("Set.", call("create_goal", objective="Tidy up", max_goal_rounds=3)),
        say("Ok."),
        say("Working."),
    ])
    tree = rows(script, extra=[{"id": "tools:goals", "name": "tools-goals"}])

    async def scenario() -> None:
        async with Booted(tree) as b:
            await b.agent.prompt("m1", text("set a goal"))
            await b.idle("m1")
            await b.agent.prompt("m1", text("go on"))
            await b.idle("m1", 2)
            answer = b.of("m1", "tool/result")[0]["message"]["content"][0]["text"]
            assert "kept in memory only" in answer
            shown = [s["text"] for d in b.of("m1", "user/message")
                     for s in (d.get("source") or {}).get("sections", ())
                     if s.get("name") == "goal"]
            assert shown == ["Goal g-1 (rev 1, round 1 of 3): Tidy up\nKeep working toward "
                             "it. Call update_goal with goal_id g-1, revision 1 and action "
                             "'complete' once it is done, or 'block' with a blocked_reason "
                             "if you cannot go on."]

    asyncio.run(scenario())


GOAL = Goal("s", "g-1", 1, 3, "Ship", "active", 5)


@pytest.mark.parametrize(("action", "kwargs", "message"), [
    ("finish", {}, "unknown action 'finish'"),
    ("update", {}, "action 'update' needs objective or max_goal_rounds"),
    ("update", {"objective": "  "}, "objective must be a non-empty string"),
    ("complete", {"objective": "x"}, "go with action 'update', not 'complete'"),
    ("abandon", {"blocked_reason": "x"}, "blocked_reason goes with action 'block'"),
    ("resume", {}, "goal g-1 is not blocked"),
])
def test_changes_the_state_machine_refuses(action: str, kwargs: dict[str, str],
                                           message: str) -> None:
    with pytest.raises(GoalError, match=message):
        change(GOAL, action, revision=3, **kwargs)


def test_a_finished_goal_cannot_change() -> None:
    done = change(GOAL, "complete", revision=3)
    assert (done.status, done.revision) == ("completed", 4)
    with pytest.raises(GoalError, match="is completed and cannot change"):
        change(done, "update", revision=4, objective="more")
