"""``dsh.core.termtext.visible``: no control from elsewhere reaches a terminal raw.

Each case feeds what a hostile file, tool or model could print; the checks run the result
through a real terminal emulator (pyte, when installed) as well as by eye, so "harmless"
means a terminal's screen, title and clipboard are untouched, not just "looks different".
"""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.core.termtext import visible

ESC = "\x1b"
HOSTILE = {
    "clear screen": f"{ESC}[2J{ESC}[H",
    "window title (OSC 0, BEL)": f"{ESC}]0;pwned\x07",
    "window title (OSC 2, ST)": f"{ESC}]2;pwned{ESC}\\",
    "clipboard write (OSC 52)": f"{ESC}]52;c;cm0gLXJmIH4K\x07",
    "hyperlink (OSC 8)": f"{ESC}]8;;https://evil.example{ESC}\\click{ESC}]8;;{ESC}\\",
    "cursor up and erase line": f"{ESC}[1A{ESC}[2K",
    "8-bit CSI": "\x9b2J",
    "8-bit OSC": "\x9d0;pwned\x9c",
    "carriage return overwrite": "rm -rf ~\rls -la   ",
    "bell": "\x07",
    "backspace overwrite": "safe\x08\x08\x08\x08evil",
    "DCS": f"{ESC}P1$r{ESC}\\",
    "bidi override": "access = 'user\u202e \u2066// admin\u2069'",
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_no_control_survives(text: str) -> None:
    shown = visible(text)
    for char in shown:
        if char in "\n\t":
            continue
        assert unicodedata.category(char) not in ("Cc", "Cf"), (text, shown)


def test_escape_sequences_are_shown_in_caret_notation() -> None:
    assert visible(f"{ESC}[2J") == "^[[2J"
    assert visible(f"{ESC}]52;c;aGk=\x07") == "^[]52;c;aGk=^G"
    assert visible("\x00\x7f") == "^@^?"
    assert visible("\x9b2J") == "<U+009B>2J"
    assert visible("a\u202eb") == "a<U+202E>b"


def test_text_and_layout_are_kept() -> None:
    text = "# Result\n\n| a | b |\n|---|---|\n\tcode\nünïcødé 日本語 🙂"
    assert visible(text) == text


def test_carriage_returns_stay_only_in_line_ends() -> None:
    assert visible("one\r\ntwo\r\n") == "one\ntwo\n"
    assert visible("shown\rhidden") == "shown^Mhidden"


def test_one_line_shows_line_breaks_and_tabs() -> None:
    assert visible("title\nsecond\tline", one_line=True) == "title^Jsecond^Iline"


@given(st.text())
def test_any_text_comes_out_free_of_controls(text: str) -> None:
    for char in visible(text):
        assert char in "\n\t" or unicodedata.category(char) != "Cc"
        assert not 0x202A <= ord(char) <= 0x202E and not 0x2066 <= ord(char) <= 0x2069


def test_a_terminal_emulator_shows_the_text_and_obeys_nothing() -> None:
    pyte = pytest.importorskip("pyte")
    screen = pyte.Screen(80, 24)
    stream = pyte.Stream(screen)
    stream.feed("before\r\n")
    for text in HOSTILE.values():
        stream.feed(visible(text) + "\r\n")
    assert screen.title == ""  # no OSC 0/2 reached it
    assert screen.display[0].rstrip() == "before"  # nothing cleared or overwrote it
    assert "^[[2J^[[H" in screen.display[1]


def test_one_line_text_that_is_printable_is_returned_as_it_is() -> None:
    """The fast path's premise, over every code point: nothing visible() changes is
    printable, so printable text needs no translation."""
    changed = [code for code in range(sys.maxunicode + 1)
               if chr(code).isprintable() and visible(chr(code), one_line=True) != chr(code)]
    assert changed == []
    title = "Fix the build — ünïcode 漢字 ok"
    assert visible(title, one_line=True) is title
