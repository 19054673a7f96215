"""The mutating file tools of ``tools-fs``: ``write_file`` and ``edit_file``.

Both write through :func:`atomic_write`: a temporary file in the target's own directory,
flushed and fsynced, then ``os.replace``\\d over the target. A crash or a full disk leaves
either the old file or the new one, never half of each, and no temporary file behind.
Both declare ``path_arguments = ("path",)``, so the workspace policy lets them run unasked
exactly when the path stays inside the working directory; the tools refuse escapes
themselves too (:mod:`dsh_runtime.tools.confine`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Mapping
from typing import Any

from dsh_runtime.tools.base import ToolContext, ToolResult
from dsh_runtime.tools.confine import PathEscapeError, escape_result, resolve, shown


def atomic_write(path: str, data: str) -> None:
    """Replace ``path`` with ``data`` (UTF-8) atomically, creating parent directories.

    An existing file keeps its permission bits. The directory is fsynced after the rename
    where the platform allows, so the new name itself survives a power cut.
    """
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    try:
        mode: int | None = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    fd, temp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_dir(parent)


def _fsync_dir(path: str) -> None:
    """Persist a rename; a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _target(ctx: ToolContext, path: str) -> str:
    """The resolved path of a file to write; a directory there is an error for the model."""
    real = resolve(ctx.cwd, path)
    if os.path.isdir(real):
        raise IsADirectoryError(f"{path} is a directory")
    return real


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
        try:
            real = _target(ctx, args["path"])
            existed = os.path.exists(real)
            atomic_write(real, args["content"])
        except PathEscapeError as exc:
            return escape_result(exc)
        except OSError as exc:
            return ToolResult(f"cannot write {args['path']}: {exc.strerror or exc}",
                              is_error=True)
        verb = "Overwrote" if existed else "Created"
        size = len(args["content"].encode("utf-8"))
        return ToolResult(f"{verb} {shown(ctx.cwd, real)} ({size} bytes).")


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
            real = _target(ctx, path)
            with open(real, encoding="utf-8", newline="") as f:
                text = f.read()
        except PathEscapeError as exc:
            return escape_result(exc)
        except UnicodeDecodeError:
            return ToolResult(f"cannot edit {path}: not a UTF-8 text file", is_error=True)
        except OSError as exc:
            return ToolResult(f"cannot read {path}: {exc.strerror or exc}", is_error=True)
        count = text.count(old)
        if count == 0:
            return ToolResult(f"old_string not found in {path}; read the file and copy the "
                              "text exactly, including whitespace", is_error=True)
        if count > 1 and not args.get("replace_all", False):
            return ToolResult(f"old_string occurs {count} times in {path}; include more "
                              "surrounding text to make it unique, or set replace_all",
                              is_error=True)
        try:
            atomic_write(real, text.replace(old, new))
        except OSError as exc:
            return ToolResult(f"cannot write {path}: {exc.strerror or exc}", is_error=True)
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolResult(f"Edited {shown(ctx.cwd, real)}: replaced {count} {noun}.")
