"""The boundary, tool by tool: paths held to the workspace root, the dsh home never reached.

The tools are called directly with a real :class:`ToolContext`; a context without a
boundary is rooted at its cwd (a tool used outside a session), one with a boundary is
held to that boundary's root whatever its cwd. tests/security/ drives the same through
a real ``dsh`` process.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of

from dsh.runtime.tools import confine
from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.confine import Boundary
from dsh.runtime.tools.fs import FsTools
from dsh.runtime.tools.search import SearchTools

OUTSIDE = "outside the workspace root"
PROTECTED = "protected directory"


@pytest.fixture(params=["rg", "python"])
def tools(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {**tools_of(make_plugin(FsTools)),
            **tools_of(make_plugin(SearchTools, backend=request.param))}


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


def assert_all_refused(tools: dict[str, Any], ctx: ToolContext, path: str, outside: Path,
                       why: str = OUTSIDE) -> None:
    for name, args in calls(path):
        result = run(tools[name], ctx, **args)
        assert result.is_error, (name, result.text)
        assert why in result.text, (name, result.text)
    assert (outside / "secret.txt").read_text() == "secret\n"


def with_boundary(ctx: ToolContext, boundary: Boundary) -> ToolContext:
    return ctx._replace(boundary=boundary)


def test_dotdot(tools: dict[str, Any], ctx: ToolContext, outside: Path) -> None:
    assert_all_refused(tools, ctx, "../outside/secret.txt", outside)
    assert_all_refused(tools, ctx, "sub/../../outside", outside)


def test_absolute_path_and_tilde(tools: dict[str, Any], ctx: ToolContext,
                                 outside: Path) -> None:
    assert_all_refused(tools, ctx, str(outside / "secret.txt"), outside)
    home_relative = "~/" + os.path.relpath(outside / "secret.txt", os.path.expanduser("~"))
    assert_all_refused(tools, ctx, home_relative, outside)


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
    assert OUTSIDE in result.text
    assert not (outside / "new.txt").exists()


def test_bad_paths_get_one_clear_line(tools: dict[str, Any], ctx: ToolContext) -> None:
    for name, args in calls("a\x00b"):
        assert "contains a NUL byte" in run(tools[name], ctx, **args).text, name
    for name, args in calls("x" * 300):
        assert "longer than 255 bytes" in run(tools[name], ctx, **args).text, name
    for name, args in calls("/".join(["d"] * 2100)):
        assert "path too long" in run(tools[name], ctx, **args).text, name


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
    assert run(tools["glob"], ctx, pattern="*.txt").text == "alias.txt\nreal.txt"


def test_symlinked_working_directory(tmp_path: Path, work: Path) -> None:
    """A cwd reached through a symlink is judged by its real path, not refused."""
    alias = tmp_path / "alias"
    alias.symlink_to(work, target_is_directory=True)
    boundary = Boundary.at(str(alias))
    assert boundary.root == str(work.resolve())
    assert boundary.place(str(alias), "f.txt") == (confine.INSIDE,
                                                   str(work.resolve() / "f.txt"), boundary.root)
    assert boundary.place(str(alias), "../outside").kind == confine.OUTSIDE


def test_the_root_not_the_working_directory_is_the_boundary(tools: dict[str, Any],
                                                            ctx: ToolContext, work: Path,
                                                            outside: Path) -> None:
    (work / "sub").mkdir()
    (work / "top.txt").write_text("top\n")
    moved = with_boundary(ctx, Boundary(str(work.resolve())))._replace(
        get_cwd=lambda: str(work / "sub"))
    # ".." from a subdirectory is still inside the root.
    assert run(tools["read_file"], moved, path="../top.txt").text == "     1\ttop"
    # A session moved out of its root reaches nothing there by relative paths.
    away = with_boundary(ctx, Boundary(str(work.resolve())))._replace(
        get_cwd=lambda: str(outside))
    assert_all_refused(tools, away, "secret.txt", outside)
    assert run(tools["read_file"], away, path=str(work / "top.txt")).text == "     1\ttop"


def test_the_dsh_home_is_never_reached(tools: dict[str, Any], ctx: ToolContext,
                                       work: Path, outside: Path) -> None:
    """A home inside the root (the workspace is the home's parent): every tool refuses it,
    the walks skip it, and a link into it is refused too."""
    home = work / "dsh-home"
    home.mkdir()
    (home / ".env").write_text("secret=1\n")
    (home / "patch.yml").write_text("[]\n")
    (work / "to-home").symlink_to(home, target_is_directory=True)
    (work / "mine.txt").write_text("mine\n")
    guarded = with_boundary(ctx, Boundary(str(work.resolve()),
                                          protected=(str(home.resolve()),)))
    for path in ("dsh-home/.env", "dsh-home", "to-home/.env", str(home / "patch.yml")):
        assert_all_refused(tools, guarded, path, outside, PROTECTED)
    assert "secret" not in run(tools["grep"], guarded, pattern="secret").text
    # The walk never enters the home (nor names it), nor reports a link into it.
    assert run(tools["glob"], guarded, pattern="**/*").text == "mine.txt"
    assert (home / ".env").read_text() == "secret=1\n"
    assert (home / "patch.yml").read_text() == "[]\n"


def test_a_workspace_inside_the_home_keeps_only_itself(tools: dict[str, Any],
                                                       ctx: ToolContext,
                                                       tmp_path: Path) -> None:
    home = tmp_path / "home"
    workspace = home / "workspaces" / "w1"
    workspace.mkdir(parents=True)
    (home / ".env").write_text("secret=1\n")
    (workspace / "f.txt").write_text("secret in the workspace\n")
    inside = ToolContext("s1", {}, asyncio.Event(), lambda: str(workspace), lambda p: p,
                         boundary=Boundary(str(workspace.resolve()),
                                           protected=(str(home.resolve()),)))
    assert run(tools["read_file"], inside, path="f.txt").text.endswith("workspace")
    assert run(tools["grep"], inside, pattern="secret").text.startswith("f.txt:1:")
    allowed = Boundary(str(workspace.resolve()), protected=(str(home.resolve()),)).allowing(
        [str((home / ".env").resolve())])
    result = run(tools["read_file"], inside._replace(boundary=allowed), path="../../.env")
    assert result.is_error and PROTECTED in result.text


def test_an_allowed_path_is_exactly_that_path(tools: dict[str, Any], ctx: ToolContext,
                                              work: Path, outside: Path) -> None:
    (outside / "other.txt").write_text("other\n")
    (outside / "alias.txt").symlink_to(outside / "other.txt")
    secret = str((outside / "secret.txt").resolve())
    approved = with_boundary(ctx, Boundary(str(work.resolve())).allowing([secret]))
    assert run(tools["read_file"], approved, path="../outside/secret.txt").text.endswith(
        "secret")
    assert OUTSIDE in run(tools["read_file"], approved, path="../outside/other.txt").text
    result = run(tools["write_file"], approved, path="../outside/secret.txt", content="ok")
    assert not result.is_error, result.text
    assert (outside / "secret.txt").read_text() == "ok"
    new = str((outside / "made" / "new.txt").resolve())
    creating = with_boundary(ctx, Boundary(str(work.resolve())).allowing([new]))
    assert not run(tools["write_file"], creating, path="../outside/made/new.txt",
                   content="n").is_error
    assert (outside / "made" / "new.txt").read_text() == "n"


def test_the_home_is_known_by_identity_not_only_by_name(tmp_path: Path) -> None:
    """A spelling of the home the name check cannot match (here ``./dsh``; on macOS a
    case variant such as ``~/.DSH``) is still the home: its directory is recognised."""
    home, work = tmp_path / "dsh", tmp_path / "work"
    home.mkdir()
    work.mkdir(exist_ok=True)
    (home / ".env").write_text("KEY=1\n")
    spelled = f"{tmp_path}/./dsh"
    boundary = Boundary(str(work), protected=(spelled,))
    assert boundary.protects(str(home / ".env")) == spelled
    assert boundary.protects(str(home / "new" / "file.txt")) == spelled  # not there yet
    assert boundary.place(str(work), str(home / ".env")).kind == confine.PROTECTED
    assert boundary.protects(str(work / "f.txt")) is None
    # A workspace kept inside the home is usable; the rest of the home is not.
    inner = home / "projects" / "w"
    inner.mkdir(parents=True)
    kept = Boundary(str(inner), protected=(spelled,))
    assert kept.protects(str(inner / "f.txt")) is None
    assert kept.protects(str(home / ".env")) == spelled
    assert Boundary(str(home), protected=(spelled,)).protects(str(home / "x")) == spelled
