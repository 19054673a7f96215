"""The ``tools-search`` plugin: the ``grep`` tool, through ripgrep when there is one.

Backends, in order of preference (row config ``backend: auto``):

``companion``
    the ``rg`` shipped beside the frozen runtime (``dsh_runtime_bin.companion_path``);
``path``
    ``rg`` found on ``PATH``;
``python``
    a pure-Python walk with :mod:`re`, for machines with neither.

All three print the same format, ``path:line:text`` sorted by path, paths relative to the
working directory, so the model never notices which one ran. Like ripgrep's defaults, the
fallback skips hidden files and directories, binary files and symlinks (it does not read
``.gitignore``). ``backend: rg`` or ``python`` forces one (tests force the fallback).
:func:`describe_backend` is what ``dsh doctor`` reports.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any, NamedTuple

from dsh import process
from dsh._version import __version__

from dsh_runtime.envpolicy import scrubbed
from dsh_runtime.plugin import Capability, Manifest, Plugin, Registrar
from dsh_runtime.tools.base import ToolContext, ToolResult
from dsh_runtime.tools.confine import PathEscapeError, escape_result, real_root, resolve

BACKENDS = ("auto", "rg", "python")


class Backend(NamedTuple):
    """The chosen search engine: ``kind`` is ``companion``, ``path`` or ``python``."""

    kind: str
    executable: str | None = None


def _companion_rg() -> str | None:
    """The frozen runtime's companion ``rg``, when that package is installed and has one."""
    try:
        from dsh_runtime_bin import companion_path  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        path = str(companion_path("rg"))
    except Exception:  # a missing or broken companion just means: look elsewhere
        return None
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def choose_backend(preference: str = "auto") -> Backend:
    """The backend ``preference`` yields on this machine (``rg`` falls back when none)."""
    if preference != "python":
        companion = _companion_rg()
        if companion:
            return Backend("companion", companion)
        on_path = shutil.which("rg")
        if on_path:
            return Backend("path", on_path)
    return Backend("python")


def describe_backend(preference: str = "auto") -> str:
    """One line for ``dsh doctor``: which grep backend a session would use, and where."""
    backend = choose_backend(preference)
    if backend.kind == "companion":
        return f"ripgrep (companion binary) {backend.executable}"
    if backend.kind == "path":
        return f"ripgrep (on PATH) {backend.executable}"
    if preference == "python":
        return "python fallback (forced by config)"
    return "python fallback (no ripgrep found)"


