"""Path escapes: every file tool refuses paths whose real path leaves the working directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of
from dsh_runtime.tools.base import ToolContext
from dsh_runtime.tools.confine import PathEscapeError, resolve
from dsh_runtime.tools.fs import FsTools
from dsh_runtime.tools.search import SearchTools

ESCAPE = "path escapes the working directory"


@pytest.fixture
def tools() -> dict[str, Any]:
    return {**tools_of(make_plugin(FsTools)),
            **tools_of(make_plugin(SearchTools, backend="python"))}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the working directory, with a secret in it."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("secret\n")
    return path


def calls(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "pwned"}),
        ("edit_file", {"path": path, "old_string": "secret", "new_string": "pwned"}),
        ("list_directory", {"path": path}),
        ("glob", {"pattern": "*", "path": path}),
        ("grep", {"pattern": "secret", "path": path}),
    ]


def assert_all_refused(tools: dict[str, Any], ctx: ToolContext, path: str,
                       outside: Path) -> None:
    for name, args in calls(path):
        result = run(tools[name], ctx, **args)
        assert result.is_error, (name, result.text)
        assert ESCAPE in result.text, (name, result.text)
    assert (outside / "secret.txt").read_text() == "secret\n"


def test_dotdot(tools: dict[str, Any], ctx: ToolContext, outside: Path) -> None:
    assert_all_refused(tools, ctx, "../outside/secret.txt", outside)
    assert_all_refused(tools, ctx, "sub/../../outside", outside)


def test_absolute_path(tools: dict[str, Any], ctx: ToolContext, outside: Path) -> None:
    assert_all_refused(tools, ctx, str(outside / "secret.txt"), outside)


def test_symlinked_file_out_of_tree(tools: dict[str, Any], ctx: ToolContext, work: Path,
                                    outside: Path) -> None:
    (work / "link.txt").symlink_to(outside / "secret.txt")
    assert_all_refused(tools, ctx, "link.txt", outside)


def test_symlinked_dir_out_of_tree(tools: dict[str, Any], ctx: ToolContext, work: Path,
                                   outside: Path) -> None:
    (work / "out").symlink_to(outside, target_is_directory=True)
    assert_all_refused(tools, ctx, "out/secret.txt", outside)
    assert_all_refused(tools, ctx, "out", outside)
    # Writing a new file through the symlinked directory is refused too.
    result = run(tools["write_file"], ctx, path="out/new.txt", content="x")
    assert ESCAPE in result.text
    assert not (outside / "new.txt").exists()


def test_tree_walks_do_not_follow_links_out(tools: dict[str, Any], ctx: ToolContext,
                                            work: Path, outside: Path) -> None:
    (work / "out").symlink_to(outside, target_is_directory=True)
    (work / "mine.txt").write_text("secret here too\n")
    assert run(tools["glob"], ctx, pattern="**/*.txt").text == "mine.txt"
    assert run(tools["grep"], ctx, pattern="secret").text == "mine.txt:1:secret here too"


def test_symlinks_inside_the_tree_are_fine(tools: dict[str, Any], ctx: ToolContext,
                                           work: Path) -> None:
    (work / "real.txt").write_text("a\n")
    (work / "alias.txt").symlink_to(work / "real.txt")
    assert not run(tools["read_file"], ctx, path="alias.txt").is_error
    run(tools["edit_file"], ctx, path="alias.txt", old_string="a", new_string="b")
    assert (work / "real.txt").read_text() == "b\n"
    assert (work / "alias.txt").is_symlink()


def test_symlinked_working_directory(tmp_path: Path, work: Path) -> None:
    """A cwd reached through a symlink is judged by its real path, not refused."""
    alias = tmp_path / "alias"
    alias.symlink_to(work, target_is_directory=True)
    assert resolve(str(alias), "f.txt") == str(work.resolve() / "f.txt")
    with pytest.raises(PathEscapeError, match=ESCAPE):
        resolve(str(alias), "../outside")
