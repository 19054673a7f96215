"""The headless command line, parsed without a process."""

from __future__ import annotations

import pytest

from dsh.core.errors import UsageError
from dsh.runtime.headless.options import Options, parse


def test_words_are_joined_and_options_read() -> None:
    assert parse(["--json", "--approval", "auto", "--model", "m", "--provider", "r",
                  "--session-id", "s", "--effort", "none", "fix", "the", "bug"]) == Options(
        task="fix the bug", json=True, session_id="s", approval="auto", model="m",
        provider="r", effort="none")


def test_dash_reads_stdin_and_double_dash_ends_options() -> None:
    assert parse(["-"]).task_from_stdin and not parse(["-"]).stdin_implied
    # No words: stdin too, if it is not a terminal (the runner checks; test_headless_process).
    assert parse(["--json"]).task_from_stdin and parse(["--json"]).stdin_implied
    assert parse(["--", "--json", "is", "a", "word"]).task == "--json is a word"


@pytest.mark.parametrize("argv", [["--approval", "ask", "x"], ["--approval", "no", "x"],
                                  ["--nope", "x"], ["-", "x"], ["--model", " ", "x"],
                                  ["--effort", "", "x"],
                                  ["   "], ["--js", "x"]])
def test_bad_command_lines_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(UsageError) as info:
        parse(argv)
    assert info.value.exit_code == 2
