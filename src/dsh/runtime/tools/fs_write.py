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

Each result carries the change as a unified diff (:mod:`dsh.runtime.tools.filediff`),
which the agent hands clients as the ``tool/result`` event's ``data.diff``; the model
reads only the one-line summary.

When the session's client offers its files (an ACP editor advertising ``fs``), both go
through it after the same checks: ``write_file`` as ``fs/write_text_file``, ``edit_file``
reading the text the client has (an unsaved buffer) and writing the result back through
it, each as far as the client offers (:mod:`dsh.runtime.tools.clientside`); the diff is
from the text the client had. Atomicity is then the client's.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from dsh.core.errors import DshError
from dsh.runtime.tools import confine, safeopen
from dsh.runtime.tools.base import ToolContext, ToolResult
from dsh.runtime.tools.clientside import client_path
from dsh.runtime.tools.filediff import MAX_DIFF_INPUT_CHARS, file_diff, omitted

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


_NOT_TEXT = object()
"""What :func:`_previous` says of a file that exists but is no text it can diff."""


def _previous(target: confine.Target) -> object:
    """The file's text before a write (None: it does not exist), for the diff; read only
    up to what :mod:`.filediff` would diff, so a huge file costs no memory here."""
    try:
        fd = safeopen.open_regular(target.anchor, target.rel)
    except FileNotFoundError:
        return None
    except (safeopen.BeneathError, OSError):
        return _NOT_TEXT  # the write reports what is wrong with it
    with os.fdopen(fd, "rb") as f:
        data = f.read(4 * MAX_DIFF_INPUT_CHARS + 1)
    if len(data) > 4 * MAX_DIFF_INPUT_CHARS:
        return _NOT_TEXT
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _NOT_TEXT


def _write_with_diff(target: confine.Target, data: bytes, text: str,
                     shown: str) -> tuple[bool, dict[str, Any]]:
    """Write ``data`` (``text`` encoded) over the file, and the diff from what was there."""
    before = _previous(target)
    existed = _write(target, data)
    if before is _NOT_TEXT:
        return existed, omitted(shown, "update", "the old content is not UTF-8 text, or "
                                                 "too large to diff")
    return existed, file_diff(shown, before if isinstance(before, str) else None, text)


def _read_text(target: confine.Target) -> str:
    """The whole file as UTF-8 (newlines kept as they are)."""
    fd = safeopen.open_regular(target.anchor, target.rel)
    with os.fdopen(fd, "rb") as f:
        return f.read().decode("utf-8")


async def _load(ctx: ToolContext, path: str, target: confine.Target) -> str:
    """The file's text: the client's (an unsaved buffer) when it offers reads."""
    client = ctx.client
    if client is None or not client.reads:
        return await asyncio.to_thread(_read_text, target)
    if os.path.isdir(target.real):
        raise IsADirectoryError(target.real)
    return await client.read_text_file(client_path(ctx.cwd, path, target.real))


async def _store(ctx: ToolContext, path: str, target: confine.Target, text: str,
                 data: bytes) -> bool:
    """Write ``text`` (``data`` encoded): through the client when it offers writes, else
    atomically here. Whether the file existed before."""
    client = ctx.client
    if client is None or not client.writes:
        return await asyncio.to_thread(_write, target, data)
    if os.path.isdir(target.real):
        raise IsADirectoryError(target.real)
    existed = os.path.lexists(target.real)
    await client.write_text_file(client_path(ctx.cwd, path, target.real), text)
    return existed


async def _write_through(ctx: ToolContext, path: str, target: confine.Target, text: str,
                         data: bytes, shown: str) -> tuple[bool, dict[str, Any]]:
    """:func:`_write_with_diff` through the client: the diff from the text it had (an
    unsaved buffer), else from the disk."""
    before: object = _NOT_TEXT
    if ctx.client is not None and ctx.client.reads and os.path.lexists(target.real):
        try:
            before = await _load(ctx, path, target)
        except DshError:
            before = _NOT_TEXT
    if before is _NOT_TEXT:
        before = await asyncio.to_thread(_previous, target)
    existed = await _store(ctx, path, target, text, data)
    if before is _NOT_TEXT:
        return existed, omitted(shown, "update", "the old content is not UTF-8 text, or "
                                                 "too large to diff")
    return existed, file_diff(shown, before if isinstance(before, str) else None, text)


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
            shown = confine.shown(ctx.cwd, target.real)
            if ctx.client is not None and ctx.client.writes:
                existed, diff = await _write_through(ctx, path, target, args["content"],
                                                     data, shown)
            else:
                existed, diff = await asyncio.to_thread(_write_with_diff, target, data,
                                                        args["content"], shown)
        except IsADirectoryError:
            return ToolResult(f"cannot write {path}: {path} is a directory", is_error=True)
        except _REFUSED as exc:
            return ToolResult(confine.refusal_text(path, exc, "write"), is_error=True)
        except DshError as exc:
            return ToolResult(f"cannot write {path}: the client did not write it: {exc}",
                              is_error=True)
        verb = "Overwrote" if existed else "Created"
        return ToolResult(f"{verb} {shown} ({len(data)} bytes).", diff=diff)


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
            text = await _load(ctx, path, target)
        except IsADirectoryError:
            return ToolResult(f"cannot edit {path}: {path} is a directory", is_error=True)
        except UnicodeDecodeError:
            return ToolResult(f"cannot edit {path}: not a UTF-8 text file", is_error=True)
        except _REFUSED as exc:
            return ToolResult(confine.refusal_text(path, exc, "read"), is_error=True)
        except DshError as exc:
            return ToolResult(f"cannot edit {path}: the client did not give it: {exc}",
                              is_error=True)
        count = text.count(old)
        if count == 0:
            return ToolResult(f"old_string not found in {path}; read the file and copy the "
                              "text exactly, including whitespace", is_error=True)
        if count > 1 and not args.get("replace_all", False):
            return ToolResult(f"old_string occurs {count} times in {path}; include more "
                              "surrounding text to make it unique, or set replace_all",
                              is_error=True)
        edited = text.replace(old, new)
        shown = confine.shown(ctx.cwd, target.real)
        try:
            await _store(ctx, path, target, edited, _encoded(edited))
        except ValueError as exc:
            return ToolResult(f"cannot edit {path}: {exc}", is_error=True)
        except _REFUSED as exc:
            return ToolResult(confine.refusal_text(path, exc, "write"), is_error=True)
        except DshError as exc:
            return ToolResult(f"cannot edit {path}: the client did not write it: {exc}",
                              is_error=True)
        diff = await asyncio.to_thread(file_diff, shown, text, edited)
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolResult(f"Edited {shown}: replaced {count} {noun}.", diff=diff)
