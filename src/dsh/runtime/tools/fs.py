"""The ``tools-fs`` plugin: read, write, edit, list and glob inside the workspace.

Reading tools (``read_file``, ``list_directory``, ``glob``) live here; the mutating ones
(``write_file``, ``edit_file``) in :mod:`dsh.runtime.tools.fs_write`. Every path goes
through the call's boundary (:mod:`dsh.runtime.tools.confine`) and is opened beneath the
workspace root (or what the call was approved to reach) by :mod:`.safeopen`, so nothing
else is read or written, symlinks and symlinks swapped mid-call included, and the dsh
home never. Only regular files are read: a FIFO, socket or device is refused at once.
File I/O runs in a worker thread, so a slow disk never stalls the session's loop. When the
session's client offers its files (an ACP editor's ``fs/read_text_file``), ``read_file``
reads through it after the same checks, so an unsaved buffer is what the model reads
(:mod:`dsh.runtime.tools.clientside`).
Outputs are bounded by the row's config (``max_lines``, ``max_output_chars``,
``max_line_chars``, ``max_entries``) and say so when cut, so the model knows to ask for the
rest rather than assume it saw everything; a file is streamed in chunks, so even one huge
line costs bounded memory.
"""

from __future__ import annotations

import asyncio
import fnmatch
import io
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from dsh._version import __version__
from dsh.core.errors import DshError
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.tools import confine, safeopen
from dsh.runtime.tools.base import ToolContext, ToolResult
from dsh.runtime.tools.clientside import ClientSide, client_path
from dsh.runtime.tools.fs_write import EditFile, WriteFile

_PATH = {"type": "string", "description": "Path relative to the working directory."}
CHUNK = 65536
"""Bytes read at a time while streaming a file."""
BINARY_PROBE = 8192
"""A NUL byte in this many leading bytes makes a file binary."""


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
            target = confine.of(ctx).target(ctx.cwd, path)
            if ctx.client is not None and ctx.client.reads:
                return await _read_through(ctx.client, ctx.cwd, target, path, first, limit,
                                           config)
            return await asyncio.to_thread(_read, target, path, first, limit, config)
        except IsADirectoryError:
            return ToolResult(f"cannot read {path}: it is a directory; use list_directory",
                              is_error=True)
        except (confine.PathError, safeopen.BeneathError, OSError) as exc:
            return ToolResult(confine.refusal_text(path, exc, "read"), is_error=True)


def _read(target: confine.Target, path: str, first: int, limit: int,
          config: Mapping[str, Any]) -> ToolResult:
    """Open the regular file beneath its anchor and number one range of it (a thread)."""
    fd = safeopen.open_regular(target.anchor, target.rel)
    with os.fdopen(fd, "rb", buffering=0) as f:
        if b"\x00" in f.read(BINARY_PROBE):
            return ToolResult(f"cannot read {path}: binary file", is_error=True)
        f.seek(0)
        return ToolResult(numbered(f, first, limit, config))


async def _read_through(client: ClientSide, cwd: str, target: confine.Target, path: str,
                        first: int, limit: int, config: Mapping[str, Any]) -> ToolResult:
    """The file as the session's client has it (an editor's unsaved buffer included),
    numbered as a file dsh reads itself; the path was judged like any other."""
    if os.path.isdir(target.real):
        raise IsADirectoryError(target.real)
    try:
        text = await client.read_text_file(client_path(cwd, path, target.real))
    except DshError as exc:
        return ToolResult(f"cannot read {path}: the client did not give it: {exc}",
                          is_error=True)
    if "\x00" in text[:BINARY_PROBE]:
        return ToolResult(f"cannot read {path}: binary file", is_error=True)
    data = io.BytesIO(text.encode("utf-8", "replace"))
    return ToolResult(numbered(data, first, limit, config))


