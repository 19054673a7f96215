"""Fixtures for the tool tests: a real working directory and a session context on it.

Tools are called directly (``await tool.call(args, ctx)``) with a real
:class:`ToolContext`; arguments go through :func:`check_arguments` first, as the agent
does, so declared defaults apply exactly as in a session.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dsh.runtime.kernel.plugin import Plugin
from dsh.runtime.kernel.schema import validate
from dsh.runtime.tools.base import ToolContext, ToolResult, check_arguments


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: ``os.kill(pid, 0)``, a zombie nobody reaped yet counting as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return not os.path.isdir("/proc")  # no /proc to ask (macOS): kill(0) said alive


def make_plugin(cls: type[Plugin], **config: Any) -> Plugin:
    """A plugin instance with its config validated and defaults filled, as the kernel does."""
    schema = cls.manifest.config_schema or {}
    return cls("row", validate(schema, config, row_id="row"))


def tools_of(plugin: Plugin) -> dict[str, Any]:
    """The tools ``plugin.apply`` registers, by name."""
    found: dict[str, Any] = {}

    class Reg:
        def tool(self, tool: Any) -> None:
            found[tool.name] = tool

        def hook(self, event: str, name: str, fn: Any) -> None:
            """Hooks are not tools: a tool test that needs one calls the plugin directly."""

    plugin.apply(Reg())  # type: ignore[arg-type]
    return found


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The session's working directory: a fresh, real folder."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def ctx(work: Path) -> ToolContext:
    """A session context whose working directory is ``work``."""
    cwd = [str(work)]

    def change(path: str) -> str:
        cwd[0] = os.path.join(cwd[0], path)
        return cwd[0]

    return ToolContext("s1", dict(os.environ), asyncio.Event(), lambda: cwd[0], change)


def run(tool: Any, ctx: ToolContext, **args: Any) -> ToolResult:
    """Check ``args`` like the agent does, then call the tool to completion."""
    checked: Mapping[str, Any] = check_arguments(tool, args)
    return asyncio.run(tool.call(checked, ctx))
