"""The headless runner on a terminal and on a pipe, as a person and a program see it.

Terminal runs spawn the real ``dsh --profile headless`` on a pseudo-terminal (pexpect),
80x24 like a fresh terminal window, and read what a terminal would show off an emulated
screen (pyte): the spinner while the scripted model "thinks", the answer streamed, the
usage line. Pipe runs pin today's contract: stdout is the answer byte for byte, however
hostile its bytes, and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pexpect = pytest.importorskip("pexpect")
pyte = pytest.importorskip("pyte")

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = ROOT / "examples" / "offline" / "patch.yml"
FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SGR = re.compile(rb"\x1b\[[0-9;]*m")
ESC = "\x1b"
# What a hostile file, tool or model could print: a clipboard write, a title, a clear.
OSC52 = f"{ESC}]52;c;cm0gLXJmIH4K\x07"
OSC0 = f"{ESC}]0;pwned\x07"
CSI2J = f"{ESC}[2J{ESC}[H"
HOSTILE = f"{OSC52}{OSC0}{CSI2J}"


def scripted(tmp_path: Path, responses: list[dict[str, Any]], chunk_size: int = 16) -> Path:
    """A patch making the scripted model answer ``responses`` (JSON is YAML)."""
    script = tmp_path / "script.yml"
    script.write_text(json.dumps(responses))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([
        {"insert": [{"id": "llm-scripted", "name": "llm-scripted",
                     "config": {"script": str(script), "chunk_size": chunk_size}}]},
        {"id": "agent", "merge": {"config": {"default_route": "scripted"}}}]))
    return patch


def terminal_env(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    environ.update({"TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24", **extra})
    return environ


def spawn(patch: Path, *args: str, env: dict[str, str] | None = None,
          size: tuple[int, int] = (24, 80)) -> Any:
    """``dsh --profile headless --patch PATCH ARGS`` on a new pseudo-terminal."""
    argv = ["-m", "dsh", "--profile", "headless", "--patch", str(patch), *args]
    return pexpect.spawn(sys.executable, argv, env=env or terminal_env(), dimensions=size,
                         timeout=60, cwd=os.getcwd())


def finish(child: Any) -> bytes:
    """Everything the terminal got until the process ended; its exit status checked."""
    child.expect(pexpect.EOF)
    child.close()
    return bytes(child.before)


def screen_of(raw: bytes, size: tuple[int, int] = (24, 80)) -> Any:
    screen = pyte.Screen(size[1], size[0])
    pyte.ByteStream(screen).feed(raw)
    return screen


def shown(screen: Any) -> str:
    return "\n".join(line.rstrip() for line in screen.display).strip()


THINKING = [
    {"reasoning": "The user wants to know where they are. I will ask the tool.",
     "text": "Let me look.", "delay_ms": 1200,
     "tool_calls": [{"name": "working_directory", "arguments": {}}]},
    {"reasoning": "Now I know.", "delay_ms": 600, "chunk_delay_ms": 250,
     "text": "Streaming answer: alpha bravo charlie delta echo foxtrot golf hotel omega."},
]


def test_spinner_streamed_answer_and_usage_on_a_terminal(tmp_path: Path) -> None:
    patch = scripted(tmp_path, THINKING, chunk_size=8)
    child = spawn(patch, "Where am I?")
    child.expect("Streaming")
    seen = bytes(child.before) + bytes(child.after)
    # Mid-answer, with the rest still to come, the turn has not ended yet: the answer is
    # being written to the terminal as it arrives, not once at the end.
    assert b"omega" not in seen + bytes(child.buffer) and b" steps " not in seen
    assert child.isalive()
    raw = seen + finish(child)
    assert child.exitstatus == 0, raw.decode(errors="replace")
    text = raw.decode()
    frames = {char for char in text if char in FRAMES}
    assert len(frames) >= 3, frames  # the spinner turned while the model thought
    assert re.search(r"thinking \d+\.\ds", text)
    assert "The user wants to know where they are" in text  # the reasoning, one line
    assert SGR.search(raw)  # coloured: a terminal, no NO_COLOR
    screen = shown(screen_of(raw))
    lines = screen.splitlines()
    assert lines[0].startswith("dsh: session ")
    assert "Let me look." in lines  # the remark, streamed like the answer
    assert "→ working_directory {}" in lines
    assert any(line.startswith("← working_directory: Current working directory:")
               for line in lines)
    assert ("Streaming answer: alpha bravo charlie delta echo foxtrot golf hotel omega."
            in lines)
    assert re.fullmatch(r"scripted · 2 steps · ~[\d,]+ in · ~[\d,]+ out · cost unknown · "
                        r"\d+\.\ds", lines[-1]), lines[-1]
    # The status line is gone: no spinner frame is left on the screen.
    assert not any(char in FRAMES for char in screen)


@pytest.mark.parametrize("how", ["NO_COLOR", "--color never"])
def test_no_colour_code_with_no_color(tmp_path: Path, how: str) -> None:
    patch = scripted(tmp_path, [*THINKING[:1], {"text": "plain answer", "delay_ms": 300}])
    if how == "NO_COLOR":
        child = spawn(patch, "Where am I?", env=terminal_env(NO_COLOR="1"))
    else:
        child = spawn(patch, "--color", "never", "Where am I?")
    raw = finish(child)
    assert child.exitstatus == 0
    assert not SGR.search(raw), SGR.findall(raw)[:5]
    text = raw.decode()
    assert any(char in FRAMES for char in text)  # still a spinner: only colour is off
    assert "plain answer" in shown(screen_of(raw))


def hostile_run(tmp_path: Path) -> list[dict[str, Any]]:
    """A model that reads a hostile file, runs a hostile command and answers hostilely."""
    (Path.cwd() / "evil.txt").write_text(f"before{HOSTILE}after\n")
    return [
        {"text": f"Reading.{OSC0}",
         "tool_calls": [{"name": "read_file", "arguments": {"path": "evil.txt"}},
                        {"name": "bash", "arguments": {
                            "command": r"printf 'x\033]52;c;cm0gLXJmIH4K\007\033]0;pwned\007"
                                       r"\033[2Jy\n'"}}]},
        {"reasoning": f"thinking {OSC52}", "quote": {"file": {"call": "call_1"}},
         "text": f"The file says: {{file}}\nAnd I say: {HOSTILE}done."},
    ]


def test_hostile_bytes_reach_no_terminal_raw(tmp_path: Path) -> None:
    patch = scripted(tmp_path, hostile_run(tmp_path))
    child = spawn(patch, "--approval", "auto", "read evil.txt")
    raw = finish(child)
    assert child.exitstatus == 0, raw.decode(errors="replace")
    for sequence in (OSC52, OSC0, CSI2J, f"{ESC}]52", f"{ESC}]0;", f"{ESC}[2J", "\x07"):
        assert sequence.encode() not in raw, sequence
    screen = screen_of(raw)
    assert screen.title == ""  # no title was set
    text = shown(screen)
    assert text.startswith("dsh: session ")  # nothing cleared the screen
    assert "^[]52;c;cm0gLXJmIH4K^G" in text  # shown, not obeyed
    assert "And I say: ^[]52;c;cm0gLXJmIH4K^G^[]0;pwned^G^[[2J^[[Hdone." in text
    assert "The file says: " in text and "before^[]52;c;" in text
    assert "← bash: " in text


def test_stdout_to_a_file_gets_the_exact_answer_while_the_terminal_watches(
        tmp_path: Path) -> None:
    patch = scripted(tmp_path, hostile_run(tmp_path))
    answer = tmp_path / "answer.txt"
    command = (f"{sys.executable} -m dsh --profile headless --patch {patch} --approval auto "
               f"'read evil.txt' > {answer}")
    child = pexpect.spawn("/bin/sh", ["-c", command], env=terminal_env(),
                          dimensions=(24, 80), timeout=60, cwd=os.getcwd())
    raw = finish(child)
    assert child.exitstatus == 0, raw.decode(errors="replace")
    # The file is read by programs: the answer as written, escapes and all.
    file_text = (Path.cwd() / "evil.txt").read_text().strip()
    expected = f"The file says: 1\t{file_text}\nAnd I say: {HOSTILE}done.\n"
    assert answer.read_bytes() == expected.encode()
    # The terminal got the live view, and none of the answer's bytes raw.
    assert b"\x1b]52" not in raw and b"\x1b[2J" not in raw
    text = shown(screen_of(raw))
    assert "· Reading.^[]0;pwned^G" in text  # remarks as lines: stdout is not streamed
    assert re.search(r"scripted · 2 steps · .* cost unknown · \d+\.\ds$", text)


PIPED = [{"text": "Reading.", "tool_calls": [{"name": "working_directory"}]},
         {"text": f"## Answer\r\n\n\tcafé 日本 {HOSTILE}\x00\x7f\u202e end\n\n\n"}]


def test_piped_stdout_is_the_answer_byte_for_byte(tmp_path: Path) -> None:
    """Today's contract on a pipe: the last message's text, trailing newlines made one;
    with --color always, stderr is coloured and stdout still exactly that."""
    patch = scripted(tmp_path, PIPED)
    expected = PIPED[-1]["text"].rstrip("\n").encode() + b"\n"
    argv = [sys.executable, "-m", "dsh", "--profile", "headless", "--patch", str(patch)]
    plain = subprocess.run([*argv, "go"], capture_output=True, timeout=60, check=False)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == expected
    assert not SGR.search(plain.stderr)
    assert plain.stderr.decode().splitlines()[1:] == [
        "· Reading.", "→ working_directory {}",
        f'← working_directory: Current working directory: "{Path.cwd()}"']
    colored = subprocess.run([*argv, "--color", "always", "go"], capture_output=True,
                             timeout=60, check=False)
    assert colored.returncode == 0, colored.stderr
    assert colored.stdout == expected
    assert SGR.search(colored.stderr)
    assert SGR.sub(b"", colored.stderr).splitlines()[1:] == \
        plain.stderr.splitlines()[1:]
    assert b"\r" not in colored.stderr  # no spinner on a pipe


def test_wide_terminal_and_a_long_reasoning_line_never_wrap(tmp_path: Path) -> None:
    long = "wide " * 200 + "日本語の推論 " * 30
    patch = scripted(tmp_path, [{"reasoning": long, "delay_ms": 300, "chunk_delay_ms": 20,
                                 "text": "ok"}], chunk_size=64)
    for size in ((24, 80), (50, 200)):
        child = spawn(patch, "think", size=size)
        raw = finish(child)
        assert child.exitstatus == 0
        screen = screen_of(raw, size)
        text = [line.rstrip() for line in screen.display if line.strip()]
        # Only the session line, the answer and the usage line stay: every redraw of the
        # status line replaced the one before, none spilled onto a second line.
        assert len(text) == 3, text
        assert text[1] == "ok"
