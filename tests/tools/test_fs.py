"""``tools-fs`` on real files: read ranges, atomic writes, exact edits, listing, glob."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of

from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.fs import FsTools


@pytest.fixture
def fs() -> dict[str, Any]:
    return tools_of(make_plugin(FsTools))


def lines(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


def test_schemas_and_mutating_flags(fs: dict[str, Any]) -> None:
    assert sorted(fs) == ["edit_file", "glob", "list_directory", "read_file", "write_file"]
    assert {n for n, t in fs.items() if t.mutating} == {"edit_file", "write_file"}
    for tool in fs.values():
        assert tool.parameters["type"] == "object"
        assert tool.path_arguments == ("path",)


def test_read_whole_file_numbers_lines(fs: dict[str, Any], ctx: ToolContext,
                                       work: Path) -> None:
    (work / "a.txt").write_text("alpha\nbeta\n")
    result = run(fs["read_file"], ctx, path="a.txt")
    assert not result.is_error
    assert result.text == "     1\talpha\n     2\tbeta"


def test_read_range_notes_the_rest(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "a.txt").write_text(lines(10))
    result = run(fs["read_file"], ctx, path="a.txt", offset=3, limit=2)
    assert result.text.splitlines()[:2] == ["     3\tline 3", "     4\tline 4"]
    assert "[showing lines 3-4 of 10; read on with offset=5]" in result.text


def test_read_past_end_and_empty(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "a.txt").write_text(lines(3))
    (work / "e.txt").write_text("")
    assert "past the end" in run(fs["read_file"], ctx, path="a.txt", offset=9).text
    assert run(fs["read_file"], ctx, path="e.txt").text == "(empty file)"


def test_read_output_cap(ctx: ToolContext, work: Path) -> None:
    tools = tools_of(make_plugin(FsTools, max_output_chars=100, max_line_chars=20))
    (work / "big.txt").write_text(lines(100) + "x" * 50 + "\n")
    text = run(tools["read_file"], ctx, path="big.txt").text
    assert len(text) < 200
    assert "[showing lines 1-" in text and "of 101; read on with offset=" in text
    tail = run(tools["read_file"], ctx, path="big.txt", offset=101).text
    assert "[... line cut at 20 characters]" in tail


def test_read_errors(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "bin").write_bytes(b"\x00\x01\x02")
    (work / "d").mkdir()
    assert "binary" in run(fs["read_file"], ctx, path="bin").text
    result = run(fs["read_file"], ctx, path="d")
    assert result.is_error and "directory" in result.text
    result = run(fs["read_file"], ctx, path="missing.txt")
    assert result.is_error and "cannot read missing.txt" in result.text


def test_write_creates_parents_atomically(fs: dict[str, Any], ctx: ToolContext,
                                          work: Path) -> None:
    result = run(fs["write_file"], ctx, path="new/deep/f.txt", content="hello\n")
    assert not result.is_error, result.text
    assert result.text == f"Created {os.path.join('new', 'deep', 'f.txt')} (6 bytes)."
    assert (work / "new/deep/f.txt").read_text() == "hello\n"
    result = run(fs["write_file"], ctx, path="new/deep/f.txt", content="bye")
    assert result.text.startswith("Overwrote")
    assert (work / "new/deep/f.txt").read_text() == "bye"
    # No temporary file is left beside the target.
    assert sorted(os.listdir(work / "new/deep")) == ["f.txt"]


def test_write_keeps_mode_and_refuses_directories(fs: dict[str, Any], ctx: ToolContext,
                                                  work: Path) -> None:
    script = work / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    run(fs["write_file"], ctx, path="run.sh", content="new")
    assert script.stat().st_mode & 0o777 == 0o755
    (work / "d").mkdir()
    result = run(fs["write_file"], ctx, path="d", content="x")
    assert result.is_error and "is a directory" in result.text


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_write_failure_leaves_no_temp_file(work: Path) -> None:
    # A file-size limit makes the write fail after the temporary file exists.
    (work / "f.txt").write_text("keep")
    code = textwrap.dedent(f"""
        import resource, signal
        from dsh.runtime.tools import safeopen
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        try:
            safeopen.write_file(safeopen.Anchor({str(work)!r}), "f.txt", b"x" * 100000)
        except OSError as exc:
            print("failed:", exc.strerror)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("failed: File too large"), out
    assert sorted(os.listdir(work)) == ["f.txt"]
    assert (work / "f.txt").read_text() == "keep"


def test_edit_exact_replacement(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "c.py").write_text("x = 1\ny = 2\n")
    result = run(fs["edit_file"], ctx, path="c.py", old_string="y = 2", new_string="y = 3")
    assert result.text == "Edited c.py: replaced 1 occurrence."
    assert (work / "c.py").read_text() == "x = 1\ny = 3\n"
    assert os.listdir(work) == ["c.py"]


def test_edit_zero_matches(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "c.py").write_text("x = 1\n")
    result = run(fs["edit_file"], ctx, path="c.py", old_string="nope", new_string="y")
    assert result.is_error and "old_string not found in c.py" in result.text
    assert (work / "c.py").read_text() == "x = 1\n"


def test_edit_several_matches(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "c.py").write_text("a a a\n")
    result = run(fs["edit_file"], ctx, path="c.py", old_string="a", new_string="b")
    assert result.is_error and "occurs 3 times" in result.text and "replace_all" in result.text
    assert (work / "c.py").read_text() == "a a a\n"
    result = run(fs["edit_file"], ctx, path="c.py", old_string="a", new_string="b",
                 replace_all=True)
    assert result.text == "Edited c.py: replaced 3 occurrences."
    assert (work / "c.py").read_text() == "b b b\n"


