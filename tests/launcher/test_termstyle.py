"""``dsh.core.termstyle``: when a stream is styled, and that styling is dsh's codes only."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.core.termstyle import RESET, Style, wants_color
from dsh.core.termtext import visible

SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def tty() -> Iterator[int]:
    """A pseudo-terminal's slave fd (what a person's terminal is to dsh)."""
    master, slave = os.openpty()
    yield slave
    os.close(master)
    os.close(slave)


def test_always_and_never_decide_outright(tmp_path: Path, tty: int) -> None:
    with open(tmp_path / "file", "w") as f:
        assert wants_color("always", f.fileno(), {"NO_COLOR": "1"})
    assert not wants_color("never", tty, {})


def test_auto_styles_a_terminal_unless_no_color_or_dumb(tmp_path: Path, tty: int) -> None:
    assert wants_color("auto", tty, {"TERM": "xterm-256color"})
    assert not wants_color("auto", tty, {"NO_COLOR": "1"})
    assert wants_color("auto", tty, {"NO_COLOR": ""})  # set but empty: no opinion
    assert not wants_color("auto", tty, {"TERM": "dumb"})
    read, write = os.pipe()
    try:
        assert not wants_color("auto", write, {})
    finally:
        os.close(read)
        os.close(write)
    assert not wants_color("auto", 987654, {})  # a closed fd is no terminal


def test_paint_wraps_in_codes_and_a_reset() -> None:
    assert Style(True).paint("ok", "bold", "green") == f"\x1b[1;32mok{RESET}"
    assert Style(False).paint("ok", "bold", "green") == "ok"
    assert Style(True).paint("", "red") == ""
    assert Style(True).paint("plain") == "plain"


def test_text_from_elsewhere_keeps_no_code_of_its_own_once_painted() -> None:
    hostile = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b[31mred"
    painted = Style(True).paint(visible(hostile), "dim")
    assert SGR.findall(painted) == ["\x1b[2m", RESET]
    assert painted.count("\x1b") == 2
