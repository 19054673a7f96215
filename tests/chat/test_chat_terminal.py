"""``dsh chat`` in a real pseudo-terminal, read through a terminal emulator.

Each test starts the real ``dsh`` (``python -m dsh --patch P chat``) under pexpect, with
the scripted model, and reads what a person would see from pyte's screen: the rendered
answer, the approval and its keys, the status line; and, from every byte the chat wrote,
what must never reach a terminal (a clipboard write, a title change).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("textual", reason="the chat extra (pip install 'dsh-harness[chat]')")

from chatkit import Terminal, requests, restored, scripted_patch
from proctable import pids_with

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pexpect ptys and /proc")

CTRL_C, CTRL_D = "\x03", "\x04"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def chat(tmp_path: Path, work: Path, patch: Path, *extra: str, cols: int = 80,
         rows: int = 24, env: dict[str, str] | None = None) -> Terminal:
    environ = {"DSH_HOME": str(tmp_path / "home"), **(env or {})}
    return Terminal(["--patch", str(patch), "chat", *extra], cwd=work, env=environ,
                    cols=cols, rows=rows)


@pytest.fixture
def terminals() -> list[Terminal]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


MARKDOWN = ("# Result\n\nThe *plan*, as a table:\n\n| step | owner |\n|---|---|\n"
            "| build | alice |\n| ship | bob |\n\n```python\ndef ship(version):\n"
            "    return f\"v{version}\"\n```\n\n- one\n- two\n")


def test_a_streamed_markdown_answer_is_rendered(tmp_path: Path, work: Path,
                                                terminals: list[Terminal]) -> None:
    patch, _ = scripted_patch(tmp_path, [{"reasoning": "Tables read best here.",
                                          "text": MARKDOWN}])
    t = chat(tmp_path, work, patch, cols=90, rows=40)
    terminals.append(t)
    t.wait_for("/help")
    t.say("plan the release")
    shown = t.wait_for("ship(version)")
    shown = t.settle(0.5)
    assert "Result" in shown and "# Result" not in shown  # a heading, not its markup
    assert "┌" in shown and "│ build" in shown and "└" in shown  # a table with borders
    assert "| step |" not in shown
    assert "• one" in shown or "● one" in shown  # a list, not "- one"
    code = t.cells("def ship")
    colours = {cell.fg for cell in code if cell.data.strip()}
    assert len(colours) >= 2 or colours != {"default"}  # highlighted, not plain
    assert "thought" in shown  # the reasoning, folded to one dim line
    assert "Tables read best here" not in shown
    t.key(CTRL_D)
    assert t.exit_code() == 0
    assert restored(bytes(t.raw))


def test_approvals_by_key_allow_always_and_deny(tmp_path: Path, work: Path,
                                                terminals: list[Terminal]) -> None:
    def write(name: str) -> dict:
        return {"tool_calls": [{"name": "write_file",
                                "arguments": {"path": name, "content": f"{name}\n"}}]}

    patch, _ = scripted_patch(tmp_path, [
        write("a.txt"), write("b.txt"), write("c.txt"),
        {"tool_calls": [{"name": "bash", "arguments": {"command": "touch d.txt"}}]},
        {"text": "all asked"}])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.say("write some files")
    t.wait_for("Allow write_file?")
    assert "path: a.txt" in t.screen() and "allow once" in t.screen()
    t.key("a")
    t.wait_for("path: b.txt")
    t.key("A")  # allow always: c.txt is not asked about
    t.wait_for("Allow bash?")
    assert "touch d.txt" in t.screen()
    assert (work / "c.txt").exists()
    t.key("d")
    t.wait_for("all asked")
    assert [p.name for p in sorted(work.iterdir())] == ["a.txt", "b.txt", "c.txt"]
    shown = t.settle(0.3)
    assert "allowed once" in shown or "allowed for this session" in shown
    t.key(CTRL_D)
    assert t.exit_code() == 0


def test_deny_with_a_note_reaches_the_model(tmp_path: Path, work: Path,
                                           terminals: list[Terminal]) -> None:
    patch, record = scripted_patch(tmp_path, [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "x.py", "content": "x"}}]},
        {"text": "noted"}])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.say("make x.py")
    t.wait_for("Allow write_file?")
    t.key("n")
    t.wait_for("why not")
    t.type("put it in lib/ instead")
    t.enter()
    t.wait_for("noted")
    sent = requests(record)[1]["messages"][-1]
    assert "put it in lib/ instead" in sent["content"][0]["text"]
    assert not (work / "x.py").exists()


def test_ctrl_c_cancels_the_turn_and_its_process_and_the_chat_stays(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    token = f"dsh-chat-cancel-{os.getpid()}"
    patch, _ = scripted_patch(tmp_path, [
        {"tool_calls": [{"name": "bash", "arguments": {
            "command": f"sleep 300 # {token}"}}]},
        {"text": "still here"}], policy="workspace")
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.say("wait a long time")
    deadline = time.monotonic() + 60
    while not pids_with(token) and time.monotonic() < deadline:
        t.pump(0.1)
    assert pids_with(token), "the command never started"
    t.key(CTRL_C)
    t.wait_for("cancelled")
    deadline = time.monotonic() + 30
    while pids_with(token) and time.monotonic() < deadline:
        t.pump(0.1)
    assert not pids_with(token), "the tool's process outlived the cancel"
    t.say("are you there?")
    t.wait_for("still here")  # the chat stays, and the session goes on


def test_sessions_then_resume_and_continue(tmp_path: Path, work: Path,
                                          terminals: list[Terminal]) -> None:
    patch, _ = scripted_patch(tmp_path, [{"text": "the answer is 42"}, {"text": "again"}])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.say("what is the answer to the riddle")
    t.wait_for("the answer is 42")
    t.say("/new")
    t.wait_for("a new session starts")
    assert "the answer is 42" not in t.screen()
    t.say("/sessions")
    t.wait_for("Sessions (newest first)")
    assert "what is the answer to the riddle" in t.screen()  # its title
    assert "  1 turn " in t.screen()
    t.enter()
    t.wait_for("continuing session")
    t.wait_for("the answer is 42")
    t.key(CTRL_D)
    assert t.exit_code() == 0
    said = t.raw.decode("utf-8", "replace")
    session = re.search(r"dsh chat --resume ([0-9a-f-]{36})", said).group(1)
    again = chat(tmp_path, work, patch, "--continue")
    terminals.append(again)
    again.wait_for("continuing session")
    shown = again.wait_for("the answer is 42")
    assert "what is the answer" in shown
    again.say("/new")
    again.wait_for("a new session starts")
    again.say(f"/resume {session[:8]}")  # its start names it, as in dsh sessions show
    again.wait_for(f"continuing session {session}")
    again.wait_for("the answer is 42")


def test_at_file_attaches_and_a_multi_line_paste_arrives_whole(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    (work / "notes.md").write_text("alpha\nbeta\n")
    patch, record = scripted_patch(tmp_path, [{"text": "read it"}, {"text": "got the paste"},
                                              {"text": "got the big one"}])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.type("summarise @no")
    t.wait_for("@notes.md")  # completion offered
    t.key("\t")
    t.pump(0.2)
    t.enter()
    t.wait_for("read it")
    assert "+ notes.md (11 bytes)" in t.screen()
    blocks = requests(record)[0]["messages"]
    user = next(m for m in blocks if m["role"] == "user" and m.get("source", {}).get(
        "kind") == "user")
    assert "Attached file notes.md:\n```\nalpha\nbeta\n" in user["content"][1]["text"]
    t.paste("first line\nsecond line\nthird line")
    t.pump(0.5)
    assert len(requests(record)) == 1  # a paste never sends
    t.enter()
    t.wait_for("got the paste")
    sent = [m for m in requests(record)[1]["messages"] if m.get("source", {}).get(
        "kind") == "user"][-1]
    assert sent["content"][0]["text"] == "first line\nsecond line\nthird line"
    big = "\n".join(f"line {i}" for i in range(5000))
    t.paste(big)
    t.pump(1.0)
    t.enter()
    t.wait_for("got the big one", timeout=120)
    sent = [m for m in requests(record)[2]["messages"] if m.get("source", {}).get(
        "kind") == "user"][-1]
    assert sent["content"][0]["text"] == big


def test_escape_sequences_in_an_answer_reach_no_terminal(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    hostile = ("before\x1b[2J\x1b[H after clear \x1b]0;pwned-title\x07 "
               "\x1b]52;c;aGFja2Vk\x07 and &#27;]52;c;x&#7; in markdown")
    patch, _ = scripted_patch(tmp_path, [{"text": "first answer stays"}, {"text": hostile}])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.say("one")
    t.wait_for("first answer stays")
    t.say("two")
    shown = t.wait_for("after clear")
    shown = t.settle(0.5)
    assert "first answer stays" in shown  # nothing cleared the screen
    assert "^[[2J" in shown and "^[]52;c;aGFja2Vk^G" in shown  # shown, not obeyed
    raw = bytes(t.raw)
    assert b"\x1b]52" not in raw  # no clipboard write ever reached the terminal
    assert b"pwned-title\x07" not in raw and b"\x1b]0;pwned" not in raw
    assert b"\x1b]2;pwned" not in raw


def test_no_key_for_the_route_says_how_and_leaves_no_session(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    patch = tmp_path / "nothing.yml"
    patch.write_text("[]\n")
    t = chat(tmp_path, work, patch, env={"DEEPSEEK_API_KEY": ""})
    terminals.append(t)
    t.wait_for("/help")
    t.say("hello")
    shown = t.wait_for("no API key")
    assert "export DEEPSEEK_API_KEY=" in shown.replace("\n", "")
    t.key(CTRL_D)
    assert t.exit_code() == 0
    db = tmp_path / "home" / "sessions.db"
    count = sqlite3.connect(db).execute("SELECT count(*) FROM sessions").fetchone()[0] \
        if db.exists() else 0
    assert count == 0


def test_the_runtime_killed_under_the_chat_is_said_and_resumable(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    # A new runtime's scripted model starts its script again: one answer serves both.
    patch, record = scripted_patch(tmp_path, [{"text": "answered"}])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.say("hello")
    t.wait_for("answered")
    runtimes = [p for p in pids_with(str(patch)) if p != t.child.pid]
    assert runtimes, "no runtime found"
    for pid in runtimes:
        os.kill(pid, signal.SIGKILL)
    shown = t.wait_for("the runtime stopped")
    assert "--resume" in shown.replace("\n", " ")
    t.say("still there?")
    t.wait_for(lambda shown: shown.count("answered") == 2)
    # the new runtime continued the same session: the model saw the whole conversation
    sent = [m for m in requests(record)[-1]["messages"] if m["role"] in ("user", "assistant")
            and m.get("source", {}).get("kind") in ("user", "model")]
    said = ["".join(b.get("text", "") for b in m["content"]) for m in sent]
    assert said == ["hello", "answered", "still there?"]


def test_a_huge_answer_and_a_resize_while_it_streams(tmp_path: Path, work: Path,
                                                    terminals: list[Terminal]) -> None:
    body = "".join(f"paragraph {i}: " + "word " * 30 + "\n\n" for i in range(6000))
    answer = body[:1_000_000] + "\n\nTHE END\n"
    patch, _ = scripted_patch(tmp_path, [{"text": answer}, {"text": "small"}],
                              chunk_size=4096, context_window=1_000_000)
    t = chat(tmp_path, work, patch, cols=100, rows=30)
    terminals.append(t)
    t.wait_for("/help")
    t.say("write a lot")
    t.wait_for("paragraph")
    t.resize(60, 20)  # mid-stream
    t.pump(0.5)
    t.resize(120, 40)
    t.wait_for("THE END", timeout=180)
    t.say("and now?")  # still answering keys
    t.wait_for("small", timeout=60)


def test_a_provider_error_mid_stream_is_shown_with_the_turn_ended(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
    from deepseek_standin import DeepSeekStandIn

    cut = {"content": "half of an answer " * 20, "cut_after": 4}
    with DeepSeekStandIn(script=[cut, cut]) as server:
        patch = tmp_path / "route.yml"
        patch.write_text("[]\n")
        t = chat(tmp_path, work, patch, env={"DEEPSEEK_API_KEY": server.api_key,
                                             "DEEPSEEK_BASE_URL": server.base_url})
        terminals.append(t)
        t.wait_for("/help")
        t.say("hello")
        shown = t.wait_for("✗")
        assert "stream" in shown.lower()
        t.key(CTRL_D)
        assert t.exit_code() == 0


def test_ended_by_a_signal_the_terminal_is_restored_and_the_session_kept(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    patch, _ = scripted_patch(tmp_path, [{"text": "kept answer"}])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.say("remember this")
    t.wait_for("kept answer")
    runtimes = [p for p in pids_with(str(patch)) if p != t.child.pid]
    os.kill(t.child.pid, signal.SIGTERM)
    assert t.exit_code() == 128 + signal.SIGTERM
    assert restored(bytes(t.raw))
    assert b"dsh chat --resume" in bytes(t.raw)
    deadline = time.monotonic() + 30
    while any(p in pids_with(str(patch)) for p in runtimes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(p in pids_with(str(patch)) for p in runtimes)  # no runtime left behind
    stored = sqlite3.connect(tmp_path / "home" / "sessions.db").execute(
        "SELECT title FROM sessions").fetchall()
    assert stored == [("remember this",)]


def test_no_color_means_no_colour(tmp_path: Path, work: Path,
                                  terminals: list[Terminal]) -> None:
    patch, _ = scripted_patch(tmp_path, [{"text": MARKDOWN}])
    t = chat(tmp_path, work, patch, env={"NO_COLOR": "1"})
    terminals.append(t)
    t.wait_for("/help")
    t.say("plan")
    t.wait_for("│ build")
    t.key(CTRL_D)
    assert t.exit_code() == 0
    colours = []
    for params in re.findall(rb"\x1b\[([0-9;:]*)m", bytes(t.raw)):
        codes = [int(p) for p in re.split(rb"[;:]", params) if p]
        colours += [c for c in codes if 30 <= c <= 38 or 40 <= c <= 48 or 90 <= c <= 107]
    assert colours == []


def test_ctrl_c_twice_on_an_empty_prompt_quits(tmp_path: Path, work: Path,
                                               terminals: list[Terminal]) -> None:
    patch, _ = scripted_patch(tmp_path, [])
    t = chat(tmp_path, work, patch)
    terminals.append(t)
    t.wait_for("/help")
    t.type("draft")
    t.key(CTRL_C)  # clears the editor
    t.pump(0.3)
    assert "draft" not in t.screen()
    t.key(CTRL_C)  # the first press on an empty editor warns ...
    t.pump(0.1)
    t.key(CTRL_C)  # ... the second, right behind it, quits
    assert t.exit_code() == 0
    assert b"again to quit" in bytes(t.raw)
    assert restored(bytes(t.raw))


def test_an_edit_is_shown_as_the_tools_own_diff_with_its_context(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    (work / "app.py").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    patch, _ = scripted_patch(tmp_path, [
        {"tool_calls": [{"name": "edit_file", "arguments": {
            "path": "app.py", "old_string": "line 5\n", "new_string": "LINE FIVE\n"}}]},
        {"text": "edited it"}], policy="workspace")
    t = chat(tmp_path, work, patch, rows=40)
    terminals.append(t)
    t.wait_for("/help")
    t.say("change line 5")
    # The tool's data.diff: the hunk header and the unchanged lines around the change,
    # which a diff made from the call's arguments cannot have.
    shown = t.wait_for(lambda s: "edited it" in s and "@@ -2,7 +2,7 @@" in s)
    rows = shown.splitlines()
    hunk = next(i for i, row in enumerate(rows) if "@@ -2,7 +2,7 @@" in row)
    body = [row.strip() for row in rows[hunk + 1:hunk + 9]]
    assert body == ["line 2", "line 3", "line 4", "-line 5", "+LINE FIVE", "line 6",
                    "line 7", "line 8"]
    assert "+1 -1" in shown  # the call's line counts the diff's lines
    assert t.cells("+LINE FIVE")[1].fg != t.cells("line 3")[0].fg  # coloured by line
    t.say("/diff")  # the session's changes: the same diff, from session/changes
    shown = t.wait_for("1 files changed")
    assert shown.count("@@ -2,7 +2,7 @@") == 2 and "edit_file app.py" in shown


def _session_of(home: Path) -> str:
    [(session_id,)] = sqlite3.connect(home / "sessions.db").execute(
        "SELECT id FROM sessions").fetchall()
    return session_id


def _given_back(home: Path, session_id: str, t: Terminal) -> None:
    """Pump the chat until nobody leases ``session_id`` (bounded, never timed)."""
    deadline = time.monotonic() + 60
    while sqlite3.connect(home / "sessions.db").execute(
            "SELECT 1 FROM session_leases WHERE session_id = ?", (session_id,)).fetchone():
        assert time.monotonic() < deadline, "the session's lease was never given back"
        t.pump(0.05)


def _logged(home: Path, session_id: str, kind: str) -> list[dict]:
    rows = sqlite3.connect(home / "sessions.db").execute(
        "SELECT body FROM events WHERE session_id = ? AND type = ? ORDER BY seq",
        (session_id, kind)).fetchall()
    return [json.loads(body)["data"] for (body,) in rows]


def test_commands_on_a_session_given_back_work_and_another_runtime_can_continue_it(
        tmp_path: Path, work: Path, terminals: list[Terminal]) -> None:
    # Each runtime's scripted model starts its script again (per session): the chat's
    # runtime answers twice, the terminal's once.
    patch, _ = scripted_patch(tmp_path, [{"text": "noted"}, {"text": "noted"}],
                              idle_release_s=0.2)
    home = tmp_path / "home"
    t = chat(tmp_path, work, patch, rows=40)
    terminals.append(t)
    t.wait_for("/help")
    t.say("first, in the chat")
    t.wait_for("noted")
    session_id = _session_of(home)
    # The runtime gave the idle session's lease back: each command takes it first.
    _given_back(home, session_id, t)
    t.say("/approval deny-mutating")
    t.wait_for("approvals: deny-mutating from the next tool call")
    _given_back(home, session_id, t)
    t.say("!echo from-my-shell")
    t.wait_for("[Command finished with exit code 0]")
    assert _logged(home, session_id, "session/settings")[-1]["policy"] == "deny-mutating"
    assert [d["command"] for d in _logged(home, session_id, "user/shell")] == [
        "echo from-my-shell"]
    _given_back(home, session_id, t)
    # Another runtime continues it (a terminal's headless run): the chat is told ...
    done = subprocess.run(
        [sys.executable, "-m", "dsh", "--patch", str(patch), "--profile", "headless",
         "--session-id", session_id, "second, from a terminal"],
        cwd=work, env={**os.environ, "DSH_HOME": str(home)}, capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    t.wait_for("continued in another runtime")
    # ... and its next message takes the session back, with what was said there.
    t.say("third, back in the chat")
    shown = t.wait_for(lambda s: "continuing session" in s and s.count("noted") >= 3)
    assert "second, from a terminal" in shown
    prompts = [d["content"][0]["text"] for d in _logged(home, session_id, "user/message")
               if d["source"]["kind"] == "user"]
    assert prompts == ["first, in the chat", "second, from a terminal",
                       "third, back in the chat"]
