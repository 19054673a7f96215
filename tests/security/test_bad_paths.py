"""Path arguments that are not what they claim, through a real ``dsh`` process.

Each gets one clear tool error and the turn goes on: NUL bytes and over-long paths (a
name over 255 bytes, a path over 4 KiB) in every path argument, ``/dev/zero`` through a
link in the workspace, a FIFO and a socket, and the dsh home used as the workspace itself
(everything in it refused, the shell included). ``..``, absolute paths, ``~`` and
links out are in test_file_escape.py; the home beside, inside and around the workspace in
test_cd_escape.py.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from boundarykit import Attack, tree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux paths")

PATH_TOOLS = [("read_file", "path", {}), ("write_file", "path", {"content": "x"}),
              ("edit_file", "path", {"old_string": "a", "new_string": "b"}),
              ("list_directory", "path", {}), ("glob", "path", {"pattern": "*"}),
              ("grep", "path", {"pattern": "x"}), ("working_directory", "cd", {}),
              ("bash", "workdir", {"command": "echo ran"})]


def every_tool(path: str) -> list[dict[str, Any]]:
    return [{"name": name, "arguments": {**extra, arg: path}} for name, arg, extra in PATH_TOOLS]


def test_nul_bytes_and_overlong_paths_get_one_clear_line(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    bad = {"a\x00b": "contains a NUL byte", "n" * 300: "longer than 255 bytes",
           "/".join(["d"] * 2100): "path too long"}
    calls = [call for path in bad for call in every_tool(path)]
    with Attack(tmp_path, calls, cwd=work) as attack:
        turn = attack.turn()
        attack.close()
    assert turn.reason == {"kind": "completed"}
    expected = [words for words in bad.values() for _ in PATH_TOOLS]
    for call, result, words in zip(calls, turn.results, expected, strict=True):
        assert result["error"] and words in result["text"], (call["name"], result)
        assert result["code"] == "INVALID_ARGS", (call["name"], result)
        assert "\n" not in result["text"]
    assert list(work.iterdir()) == []


def test_devices_fifos_and_sockets(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "zero").symlink_to("/dev/zero")
    os.mkfifo(work / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(work / "sock"))
    calls = [{"name": "read_file", "arguments": {"path": "zero"}},
             {"name": "write_file", "arguments": {"path": "zero", "content": "x"}},
             {"name": "read_file", "arguments": {"path": "/dev/zero"}},
             {"name": "read_file", "arguments": {"path": "fifo"}},
             {"name": "edit_file", "arguments": {"path": "sock", "old_string": "a",
                                                 "new_string": "b"}},
             {"name": "write_file", "arguments": {"path": "sock", "content": "x"}}]
    try:
        with Attack(tmp_path, calls, cwd=work) as attack:
            turn = attack.turn()
            attack.close()
    finally:
        server.close()
    texts = turn.texts()
    # /dev/zero is outside the root: asked about, and nobody can answer.
    for index in (0, 1, 2):
        assert (f"reaches /dev/zero, outside the workspace root {os.path.realpath(work)}"
                in texts[index]), texts[index]
    assert "not a regular file (a FIFO)" in texts[3]
    assert "not a regular file (a socket)" in texts[4]
    assert "not a regular file (a socket)" in texts[5]


def test_the_home_as_the_workspace(tmp_path: Path, dsh_home: Path) -> None:
    """``dsh`` run in its own home: every file in it stays out of reach."""
    (dsh_home / ".env").write_text("HOME_SERVICE_TOKEN=canary-in-the-home\n")
    (dsh_home / "notes.txt").write_text("notes\n")
    calls = [{"name": "read_file", "arguments": {"path": ".env"}},
             {"name": "read_file", "arguments": {"path": "notes.txt"}},
             {"name": "write_file", "arguments": {"path": "patch.yml", "content": "[]"}},
             {"name": "list_directory", "arguments": {}},
             {"name": "grep", "arguments": {"pattern": "canary"}},
             {"name": "glob", "arguments": {"pattern": "**/*"}},
             # The shell's working directory is the home: refused before it runs.
             {"name": "bash", "arguments": {"command": "cat .env notes.txt; ls -a"}}]
    before = {k: v for k, v in tree(dsh_home).items() if k in (".env", "notes.txt")}
    with Attack(tmp_path, calls, cwd=dsh_home) as attack:
        turn = attack.turn()
        attack.close()
    for call, result in zip(calls, turn.results, strict=True):
        assert "canary-in-the-home" not in result["text"], call
        assert result["code"] == "PROTECTED", (call, result)
    assert not (dsh_home / "patch.yml").exists()
    assert {k: v for k, v in tree(dsh_home).items() if k in before} == before
