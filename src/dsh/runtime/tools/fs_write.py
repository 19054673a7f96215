"""The mutating file tools of ``tools-fs``: ``write_file`` and ``edit_file``.

Both write through :func:`dsh.runtime.tools.safeopen.write_file`: a temporary file in
the target's own directory, fsynced, then renamed over the target, both through one fd of
that directory, opened beneath the workspace root without following a swapped symlink.
A crash or a full disk leaves either the old file or the new one, never half of each,
and no temporary file behind; a parent directory swapped mid-write cannot redirect it.
Both declare ``path_arguments = ("path",)``, so the agent judges the path against the
session's boundary before the call (:mod:`dsh.runtime.tools.confine`) and the workspace
policy lets them run unasked exactly when it stays inside the root. Only regular files
are edited or overwritten. The I/O runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from dsh.runtime.tools import confine, safeopen
from dsh.runtime.tools.base import ToolContext, ToolResult

_REFUSED = (confine.PathError, safeopen.BeneathError, OSError)


def _encoded(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (no character at all) is a ValueError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"the text holds a lone surrogate at index {exc.start}, which "
                         "is not a character and cannot be written as UTF-8") from None


def _write(target: confine.Target, data: bytes) -> bool:
    return safeopen.write_file(target.anchor, target.rel, data)


def _read_text(target: confine.Target) -> str:
    """The whole file as UTF-8 (newlines kept as they are)."""
    fd = safeopen.open_regular(target.anchor, target.rel)
    with os.fdopen(fd, "rb") as f:
        return f.read().decode("utf-8")


class WriteFile:
    """Creates or overwrites a whole file."""

    name = "write_file"
    description = (
        "Write a file in the working directory, replacing it if it exists and creating "
        "missing parent directories. The write is atomic. Prefer edit_file for small changes."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string",
                     "description": "File path, relative to the working directory."},
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    mutating = True
    path_arguments = ("path",)

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Write ``content`` to ``path`` atomically."""
        path = args["path"]
        try:
            data = _encoded(args["content"])
        except ValueError as exc:
            return ToolResult(f"cannot write {path}: {exc}", is_error=True)
        try:
            target = confine.of(ctx).target(ctx.cwd, path)
            existed = await asyncio.to_thread(_write, target, data)
        except IsADirectoryError:
            return ToolResult(f"cannot write {path}: {path} is a directory", is_error=True)
        except _REFUSED as exc:
            return ToolResult(confine.refusal_text(path, exc, "write"), is_error=True)
        verb = "Overwrote" if existed else "Created"
        return ToolResult(f"{verb} {confine.shown(ctx.cwd, target.real)} ({len(data)} bytes).")


class EditFile:
    """Replaces an exact string in a file: the cheap, reviewable way for a model to edit."""

    name = "edit_file"
    description = (
        "Edit a file by replacing an exact string. `old_string` must occur exactly once "
        "(include surrounding lines to make it unique) unless `replace_all` is true. "
        "Read the file first; whitespace and indentation must match exactly."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string",
                     "description": "File path, relative to the working directory."},
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {"type": "boolean", "default": False,
                            "description": "Replace every occurrence instead of exactly one."},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    mutating = True
    path_arguments = ("path",)

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Replace ``old_string`` by ``new_string``; refuse ambiguous or missing matches."""
        path, old, new = args["path"], args["old_string"], args["new_string"]
        if not old:
            return ToolResult("old_string is empty; use write_file to create a file",
                              is_error=True)
        if old == new:
            return ToolResult("old_string and new_string are the same; nothing to change",
                              is_error=True)
        try:
            target = confine.of(ctx).target(ctx.cwd, path)
            text = await asyncio.to_thread(_read_text, target)
        except IsADirectoryError:
            return ToolResult(f"cannot edit {path}: {path} is a directory", is_error=True)
        except UnicodeDecodeError:
            return ToolResult(f"cannot edit {path}: not a UTF-8 text file", is_error=True)
        except _REFUSED as exc:
            return ToolResult(confine.refusal_text(path, exc, "read"), is_error=True)
        count = text.count(old)
        if count == 0:
            return ToolResult(f"old_string not found in {path}; read the file and copy the "
                              "text exactly, including whitespace", is_error=True)
        if count > 1 and not args.get("replace_all", False):
            return ToolResult(f"old_string occurs {count} times in {path}; include more "
                              "surrounding text to make it unique, or set replace_all",
                              is_error=True)
        try:
            await asyncio.to_thread(_write, target, _encoded(text.replace(old, new)))
        except ValueError as exc:
            return ToolResult(f"cannot edit {path}: {exc}", is_error=True)
        except _REFUSED as exc:
            return ToolResult(confine.refusal_text(path, exc, "write"), is_error=True)
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolResult(f"Edited {confine.shown(ctx.cwd, target.real)}: replaced "
                          f"{count} {noun}.")
