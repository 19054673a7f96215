"""``tools-search``: grep with each backend this machine has, in one output format."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of

from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.search import SearchTools, choose_backend, describe_backend

BACKENDS = ["python", pytest.param("rg", marks=pytest.mark.skipif(
    shutil.which("rg") is None, reason="ripgrep is not installed"))]


@pytest.fixture
def tree(work: Path) -> Path:
    (work / "src/pkg").mkdir(parents=True)
    (work / "src/a.py").write_text("import os\nTODO: fix\n")
    (work / "src/pkg/b.py").write_text("x = 1\n# todo later\n")
    (work / "notes.md").write_text("TODO: write docs\n")
    (work / ".hidden").write_text("TODO hidden\n")
    (work / "blob.bin").write_bytes(b"TODO\x00\x01")
    return work


def grep(backend: str, ctx: ToolContext, **args: Any) -> Any:
    tools = tools_of(make_plugin(SearchTools, backend=backend))
    return run(tools["grep"], ctx, **args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grep_format_and_sorting(backend: str, ctx: ToolContext, tree: Path) -> None:
    result = grep(backend, ctx, pattern="TODO")
    assert not result.is_error
    assert result.text == "notes.md:1:TODO: write docs\nsrc/a.py:2:TODO: fix"


@pytest.mark.parametrize("backend", BACKENDS)
def test_grep_options(backend: str, ctx: ToolContext, tree: Path) -> None:
    assert grep(backend, ctx, pattern="todo", ignore_case=True, include="*.py").text == (
        "src/a.py:2:TODO: fix\nsrc/pkg/b.py:2:# todo later")
    assert grep(backend, ctx, pattern="x = \\d", path="src").text == "src/pkg/b.py:1:x = 1"
    assert grep(backend, ctx, pattern="TODO", path="notes.md").text == (
        "notes.md:1:TODO: write docs")
    assert grep(backend, ctx, pattern="absent").text == "No matches found."


@pytest.mark.parametrize("backend", BACKENDS)
def test_grep_errors_and_cap(backend: str, ctx: ToolContext, tree: Path) -> None:
    result = grep(backend, ctx, pattern="(unclosed")
    assert result.is_error and result.text.startswith("grep failed")
    assert grep(backend, ctx, pattern="x", path="nope").is_error
    tools = tools_of(make_plugin(SearchTools, backend=backend, max_matches=1))
    text = run(tools["grep"], ctx, pattern="TODO").text
    assert text == "notes.md:1:TODO: write docs\n[stopped after 1 matching lines; " \
                   "narrow the pattern or path]"


def test_backend_choice_is_reported() -> None:
    assert choose_backend("python").kind == "python"
    assert describe_backend("python") == "python fallback (forced by config)"
    auto = choose_backend("auto")
    if shutil.which("rg"):
        assert auto.kind in ("companion", "path")
        assert "ripgrep" in describe_backend()
    else:
        assert auto.kind == "python"
