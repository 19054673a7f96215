"""The headless runner as a real process: ``dsh --profile headless`` with the scripted model.

Every test spawns the real launcher (``python -m dsh``) over real pipes, with the key-free
offline example (``examples/offline``) or a small script written to the test's tmp dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = ROOT / "examples" / "offline" / "patch.yml"
NO_PROJECT = "There is no `pyproject.toml` here to tell me what the project is."
WORKSPACE_NOTE = ("This directory is the session's workspace root: my tools reach files here "
                  "freely, and anything outside it only with your approval.")


def offline_answer(cwd: Path, project: str = NO_PROJECT) -> str:
    """What the offline script answers in ``cwd`` (it quotes what its tools found)."""
    return f"You are working in `{cwd}`.\n\n{project}\n\n{WORKSPACE_NOTE}"

Run = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")


def headless(run_dsh: Run, *args: str, patch: Path = OFFLINE_PATCH,
             **kwargs: object) -> subprocess.CompletedProcess[str]:
    return run_dsh("--profile", "headless", "--patch", str(patch), *args, **kwargs)


def script_patch(tmp_path: Path, script: str) -> Path:
    """A patch over the offline example pointing the scripted provider at ``script``."""
    path = tmp_path / "script.yml"
    path.write_text(script)
    patch = tmp_path / "patch.yml"
    patch.write_text(
        "- insert:\n"
        "    - id: llm-scripted\n"
        "      name: llm-scripted\n"
        f"      config: {{script: {json.dumps(str(path))}}}\n"
        "- id: agent\n"
        "  merge: {config: {default_route: scripted}}\n"
    )
    return patch


def test_final_answer_on_stdout_progress_on_stderr(run_dsh: Run) -> None:
    proc = headless(run_dsh, "Where", "am", "I", "working?")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == offline_answer(Path.cwd()) + "\n"
    assert "dsh: session " in proc.stderr
    assert "→ working_directory" in proc.stderr
    assert f'← working_directory: Current working directory: "{Path.cwd()}"' in proc.stderr
    assert "You are working in" not in proc.stderr


def test_the_first_run_says_where_and_what_the_project_is(run_dsh: Run) -> None:
    """The README's first command, in a project: every tool call succeeds, and the answer
    quotes where the session works and what the project's own file says it is."""
    (Path.cwd() / "pyproject.toml").write_text(
        '[project]\nname = "tiny-thing"\ndescription = "A tiny thing for tests."\n')
    proc = headless(run_dsh, "Where am I working?")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == offline_answer(Path.cwd(), "The project here is **tiny-thing**; "
                                         "its `pyproject.toml` describes it as "
                                         '"A tiny thing for tests."') + "\n"
    assert "failed" not in proc.stderr and "DENIED" not in proc.stderr
    assert "← read_file: 1 [project] (+2 lines)" in proc.stderr


def test_the_boundary_example_stays_true_to_what_was_approved(run_dsh: Run) -> None:
    """README, "Security": the scripted model lists `..`; refused by default, allowed with
    --approval auto, and its answer says which."""
    boundary = OFFLINE_PATCH.parent / "boundary.yml"
    refused = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch",
                      str(boundary), "What is in the parent directory?")
    assert refused.returncode == 0, refused.stderr
    assert "list_directory failed [DENIED]" in refused.stderr
    assert "It was refused: denied by guardrail 'policy'" in refused.stdout
    assert "You allowed it" not in refused.stdout
    allowed = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch",
                      str(boundary), "--approval", "auto", "What is in the parent directory?")
    assert allowed.returncode == 0, allowed.stderr
    assert "failed" not in allowed.stderr
    assert "You allowed it, and the tool answered: `../ (" in allowed.stdout
    assert "refused" not in allowed.stdout


def test_json_streams_one_event_per_line_ending_with_turn_end(run_dsh: Run) -> None:
    proc = headless(run_dsh, "--json", "Where am I working?")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert len({e["sessionId"] for e in events}) == 1
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    types = [e["type"] for e in events]
    assert types[0] == "agent/inbox/spliced"
    assert "tool/call" in types and "tool/result" in types
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"] == {"kind": "completed"}
    assert proc.stderr == ""


