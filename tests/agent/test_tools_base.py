"""The tool contract's helpers, the working_directory tool, and plugin registration."""

from __future__ import annotations

import asyncio
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from dsh.runtime.kernel.builtin_plugins import BUILTIN_PLUGINS
from dsh.runtime.kernel.loader import resolve
from dsh.runtime.tools.base import ArgumentError, ToolContext, check_arguments, parse_arguments
from dsh.runtime.tools.working_directory import WorkingDirectory

MINE = {
    "agent-core": "dsh.runtime.agent.plugin:AgentCore",
    "llm-scripted": "dsh.runtime.providers.scripted:ScriptedProvider",
    "tool-working-directory": "dsh.runtime.tools.working_directory:WorkingDirectoryTool",
    "guardrail-policy": "dsh.runtime.tools.policy:PolicyGuardrail",
}


def test_plugins_are_registered_both_ways() -> None:
    points = {e.name: e.value for e in entry_points(group="dsh.plugins")}
    for name, target in MINE.items():
        assert BUILTIN_PLUGINS[name] == target
        assert points[name] == target
        assert resolve("row", name).manifest.id == name


def test_arguments_are_parsed_checked_and_defaulted() -> None:
    tool = WorkingDirectory()
    assert parse_arguments("  ") == {}
    assert check_arguments(tool, {"cd": "x"}) == {"cd": "x"}
    with pytest.raises(ArgumentError, match=r"^invalid arguments: cd: expected string$"):
        check_arguments(tool, {"cd": 1})
    with pytest.raises(ArgumentError, match="not valid JSON"):
        parse_arguments("{")


def test_working_directory_reports_and_changes_the_session_cwd() -> None:
    Path("sub").mkdir()
    cwd = [os.getcwd()]

    def change(path: str) -> str:
        target = os.path.normpath(os.path.join(cwd[0], path))
        if not os.path.isdir(target):
            raise NotADirectoryError(f"not a directory: {target}")
        cwd[0] = target
        return target

    ctx = ToolContext("s", {}, asyncio.Event(), lambda: cwd[0], change)
    tool = WorkingDirectory()

    async def run() -> None:
        here = await tool.call({}, ctx)
        assert (here.text, here.is_error) == (f'Current working directory: "{os.getcwd()}"', False)
        moved = await tool.call({"cd": "sub"}, ctx)
        assert moved.text.endswith('/sub"') and cwd[0].endswith("/sub")
        missing = await tool.call({"cd": "nope"}, ctx)
        assert missing.is_error and missing.text.startswith("not a directory: ")
        assert cwd[0].endswith("/sub")

    asyncio.run(run())
