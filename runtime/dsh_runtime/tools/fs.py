"""The ``tools-fs`` plugin: read, write, edit, list and glob inside the working directory.

Reading tools (``read_file``, ``list_directory``, ``glob``) live here; the mutating ones
(``write_file``, ``edit_file``) in :mod:`dsh_runtime.tools.fs_write`. Every path goes
through :func:`dsh_runtime.tools.confine.resolve`, so nothing outside the session's
working directory is read or written, symlinks included. Outputs are bounded by the row's
config (``max_lines``, ``max_output_chars``, ``max_entries``) and say so when cut, so the
model knows to ask for the rest rather than assume it saw everything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsh._version import __version__

from dsh_runtime.plugin import Capability, Manifest, Plugin, Registrar
from dsh_runtime.tools.base import ToolContext, ToolResult
from dsh_runtime.tools.confine import (
    PathEscapeError,
    escape_result,
    is_inside,
    real_root,
    resolve,
    shown,
)
from dsh_runtime.tools.fs_write import EditFile, WriteFile

_PATH = {"type": "string", "description": "Path relative to the working directory."}


class ReadFile:
    """Reads a text file as numbered lines, a range at a time."""

    name = "read_file"
    description = (
        "Read a text file in the working directory. Lines are numbered from 1. Use "
        "`offset` (first line) and `limit` (line count) to read part of a long file."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 1,
                       "description": "First line to read (1-based). Default 1."},
            "limit": {"type": "integer", "minimum": 1,
                      "description": "Number of lines to read."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    mutating = False
    path_arguments = ("path",)

    def __init__(self, plugin: FsTools) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Return lines ``offset .. offset+limit-1``, numbered, within the output cap."""
        config = self._plugin.config
        path = args["path"]
        first = args.get("offset", 1)
        limit = min(args.get("limit", config["max_lines"]), config["max_lines"])
        try:
            real = resolve(ctx.cwd, path)
            with open(real, "rb") as f:
                if b"\x00" in f.read(8192):
                    return ToolResult(f"cannot read {path}: binary file", is_error=True)
            return ToolResult(_numbered(real, first, limit, config))
        except PathEscapeError as exc:
            return escape_result(exc)
        except IsADirectoryError:
            return ToolResult(f"cannot read {path}: it is a directory; use list_directory",
                              is_error=True)
        except OSError as exc:
            return ToolResult(f"cannot read {path}: {exc.strerror or exc}", is_error=True)


def _numbered(real: str, first: int, limit: int, config: Mapping[str, Any]) -> str:
    """The numbered lines of one range, with a trailing note when anything was left out."""
    budget, width = config["max_output_chars"], config["max_line_chars"]
    out: list[str] = []
    used = total = 0
    last = first - 1
    cut_by_size = False
    with open(real, encoding="utf-8", errors="replace", newline=None) as f:
        for number, line in enumerate(f, 1):
            total = number
            if number < first or number >= first + limit or cut_by_size:
                continue
            line = line.rstrip("\n")
            if len(line) > width:
                line = line[:width] + f" [... line cut at {width} characters]"
            row = f"{number:6}\t{line}"
            if used + len(row) + 1 > budget and out:
                cut_by_size = True
                continue
            out.append(row)
            used += len(row) + 1
            last = number
    if total == 0:
        return "(empty file)"
    if first > total:
        return f"(offset {first} is past the end: the file has {total} lines)"
    text = "\n".join(out)
    if last < total:
        text += (f"\n[showing lines {first}-{last} of {total}; "
                 f"read on with offset={last + 1}]")
    return text