class Grep:
    """Searches file contents by regular expression."""

    name = "grep"
    description = (
        "Search file contents with a regular expression (ripgrep syntax). Prints "
        "'path:line:text' for each matching line. Hidden and binary files are skipped."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to search for."},
            "path": {"type": "string", "default": ".",
                     "description": "File or directory to search, relative to the working "
                                    "directory. Default: the working directory."},
            "include": {"type": "string",
                        "description": "Only search files whose name matches this glob, "
                                       "e.g. '*.py'."},
            "ignore_case": {"type": "boolean", "default": False,
                            "description": "Match case-insensitively."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    mutating = False
    path_arguments = ("path",)

    def __init__(self, plugin: SearchTools) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the search with the configured backend; cap the lines returned."""
        config = self._plugin.config
        try:
            target = resolve(ctx.cwd, args.get("path", "."))
        except PathEscapeError as exc:
            return escape_result(exc)
        if not os.path.exists(target):
            return ToolResult(f"no such file or directory: {args.get('path')}", is_error=True)
        root = real_root(ctx.cwd)
        rel = os.path.relpath(target, root)
        cap, width = config["max_matches"], config["max_line_chars"]
        backend = choose_backend(config["backend"])
        if backend.executable:
            lines, more, error = await _ripgrep(backend.executable, root, rel, args, cap)
        else:
            lines, more, error = await asyncio.to_thread(_python_grep, root, rel, args, cap)
        if error:
            return ToolResult(error, is_error=True)
        if not lines:
            return ToolResult("No matches found.")
        text = "\n".join(line if len(line) <= width else line[:width] + " [...]"
                         for line in lines)
        if more:
            text += f"\n[stopped after {cap} matching lines; narrow the pattern or path]"
        return ToolResult(text)


async def _ripgrep(rg: str, root: str, rel: str, args: Mapping[str, Any],
                   cap: int) -> tuple[list[str], bool, str | None]:
    """Matching lines from ripgrep, read until ``cap``; the process never outlives the call."""
    argv = [rg, "--no-config", "--no-heading", "--with-filename", "--line-number",
            "--color", "never", "--sort", "path"]
    if args.get("ignore_case"):
        argv.append("--ignore-case")
    if args.get("include"):
        argv += ["--glob", args["include"]]
    argv += ["--regexp", args["pattern"], "--", rel]
    # ripgrep needs nothing of the runtime's environment, least of all its secrets.
    child = await process.spawn_async(argv, cwd=root, env=scrubbed(os.environ))
    assert child.stdout is not None and child.stderr is not None
    lines: list[str] = []
    more = False
    try:
        while True:
            raw = await child.stdout.readline()
            if not raw:
                break
            if len(lines) == cap:
                more = True
                break
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line[2:] if line.startswith("./") else line)
        if more:
            child.kill()
        stderr = await child.stderr.read(4096)
        await child.exited()
        code = child.returncode
    finally:
        await child.stop(0)
    # Code 2 with matches means some files were unreadable: the matches still stand.
    if code == 2 and not lines:
        message = stderr.decode("utf-8", "replace").strip()
        return [], False, f"grep failed: {message or 'ripgrep exit code 2'}"
    return lines, more, None


def _python_grep(root: str, rel: str, args: Mapping[str, Any],
                 cap: int) -> tuple[list[str], bool, str | None]:
    """The ripgrep-free search: the same output format, sorted by path."""
    try:
        regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as exc:
        return [], False, f"grep failed: invalid regular expression: {exc}"
    include = args.get("include")
    lines: list[str] = []
    for path in _files(root, rel):
        if include and not fnmatch.fnmatch(os.path.basename(path), include):
            continue
        try:
            with open(os.path.join(root, path), "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                if len(lines) == cap:
                    return lines, True, None
                lines.append(f"{path}:{number}:{line}")
    return lines, False, None


def _files(root: str, rel: str) -> list[str]:
    """Files to search under ``rel``, relative to ``root``, sorted the way ``rg --sort path``
    sorts: depth-first with each directory's entries in name order."""
    start = os.path.join(root, rel)
    if not os.path.isdir(start):
        return [os.path.normpath(rel)]
    found: list[str] = []

    def walk(directory: str) -> None:
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith(".") or entry.is_symlink():
                continue
            if entry.is_dir():
                walk(entry.path)
            elif entry.is_file():
                found.append(os.path.relpath(entry.path, root))

    walk(start)
    return found


class SearchTools(Plugin):
    """Plugin row ``tools-search``: registers :class:`Grep`."""

    manifest = Manifest(
        id="tools-search",
        version=__version__,
        capabilities=frozenset({Capability.TOOL}),
        description="The grep tool: ripgrep (companion or PATH) or a Python fallback.",
        config_schema={
            "type": "object",
            "properties": {
                "backend": {"type": "string", "enum": list(BACKENDS), "default": "auto",
                            "description": "auto: companion rg, then rg on PATH, then "
                                           "Python; rg: ripgrep if found; python: force "
                                           "the fallback."},
                "max_matches": {"type": "integer", "minimum": 1, "default": 500,
                                "description": "Most matching lines one call returns."},
                "max_line_chars": {"type": "integer", "minimum": 1, "default": 500,
                                   "description": "Longer matching lines are cut."},
            },
            "additionalProperties": False,
        },
    )

    def apply(self, reg: Registrar) -> None:
        """Register the tool; the backend is chosen per call, so no I/O happens here."""
        reg.tool(Grep(self))

    async def update(self, config: Mapping[str, Any]) -> bool:
        """A new backend or limit applies to the next call."""
        self.config = config
        return True