def test_task_from_stdin(run_dsh: Run) -> None:
    proc = headless(run_dsh, "--json", "-", input="Where am I\nworking?\n")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    prompts = [e for e in events if e["type"] == "user/message"
               and e["data"]["source"]["kind"] == "user"]
    assert prompts[0]["data"]["content"] == [{"type": "text", "text": "Where am I\nworking?"}]


def test_no_task_words_reads_a_piped_stdin_and_never_waits_on_a_terminal(
        run_dsh: Run) -> None:
    proc = headless(run_dsh, "--json", input="Where am I working?\n")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    prompts = [e["data"]["content"] for e in events if e["type"] == "user/message"
               and e["data"]["source"]["kind"] == "user"]
    assert prompts == [[{"type": "text", "text": "Where am I working?"}]]
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(sys.executable, ["-m", "dsh", "--profile", "headless", "--patch",
                                           str(OFFLINE_PATCH)],
                          encoding="utf-8", timeout=60, env=dict(os.environ))
    child.expect(pexpect.EOF)  # at once: a terminal is not read for a task nobody named
    child.close()
    assert child.exitstatus == 2
    assert "dsh: error: no task given" in child.before


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        ((), None, "no task given"),  # stdin empty (not a terminal): nothing piped in
        (("-",), "  \n", "the task on stdin is empty"),
        (("-", "more"), None, "cannot be combined"),
        (("--approval", "ask", "task"), None,
         "ask needs an interactive client; use auto or never"),
        (("--approval", "sometimes", "task"), None, "--approval must be auto or never"),
        (("--frobnicate", "task"), None, "unrecognized arguments: --frobnicate"),
        (("--provider", "nowhere", "task"), None, "unknown provider route 'nowhere'"),
        (("--session-id", "no-such-session", "task"), None, "unknown session"),
    ],
)
def test_usage_errors_exit_2(run_dsh: Run, args: tuple[str, ...], stdin: str | None,
                             message: str) -> None:
    proc = headless(run_dsh, *args, input=stdin)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("dsh: error: ")
    assert message in proc.stderr


def test_model_error_exits_1_with_its_message(run_dsh: Run, tmp_path: Path) -> None:
    patch = script_patch(tmp_path, '- error: {message: "the model fell over", code: "boom"}\n')
    proc = headless(run_dsh, "do it", patch=patch)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert "dsh: error: the model fell over (boom)" in proc.stderr


def test_model_error_with_json_ends_with_error_turn_end(run_dsh: Run, tmp_path: Path) -> None:
    patch = script_patch(tmp_path, '- error: {message: "the model fell over", code: "boom"}\n')
    proc = headless(run_dsh, "--json", "do it", patch=patch)
    assert proc.returncode == 1, proc.stderr
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["type"] == "turn/end"
    assert last["data"]["reason"]["kind"] == "error"
    assert "the model fell over" in proc.stderr


def test_max_tokens_exits_1(run_dsh: Run, tmp_path: Path) -> None:
    patch = script_patch(tmp_path, '- {text: "cut", finish: length}\n')
    proc = headless(run_dsh, "do it", patch=patch)
    assert proc.returncode == 1, proc.stderr
    assert "dsh: error: " in proc.stderr


def test_help_exits_0(run_dsh: Run) -> None:
    proc = headless(run_dsh, "-h")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: dsh --profile headless")
    assert "--approval" in proc.stdout and "exit status" in proc.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_cancels_the_turn_and_exits_130(tmp_path: Path) -> None:
    patch = script_patch(tmp_path, '- {text: "thinking for a long time", delay_ms: 60000}\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh", "--profile", "headless", "--patch", str(patch),
         "--json", "go"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ),
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "the runner ended before the turn started"
            if json.loads(line)["type"] == "step/start":
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    last = json.loads(out.splitlines()[-1])
    assert last["type"] == "turn/end"
    assert last["data"]["reason"]["kind"] == "cancelled"