class ListDirectory:
    """Lists one directory's entries, directories marked with a trailing slash."""

    name = "list_directory"
    description = (
        "List the entries of a directory in the working directory (default: the working "
        "directory itself). Directories end with '/', symlinks with '@'."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"path": {**_PATH, "default": "."}},
        "additionalProperties": False,
    }
    mutating = False
    path_arguments = ("path",)

    def __init__(self, plugin: FsTools) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Sorted entries, capped at ``max_entries``."""
        path = args.get("path", ".")
        cap = self._plugin.config["max_entries"]
        try:
            real = resolve(ctx.cwd, path)
            with os.scandir(real) as it:
                entries = sorted(it, key=lambda e: e.name)
        except PathEscapeError as exc:
            return escape_result(exc)
        except NotADirectoryError:
            return ToolResult(f"{path} is not a directory; use read_file", is_error=True)
        except OSError as exc:
            return ToolResult(f"cannot list {path}: {exc.strerror or exc}", is_error=True)
        names = [e.name + ("@" if e.is_symlink() else "/" if e.is_dir() else "")
                 for e in entries[:cap]]
        head = f"{shown(ctx.cwd, real)}/ ({len(entries)} entries)"
        if not entries:
            return ToolResult(f"{head}: empty")
        text = "\n".join([head, *names])
        if len(entries) > cap:
            text += f"\n[{len(entries) - cap} more entries not shown]"
        return ToolResult(text)


class Glob:
    """Finds files by glob pattern (``**`` recurses), sorted, inside the working directory."""

    name = "glob"
    description = (
        "Find files matching a glob pattern such as '**/*.py' or 'src/*.txt', relative to "
        "`path` (default: the working directory). Results are sorted paths."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern; '**' matches any depth."},
            "path": {**_PATH, "default": ".",
                     "description": "Directory to search from, relative to the working "
                                    "directory. Default: the working directory."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    mutating = False
    path_arguments = ("path",)

    def __init__(self, plugin: FsTools) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Matches under ``path`` whose real paths stay inside the working directory."""
        pattern, path = args["pattern"], args.get("path", ".")
        cap = self._plugin.config["max_entries"]
        if not pattern or os.path.isabs(pattern) or ".." in Path(pattern).parts:
            return ToolResult("pattern must be relative and must not contain '..'; "
                              "use `path` to choose where to search", is_error=True)
        try:
            base = resolve(ctx.cwd, path)
        except PathEscapeError as exc:
            return escape_result(exc)
        if not os.path.isdir(base):
            return ToolResult(f"{path} is not a directory", is_error=True)
        root = real_root(ctx.cwd)
        found: list[str] = []
        more = False
        try:
            for match in Path(base).glob(pattern):
                # A symlink inside the tree may point out of it: never report what lies there.
                if not is_inside(root, os.path.realpath(match)):
                    continue
                if len(found) == cap:
                    more = True
                    break
                found.append(os.path.relpath(match, root))
        except (OSError, ValueError) as exc:
            return ToolResult(f"glob failed: {exc}", is_error=True)
        if not found:
            return ToolResult(f"No files match {pattern!r} under {shown(ctx.cwd, base)}.")
        text = "\n".join(sorted(found))
        if more:
            text += f"\n[stopped after {cap} matches; narrow the pattern]"
        return ToolResult(text)


class FsTools(Plugin):
    """Plugin row ``tools-fs``: registers the five file tools, sharing one config."""

    manifest = Manifest(
        id="tools-fs",
        version=__version__,
        capabilities=frozenset({Capability.TOOL}),
        description="File tools confined to the working directory: read_file, write_file, "
                    "edit_file, list_directory, glob.",
        config_schema={
            "type": "object",
            "properties": {
                "max_lines": {"type": "integer", "minimum": 1, "default": 2000,
                              "description": "Most lines one read_file call returns."},
                "max_line_chars": {"type": "integer", "minimum": 1, "default": 2000,
                                   "description": "Longer lines are cut, with a note."},
                "max_output_chars": {"type": "integer", "minimum": 1, "default": 100000,
                                     "description": "Most characters one read returns."},
                "max_entries": {"type": "integer", "minimum": 1, "default": 1000,
                                "description": "Most entries list_directory and glob show."},
            },
            "additionalProperties": False,
        },
    )

    def apply(self, reg: Registrar) -> None:
        """Register the tools; they read this row's current config on every call."""
        reg.tool(ReadFile(self))
        reg.tool(WriteFile())
        reg.tool(EditFile())
        reg.tool(ListDirectory(self))
        reg.tool(Glob(self))

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New limits apply to the next call."""
        self.config = config
        return True
