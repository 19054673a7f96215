"""``dsh sessions list|show|rm`` and ``headless --continue`` on real homes made by real
headless runs (the scripted model), read as a person would: on a pipe, and on a
pseudo-terminal read off an emulated screen (pyte), where answers render through rich.

The sessions carry what a hostile repository could plant: a title, an answer, and a file
read by a tool, each holding OSC 52 (a clipboard write), OSC 0 (a window title) and CSI 2J
(a screen clear). None of them may reach a terminal raw.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals")

ESC = "\x1b"
PAYLOADS = ("\x1b]52;c;cHduZWQ=\x07", "\x1b]0;pwned\x07", "\x1b[2J")
EVIL = "".join(PAYLOADS)
RAW = ("\x1b]52", "\x1b]0;", "\x1b[2J")


def script_patch(tmp: Path, steps: list[dict[str, Any]], name: str = "script") -> Path:
    path = tmp / f"{name}.jsonl"
    path.write_text("".join(json.dumps(step) + "\n" for step in steps))
    patch = tmp / f"{name}.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {
        "script": str(path)}}}]))
    return patch


def headless(run_dsh: Any, patch: Path, *args: str, **kw: Any) -> Any:
    return run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch",
                   str(patch), *args, **kw)


def session_of(stderr: str) -> str:
    return next(line.split()[-1] for line in stderr.splitlines()
                if line.startswith("dsh: session "))


@pytest.fixture
def evil_session(run_dsh: Any, tmp_path: Path) -> str:
    """A session whose title, answer and tool result each carry the three payloads."""
    (Path.cwd() / "evil.txt").write_text(f"line one\n{EVIL}\nline three\n")
    patch = script_patch(tmp_path, [
        {"text": "Reading it.", "tool_calls": [{"name": "read_file",
                                                "arguments": {"path": "evil.txt"}}],
         "usage": {"inputTokens": 200, "outputTokens": 20}},
        {"text": f"## Result\n\nIt says **{EVIL}** and\n\n```\n{EVIL}\n```\n",
         "usage": {"inputTokens": 1200, "outputTokens": 80, "cacheHitTokens": 1000,
                   "costUsd": 0.0042}}])
    done = headless(run_dsh, patch, f"Fix {EVIL} the build")
    assert done.returncode == 0, done.stderr
    return session_of(done.stderr)


def no_raw(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text[:2000])


def test_list_shows_summaries_newest_first_and_titles_harmlessly(
        run_dsh: Any, tmp_path: Path, evil_session: str) -> None:
    later = headless(run_dsh, script_patch(tmp_path, [{"text": "ok"}], "plain"), "Second task")
    assert later.returncode == 0, later.stderr
    second = session_of(later.stderr)
    listed = run_dsh("sessions", "list", "--profile", "headless")
    assert listed.returncode == 0, listed.stderr
    assert ESC not in listed.stdout and "\x07" not in listed.stdout
    header, first_row, second_row = listed.stdout.splitlines()
    assert header.split() == ["ID", "UPDATED", "TURNS", "COST", "RUNTIME", "WORKSPACE",
                              "TITLE"]
    assert first_row.startswith(second) and second_row.startswith(evil_session)
    assert "Fix ^[]52;c;cHduZWQ=^G^[]0;pwned^G^[[2J the build" in second_row
    assert "$0.0042" in second_row and " 1 " in second_row
    document = json.loads(run_dsh("sessions", "list", "--profile", "headless",
                                  "--json").stdout)
    entries = document["data"]["sessions"]
    assert [e["sessionId"] for e in entries] == [second, evil_session]
    evil = entries[1]
    assert evil["title"].startswith("Fix \x1b]52")  # the data, exact (escaped in the JSON)
    assert (evil["turns"], evil["costUsd"], evil["heldBy"]) == (1, 0.0042, None)
    assert evil["usage"]["cacheHitTokens"] == 1000
    assert evil["workspace"] == os.path.realpath(Path.cwd())
    here = run_dsh("sessions", "list", "--profile", "headless", "--here", "--limit", "1")
    assert len(here.stdout.splitlines()) == 2


def test_show_prints_the_transcript_and_no_control_reaches_the_terminal(
        run_dsh: Any, evil_session: str) -> None:
    text = run_dsh("sessions", "show", evil_session, "--profile", "headless")
    assert text.returncode == 0, text.stderr
    no_raw(text.stdout)
    assert "^[]52;c;cHduZWQ=^G" in text.stdout  # shown, not obeyed
    assert "→ read_file" in text.stdout and "line three" in text.stdout
    assert "turn 1 completed · 1,400 in (1,000 cached), 100 out, $0.0042" in text.stdout
    markdown = run_dsh("sessions", "show", evil_session, "--profile", "headless",
                       "--markdown")
    no_raw(markdown.stdout)
    assert "## Assistant\n\n## Result" in markdown.stdout
    raw = run_dsh("sessions", "show", evil_session, "--profile", "headless", "--json")
    assert ESC not in raw.stdout  # escaped as \u001b
    document = json.loads(raw.stdout)
    log = document["data"]["events"]
    assert [e["seq"] for e in log] == list(range(len(log)))
    assert document["data"]["session"]["sessionId"] == evil_session
    [result] = [e for e in log if e["type"] == "tool/result"]
    assert EVIL in result["data"]["message"]["content"][0]["text"]  # the data, exact


def test_show_on_a_terminal_renders_markdown_and_obeys_no_control(
        evil_session: str) -> None:
    pexpect = pytest.importorskip("pexpect")
    pyte = pytest.importorskip("pyte")
    pytest.importorskip("rich")
    child = pexpect.spawn(sys.executable, ["-m", "dsh", "sessions", "show", evil_session,
                                           "--profile", "headless"],
                          env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "100",
                               "LINES": "200"},
                          dimensions=(200, 100), encoding="utf-8", timeout=60)
    output = child.read()
    child.close()
    assert child.exitstatus == 0, output
    no_raw(output)
    assert ESC + "[" in output  # rich's own styling is there
    screen = pyte.Screen(100, 200)
    pyte.Stream(screen).feed(output)
    shown = "\n".join(line.rstrip() for line in screen.display)
    assert "Result" in shown and "## Result" not in shown  # the heading was rendered
    assert "^[]52;c;cHduZWQ=^G" in shown and "pwned" in shown
    assert screen.title == ""  # no OSC 0 obeyed


def test_an_unknown_id_is_one_line_and_exit_2(run_dsh: Any) -> None:
    for command in (("show", "nope"), ("rm", "--yes", "nope")):
        done = run_dsh("sessions", *command, "--profile", "headless")
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            "dsh: error: no session 'nope' in this store (dsh sessions list shows them)"]
        as_json = run_dsh("sessions", *command, "--profile", "headless", "--json")
        assert as_json.returncode == 2 and as_json.stderr == ""
        document = json.loads(as_json.stdout)
        assert document["ok"] is False and document["error"]["code"] == 2
        assert "no session 'nope'" in document["error"]["message"]


def test_rm_asks_on_a_terminal_refuses_without_one_and_removes_everything(
        run_dsh: Any, tmp_path: Path, evil_session: str) -> None:
    pexpect = pytest.importorskip("pexpect")
    refused = run_dsh("sessions", "rm", evil_session, "--profile", "headless")
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    for answer, kept in (("n", True), ("y", False)):
        child = pexpect.spawn(sys.executable, ["-m", "dsh", "sessions", "rm", evil_session,
                                               "--profile", "headless"],
                              encoding="utf-8", timeout=60)
        child.expect(r"\[y/N\] ")
        assert ESC + "]52" not in child.before  # the title in the question is visible
        child.sendline(answer)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        listed = run_dsh("sessions", "list", "--profile", "headless", "--json")
        ids = [e["sessionId"] for e in json.loads(listed.stdout)["data"]["sessions"]]
        assert (evil_session in ids) is kept
    db = sqlite3.connect(Path(os.environ["DSH_HOME"]) / "sessions.db")
    try:
        for table, key in (("sessions", "id"), ("events", "session_id"),
                           ("session_leases", "session_id")):
            assert db.execute(f"SELECT count(*) FROM {table} WHERE {key} = ?",
                              (evil_session,)).fetchone()[0] == 0
    finally:
        db.close()
    assert run_dsh("sessions", "show", evil_session, "--profile", "headless").returncode == 2


def test_rm_refuses_a_session_a_running_runtime_holds(run_dsh: Any, tmp_path: Path) -> None:
    hold = tmp_path / "hold.yml"
    hold.write_text("- {id: sessions, merge: {config: {idle_release_s: 600}}}\n")
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, hold], cwd=Path.cwd())
    try:
        proc.initialize(Path.cwd(), provider="scripted", model="scripted")
        made = proc.call("session/new", {})["result"]["sessionId"]
        done = run_dsh("sessions", "rm", "--yes", made, "--profile", "sdk")
        assert done.returncode == 1, done.stderr
        assert f"held by a running runtime (pid {proc.proc.pid})" in done.stderr
        listed = run_dsh("sessions", "list", "--profile", "sdk")
        assert f"pid {proc.proc.pid}" in listed.stdout
        shown = run_dsh("sessions", "show", made, "--profile", "sdk")  # reading may
        assert shown.returncode == 0 and f"running: pid {proc.proc.pid}" in shown.stdout
        proc.close_stdin()
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.finish()
    gone = run_dsh("sessions", "rm", "--yes", made, "--profile", "sdk")
    assert gone.returncode == 0 and gone.stdout == f"removed {made}\n"


def test_continue_runs_in_this_workspaces_last_session(run_dsh: Any, tmp_path: Path) -> None:
    patch = script_patch(tmp_path, [{"text": "ok"}])
    nothing = headless(run_dsh, patch, "--continue", "more")
    assert nothing.returncode == 2
    assert len(nothing.stderr.strip().splitlines()) == 1
    assert "no session to continue in" in nothing.stderr
    first = headless(run_dsh, patch, "one")
    other_place = tmp_path / "elsewhere"
    other_place.mkdir()
    headless(run_dsh, patch, "not here", cwd=other_place)
    again = headless(run_dsh, patch, "--continue", "two")
    assert again.returncode == 0, again.stderr
    assert session_of(again.stderr) == session_of(first.stderr)
    listed = json.loads(run_dsh("sessions", "list", "--profile", "headless", "--here",
                                "--json").stdout)["data"]["sessions"]
    assert [(e["sessionId"], e["turns"]) for e in listed] == [(session_of(first.stderr), 2)]
    both = headless(run_dsh, patch, "--continue", "--session-id", "x", "three")
    assert both.returncode == 2 and "give one" in both.stderr


def test_an_id_may_be_given_by_its_start_when_that_names_one_session(
        run_dsh: Any, tmp_path: Path) -> None:
    done = headless(run_dsh, script_patch(tmp_path, [{"text": "ok"}]), "Only task")
    assert done.returncode == 0, done.stderr
    made = session_of(done.stderr)
    exported = run_dsh("sessions", "export", "--profile", "headless", "-o",
                       str(tmp_path / "one.jsonl"))
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.startswith("exported 1 session (")  # one, not "1 sessions"
    # Three copies whose ids share their first four characters, two their first eight,
    # as three exports joined end to end (which import as one).
    text = (tmp_path / "one.jsonl").read_text()
    twins = ("cafe1111-0000-4000-8000-000000000001", "cafe1111-0000-4000-8000-000000000002",
             "cafe2222-0000-4000-8000-000000000003")
    (tmp_path / "twins.jsonl").write_text("".join(text.replace(made, twin) for twin in twins))
    imported = run_dsh("sessions", "import", "--profile", "headless",
                       str(tmp_path / "twins.jsonl"))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("imported 3 sessions (")

    shown = run_dsh("sessions", "show", "cafe2", "--profile", "headless", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["data"]["session"]["sessionId"] == twins[2]
    assert "Only task" in run_dsh("sessions", "show", made[:8], "--profile",
                                  "headless").stdout
    for given, said in (("cafe1111", "'cafe1111' begins 2 session ids"),
                        ("cafe", "'cafe' begins 3 session ids"),
                        ("caf", "no session 'caf' in this store")):
        refused = run_dsh("sessions", "show", given, "--profile", "headless")
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1 and said in refused.stderr
    # headless --session-id reads an id the same way.
    more = headless(run_dsh, script_patch(tmp_path, [{"text": "again"}], "more"),
                    "--session-id", made[:6], "One more")
    assert more.returncode == 0, more.stderr
    assert session_of(more.stderr) == made and more.stdout.strip() == "again"
    unclear = headless(run_dsh, script_patch(tmp_path, [{"text": "no"}], "no"),
                       "--session-id", "cafe1111", "Which one")
    assert unclear.returncode == 2
    said = unclear.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("dsh: error: 'cafe1111' begins 2 session ids (")
    assert said[0].endswith("): give more of it") and all(t in said[0] for t in twins[:2])
    ambiguous = run_dsh("sessions", "rm", "--yes", "cafe", "--profile", "headless")
    assert ambiguous.returncode == 2 and "give more of it" in ambiguous.stderr
    # The same session named twice (whole and by its start) is removed once.
    gone = run_dsh("sessions", "rm", "--yes", "cafe2", twins[2], "--profile", "headless")
    assert gone.returncode == 0 and gone.stdout == f"removed {twins[2]}\n"
    listed = json.loads(run_dsh("sessions", "list", "--profile", "headless", "--json").stdout)
    assert sorted(e["sessionId"] for e in listed["data"]["sessions"]) == sorted(
        [made, *twins[:2]])
