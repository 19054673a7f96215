"""What the ``dsh`` command prints that quotes a file shows the file's controls, obeys none.

A patch file (one a cloned repository could carry) names a plugin and a row with escape
sequences in them: a window title (OSC 0), a screen clear (CSI 2J), a clipboard write (OSC
52). The launcher's error and warning lines and ``dsh doctor``'s text quote those names;
each must reach the terminal as printable text.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

RunDsh = Callable[..., subprocess.CompletedProcess[str]]

EVIL = ("- {id: \"gone\\e[2J\", disabled: true}\n"
        "- insert: [{id: evil, name: \"no\\e]0;pwned\\a\\e]52;c;cm0gLXJmIH4K\\a.plugin\"}]\n")


def assert_no_controls(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, text


def test_error_and_warning_lines_show_the_escapes(run_dsh: RunDsh, tmp_path: Path) -> None:
    patch = tmp_path / "evil.yml"
    patch.write_text(EVIL)
    proc = run_dsh("--profile", "headless", "--patch", str(patch), "hi")
    assert proc.returncode == 2
    assert_no_controls(proc.stderr)
    assert "dsh: error: row 'evil': unknown plugin 'no^[]0;pwned^G^[]52;c;" in proc.stderr
    assert "unknown row id 'gone" in proc.stderr


def test_doctor_text_shows_the_escapes(run_dsh: RunDsh, tmp_path: Path) -> None:
    patch = tmp_path / "evil.yml"
    patch.write_text(EVIL)
    proc = run_dsh("doctor", "--profile", "headless", "--patch", str(patch))
    assert proc.returncode == 1
    assert_no_controls(proc.stdout)
    assert "[FAIL] plugin.evil: row 'evil': unknown plugin 'no^[]0;pwned^G" in proc.stdout
    # Its JSON is JSON: the same text, escaped by the encoder (\u001b), for programs.
    machine = run_dsh("doctor", "--profile", "headless", "--patch", str(patch), "--json")
    assert "\\u001b]0;pwned\\u0007" in machine.stdout