def test_edit_keeps_crlf_and_rejects_noops(fs: dict[str, Any], ctx: ToolContext,
                                           work: Path) -> None:
    (work / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    run(fs["edit_file"], ctx, path="w.txt", old_string="two", new_string="2")
    assert (work / "w.txt").read_bytes() == b"one\r\n2\r\n"
    assert run(fs["edit_file"], ctx, path="w.txt", old_string="", new_string="x").is_error
    assert run(fs["edit_file"], ctx, path="w.txt", old_string="2", new_string="2").is_error


def test_writes_and_edits_carry_their_unified_diff(fs: dict[str, Any], ctx: ToolContext,
                                                   work: Path) -> None:
    created = run(fs["write_file"], ctx, path="sub/n.py", content="a = 1\nb = 2\n")
    assert created.diff == {
        "path": os.path.join("sub", "n.py"), "kind": "add", "added": 2, "removed": 0,
        "unified": f"--- /dev/null\n+++ b/{os.path.join('sub', 'n.py')}\n@@ -0,0 +1,2 @@\n"
                   "+a = 1\n+b = 2\n", "truncated": False}
    edited = run(fs["edit_file"], ctx, path="sub/n.py", old_string="b = 2",
                 new_string="b = 3\nc = 4")
    diff = edited.diff
    assert diff is not None and (diff["kind"], diff["added"], diff["removed"]) == (
        "update", 2, 1)
    assert diff["unified"].splitlines()[2:] == ["@@ -1,2 +1,3 @@", " a = 1", "-b = 2",
                                                "+b = 3", "+c = 4"]
    overwritten = run(fs["write_file"], ctx, path="sub/n.py", content="z")
    assert overwritten.diff is not None
    assert overwritten.diff["unified"].endswith("+z\n\\ No newline at end of file\n")
    assert (overwritten.diff["added"], overwritten.diff["removed"]) == (1, 3)
    # What the model reads is the summary, never the diff.
    assert overwritten.text.startswith("Overwrote") and "+z" not in overwritten.text


def test_diffs_are_bounded(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    from dsh.runtime.tools.filediff import MAX_DIFF_INPUT_CHARS, MAX_UNIFIED_CHARS

    long = "".join(f"row {i} {'x' * 60}\n" for i in range(5000))  # ~330 KB
    result = run(fs["write_file"], ctx, path="long.txt", content=long)
    diff = result.diff
    assert diff is not None and diff["truncated"] and diff["added"] == 5000
    assert len(diff["unified"]) <= MAX_UNIFIED_CHARS and diff["unified"].endswith("\n")
    (work / "bin.dat").write_bytes(b"\xff\xfe\x00 not text")
    result = run(fs["write_file"], ctx, path="bin.dat", content="text now\n")
    assert result.diff is not None and result.diff["added"] is None
    assert "not UTF-8" in result.diff["omitted"] and result.diff["kind"] == "update"
    huge = "y\n" * (MAX_DIFF_INPUT_CHARS // 2 + 1)
    result = run(fs["write_file"], ctx, path="huge.txt", content=huge)
    assert result.diff is not None and "too large to diff" in result.diff["omitted"]
    assert (work / "huge.txt").read_text() == huge


def test_a_failed_write_carries_no_diff(fs: dict[str, Any], ctx: ToolContext,
                                        work: Path) -> None:
    (work / "d").mkdir()
    assert run(fs["write_file"], ctx, path="d", content="x").diff is None
    assert run(fs["edit_file"], ctx, path="missing", old_string="a", new_string="b").diff is None


def test_list_directory(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "b.txt").write_text("")
    (work / "a").mkdir()
    (work / "link").symlink_to(work / "b.txt")
    result = run(fs["list_directory"], ctx)
    assert result.text == "./ (3 entries)\na/\nb.txt\nlink@"
    assert run(fs["list_directory"], ctx, path="a").text == "a/ (0 entries): empty"
    assert run(fs["list_directory"], ctx, path="b.txt").is_error


def test_list_cap(ctx: ToolContext, work: Path) -> None:
    tools = tools_of(make_plugin(FsTools, max_entries=2))
    for name in "abcd":
        (work / name).write_text("")
    text = run(tools["list_directory"], ctx).text
    assert text == "./ (4 entries)\na\nb\n[2 more entries not shown]"


def test_glob(fs: dict[str, Any], ctx: ToolContext, work: Path) -> None:
    (work / "src/pkg").mkdir(parents=True)
    for name in ("src/a.py", "src/pkg/b.py", "src/c.txt", "top.py"):
        (work / name).write_text("")
    assert run(fs["glob"], ctx, pattern="**/*.py").text == "\n".join(
        ["src/a.py", "src/pkg/b.py", "top.py"])
    assert run(fs["glob"], ctx, pattern="*.py", path="src").text == "src/a.py"
    assert "No files match" in run(fs["glob"], ctx, pattern="*.rs").text
    assert run(fs["glob"], ctx, pattern="../*").is_error
    assert run(fs["glob"], ctx, pattern="/etc/*").is_error


def test_glob_cap(ctx: ToolContext, work: Path) -> None:
    tools = tools_of(make_plugin(FsTools, max_entries=2))
    for name in "abc":
        (work / f"{name}.txt").write_text("")
    assert "[stopped after 2 matches" in run(tools["glob"], ctx, pattern="*.txt").text