def numbered(f: BinaryIO, first: int, limit: int, config: Mapping[str, Any]) -> str:
    """The numbered lines ``first .. first+limit-1`` of ``f``, with a note of what was left out.

    Streams ``f`` in :data:`CHUNK`-byte pieces: of a line in range at most
    ``4 * max_line_chars`` bytes are kept (enough for that many UTF-8 characters), and
    lines out of range are only counted, so memory stays bounded whatever the file's
    shape. Lines end at ``\n``; a ``\r`` before it is dropped.
    """
    budget, width = config["max_output_chars"], config["max_line_chars"]
    keep = 4 * width + 4
    out: list[str] = []
    used = 0
    last = first - 1
    cut_by_size = False
    number = 1  # the line being read
    current = bytearray()
    overflow = False
    pending = False  # the current line has bytes and no newline yet

    def finish() -> None:
        nonlocal used, last, cut_by_size
        if not first <= number < first + limit or cut_by_size:
            return
        text = bytes(current).decode("utf-8", "replace")
        if text.endswith("\r") and not overflow:
            text = text[:-1]
        if overflow or len(text) > width:
            text = text[:width] + f" [... line cut at {width} characters]"
        row = f"{number:6}\t{text}"
        if used + len(row) + 1 > budget and out:
            cut_by_size = True
            return
        out.append(row)
        used += len(row) + 1
        last = number

    while chunk := f.read(CHUNK):
        start = 0
        if number >= first + limit or cut_by_size or (
                number + chunk.count(b"\n") < first):
            # Nothing of this chunk is shown: count its lines and move on.
            number += chunk.count(b"\n")
            pending = not chunk.endswith(b"\n")
            continue
        while True:
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            if first <= number < first + limit and not cut_by_size:
                room = keep - len(current)
                if room > 0:
                    current += chunk[start:min(stop, start + room)]
                if stop - start > room:
                    overflow = True
            if end < 0:
                pending = pending or stop > start
                break
            finish()
            number += 1
            current.clear()
            overflow = pending = False
            start = end + 1
    if pending:
        finish()
    total = number if pending else number - 1
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
            target = confine.of(ctx).target(ctx.cwd, path)
            names = await asyncio.to_thread(_entries, target)
        except NotADirectoryError:
            return ToolResult(f"{path} is not a directory; use read_file", is_error=True)
        except (confine.PathError, safeopen.BeneathError, OSError) as exc:
            return ToolResult(confine.refusal_text(path, exc, "list"), is_error=True)
        head = f"{confine.shown(ctx.cwd, target.real)}/ ({len(names)} entries)"
        if not names:
            return ToolResult(f"{head}: empty")
        text = "\n".join([head, *names[:cap]])
        if len(names) > cap:
            text += f"\n[{len(names) - cap} more entries not shown]"
        return ToolResult(text)


def _entries(target: confine.Target) -> list[str]:
    """The directory's entries, sorted, marked ``@`` (symlink) or ``/`` (directory)."""
    return [e.name + ("@" if e.is_link else "/" if e.is_dir else "")
            for e in safeopen.listing(target.anchor, target.rel)]


class Glob:
    """Finds files by glob pattern (``**`` recurses), sorted, inside the workspace."""

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
        """Matches under ``path``; symlinks are reported only when they lead somewhere the
        call may reach, and never followed."""
        pattern, path = args["pattern"], args.get("path", ".")
        cap = self._plugin.config["max_entries"]
        parts = [p for p in pattern.split("/") if p not in ("", ".")]
        if not parts or os.path.isabs(pattern) or ".." in parts or "\x00" in pattern:
            return ToolResult("pattern must be relative and must not contain '..'; "
                              "use `path` to choose where to search", is_error=True)
        boundary = confine.of(ctx)
        try:
            target = boundary.target(ctx.cwd, path)
            found, more = await asyncio.to_thread(_glob, target, parts, cap,
                                                  lambda real: _reachable(boundary, real))
        except NotADirectoryError:
            return ToolResult(f"{path} is not a directory", is_error=True)
        except (confine.PathError, safeopen.BeneathError, OSError) as exc:
            return ToolResult(confine.refusal_text(path, exc, "search"), is_error=True)
        if not found:
            return ToolResult(f"No files match {pattern!r} under "
                              f"{confine.shown(ctx.cwd, target.real)}.")
        text = "\n".join(sorted(confine.shown(ctx.cwd, real) for real in found))
        if more:
            text += f"\n[stopped after {cap} matches; narrow the pattern]"
        return ToolResult(text)


def _reachable(boundary: confine.Boundary, real: str) -> bool:
    """Whether a symlink at ``real`` leads somewhere the call may reach."""
    try:
        return boundary.place("/", real).kind not in (confine.OUTSIDE, confine.PROTECTED)
    except confine.PathError:
        return False


def compile_glob(parts: list[str]) -> Callable[[list[str]], bool]:
    """A matcher of path components against glob ``parts`` (``**``: any number of them)."""
    regexes = [None if p == "**" else re.compile(fnmatch.translate(p)) for p in parts]

    def match(names: list[str], i: int = 0, j: int = 0) -> bool:
        while i < len(regexes):
            regex = regexes[i]
            if regex is None:
                return any(match(names, i + 1, k) for k in range(j, len(names) + 1))
            if j == len(names) or not regex.match(names[j]):
                return False
            i, j = i + 1, j + 1
        return j == len(names)

    return match


def _glob(target: confine.Target, parts: list[str], cap: int,
          reachable: Callable[[str], bool]) -> tuple[list[str], bool]:
    """Real paths under the target matching ``parts``, at most ``cap`` (and whether more)."""
    match = compile_glob(parts)
    depth = None if "**" in parts else len(parts)
    dirs_only = parts[-1] == "**"
    found: list[str] = []
    for rel, dirs, files, links in safeopen.walk(target.anchor, target.rel):
        prefix = rel.split("/") if rel else []
        entries = [*((d, "dir") for d in dirs), *((f, "file") for f in files),
                   *((n, "link") for n in links)]
        for name, kind in sorted(entries):
            names = [*prefix, name]
            if (dirs_only and kind != "dir") or not match(names):
                continue
            real = os.path.join(target.real, *names)
            if kind == "link" and not reachable(real):
                continue
            if len(found) == cap:
                return found, True
            found.append(real)
        if depth is not None and len(prefix) + 1 >= depth:
            dirs[:] = []
    return found, False


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
