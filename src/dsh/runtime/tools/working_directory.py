"""The ``working_directory`` tool: where the session works, and moving it.

The trivial-but-real tool: it reads and changes session state through the
:class:`~dsh.runtime.tools.base.ToolContext`, so a scripted turn exercises the whole tool
path (arguments, guardrails, results) without touching the filesystem.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.tools import confine
from dsh.runtime.tools.base import ToolContext, ToolResult


class WorkingDirectory:
    """Reports the session's working directory; with ``cd``, changes it first.

    Not mutating: it moves the session, never a file. ``cd`` is a path argument, so the
    agent judges it against the session's boundary like any other: inside the workspace
    root it moves freely, out of it only when approved, into the dsh home never. The root
    does not move with it.
    """

    name = "working_directory"
    description = (
        "Show the current working directory, or change it with `cd` "
        "(relative to the current one, or absolute)."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "cd": {
                "type": "string",
                "description": "Directory to change to, relative to the current working directory.",
            },
        },
        "additionalProperties": False,
    }
    mutating = False
    path_arguments = ("cd",)

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Change directory when asked, then report where the session is."""
        if "cd" in args:
            try:
                confine.of(ctx).target(ctx.cwd, args["cd"])
                ctx.set_cwd(os.path.normpath(confine.absolute(ctx.cwd, args["cd"])))
            except confine.PathError as exc:
                return ToolResult(confine.refusal_text(args["cd"], exc), is_error=True)
            except NotADirectoryError as exc:
                return ToolResult(str(exc), is_error=True)
        return ToolResult(f"Current working directory: {json.dumps(ctx.cwd)}")


class WorkingDirectoryTool(Plugin):
    """Plugin row ``tool-working-directory``: registers :class:`WorkingDirectory`."""

    manifest = Manifest(
        id="tool-working-directory",
        version=__version__,
        capabilities=frozenset({Capability.TOOL}),
        description="The working_directory tool: show or change the session's directory.",
        config_schema={"type": "object", "additionalProperties": False},
    )

    def apply(self, reg: Registrar) -> None:
        """Register the tool."""
        reg.tool(WorkingDirectory())
