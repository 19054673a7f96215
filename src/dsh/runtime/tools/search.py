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

The search root is opened beneath the workspace root by :mod:`.safeopen` (never through a
swapped symlink) and ripgrep is started *in that directory's fd* (``/proc/self/fd/N`` as
its working directory, the fd passed to it) and told to search ``.``, so it reads exactly
the directory that was checked; it follows no symlink below it (no ``-L``). A single file
is opened the same way and given to ripgrep on stdin. Without ``/proc`` (macOS, Windows)
ripgrep runs in the directory's checked real path. Where a protected directory (the dsh
home) lies inside the search root the Python fallback runs instead: it walks without
following links, never enters the protected directory, and opens each file through the
boundary again. The fallback streams each file, so a huge line costs bounded memory.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from dsh._version import __version__
from dsh.core import process
from dsh.runtime.kernel.envpolicy import scrubbed
from dsh.runtime.kernel.plugin import Capability, Checkup, Diagnosis, Manifest, Plugin, Registrar
from dsh.runtime.tools import confine, safeopen
from dsh.runtime.tools.base import ToolContext, ToolResult

BACKENDS = ("auto", "rg", "python")
LINE_BYTES = 1 << 20
"""The fallback matches the first this-many bytes of a line (bounded memory)."""


class Backend(NamedTuple):
    """The chosen search engine: ``kind`` is ``companion``, ``path`` or ``python``."""

    kind: str
    executable: str | None = None


def _companion_rg() -> str | None:
    """The frozen runtime's companion ``rg``, when that package is installed and has one."""
    try:
        from dsh_runtime_bin import companion_path
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
        path = args.get("path", ".")
        cap, width = config["max_matches"], config["max_line_chars"]
        backend = choose_backend(config["backend"])
        try:
            target = confine.of(ctx).target(ctx.cwd, path)
            shown = confine.shown(ctx.cwd, target.real)
            inner = [p for p in target.anchor.forbid if confine.is_inside(target.real, p)]
            if backend.executable and not inner:
                opened = await asyncio.to_thread(_open_for_rg, target)
                try:
                    lines, more, error = await _ripgrep(backend.executable, opened, shown,
                                                        args, cap)
                finally:
                    opened.close()
            else:
                lines, more, error = await asyncio.to_thread(_python_grep, target, shown,
                                                             args, cap)
        except FileNotFoundError:
            return ToolResult(f"no such file or directory: {path}", is_error=True)
        except (confine.PathError, safeopen.BeneathError, OSError) as exc:
            return ToolResult(confine.refusal_text(path, exc, "search"), is_error=True)
        if error:
            return ToolResult(error, is_error=True)
        if not lines:
            return ToolResult("No matches found.")
        text = "\n".join(line if len(line) <= width else line[:width] + " [...]"
                         for line in lines)
        if more:
            text += f"\n[stopped after {cap} matching lines; narrow the pattern or path]"
        return ToolResult(text)


class _Opened:
    """What ripgrep is given: a directory to run in (``cwd``, with ``fd`` passed along when
    it is ``/proc/self/fd/N``) or a regular file's ``fd`` for its stdin."""

    def __init__(self, fd: int | None, cwd: str | None) -> None:
        self.fd = fd
        self.cwd = cwd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _open_for_rg(target: confine.Target) -> _Opened:
    """The search root as ripgrep should see it: exactly what was checked where the OS
    lets a child start in an fd's directory (Linux), else the checked real path."""
    try:
        return _Opened(safeopen.open_regular(target.anchor, target.rel), None)
    except IsADirectoryError:
        pass
    if safeopen.WINDOWS:
        return _Opened(None, safeopen.checked_dir(target.anchor, target.rel))
    fd = safeopen.open_dir(target.anchor, target.rel)
    where = safeopen.fd_directory(fd)
    if where is None:  # no /proc (macOS): the directory's checked path
        os.close(fd)
        return _Opened(None, safeopen.checked_dir(target.anchor, target.rel))
    return _Opened(fd, where)


def _joined(shown: str, rel: str) -> str:
    """A result path: ``rel`` (below the search root) as shown from the working directory."""
    rel = rel[2:] if rel.startswith("./") else rel
    return rel if shown == "." else os.path.join(shown, rel)


async def _ripgrep(rg: str, opened: _Opened, shown: str, args: Mapping[str, Any],
                   cap: int) -> tuple[list[str], bool, str | None]:
    """Matching lines from ripgrep, read until ``cap``; the process never outlives the call.

    A directory is searched as ``.`` from ``opened.cwd``; a file is read from stdin and
    its lines labelled with ``shown``.
    """
    argv = [rg, "--no-config", "--no-heading", "--with-filename", "--line-number",
            "--color", "never", "--sort", "path"]
    if args.get("ignore_case"):
        argv.append("--ignore-case")
    if args.get("include"):
        argv += ["--glob", args["include"]]
    directory = opened.cwd is not None
    argv += ["--regexp", args["pattern"], "--", "." if directory else "-"]
    passed = (opened.fd,) if directory and opened.fd is not None else ()
    # ripgrep needs nothing of the runtime's environment, least of all its secrets.
    child = await process.spawn_async(
        argv, cwd=opened.cwd, env=scrubbed(os.environ), pass_fds=passed,
        stdin=process.DEVNULL if directory else opened.fd)
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
            if not directory:
                lines.append(shown + line.removeprefix("<stdin>"))
            else:
                name, sep, rest = line.partition(":")
                lines.append(_joined(shown, name) + sep + rest)
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


def _python_grep(target: confine.Target, shown: str, args: Mapping[str, Any],
                 cap: int) -> tuple[list[str], bool, str | None]:
    """The ripgrep-free search of the target: the same output, sorted by path.

    Lists the tree without following links (:func:`safeopen.walk`, which never enters a
    protected directory), skips hidden entries, then opens each file through the
    boundary again, so a name swapped for a link meanwhile cannot lead it outside.
    """
    try:
        regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as exc:
        return [], False, f"grep failed: invalid regular expression: {exc}"
    lines: list[str] = []
    try:
        fd = safeopen.open_regular(target.anchor, target.rel)
    except IsADirectoryError:
        fd = None
    if fd is not None:
        return lines, _grep_file(fd, regex, shown, lines, cap), None
    include = args.get("include")
    found: list[tuple[str, ...]] = []
    for rel, dirs, files, _ in safeopen.walk(target.anchor, target.rel):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        prefix = tuple(rel.split("/")) if rel else ()
        found += [(*prefix, name) for name in files if not name.startswith(".")
                  and (not include or fnmatch.fnmatch(name, include))]
    for parts in sorted(found):
        rel = "/".join(parts)
        try:
            fd = safeopen.open_regular(target.anchor, os.path.join(target.rel, rel))
        except (OSError, safeopen.BeneathError):
            continue  # swapped, unreadable, or no regular file: skipped, as rg does
        if _grep_file(fd, regex, _joined(shown, rel), lines, cap):
            return lines, True, None
    return lines, False, None


def _grep_file(fd: int, regex: re.Pattern[str], label: str, lines: list[str],
               cap: int) -> bool:
    """Add ``label:number:line`` for each matching line of the regular file ``fd`` (closed
    here); True when ``cap`` was reached with more to report."""
    with os.fdopen(fd, "rb", buffering=0) as f:
        head = f.read(8192)
        if b"\x00" in head:
            return False
        for number, raw in enumerate(_stream_lines(f, head), 1):
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if regex.search(line):
                if len(lines) == cap:
                    return True
                lines.append(f"{label}:{number}:{line}")
    return False


def _stream_lines(f: Any, head: bytes) -> Iterator[bytes]:
    """The lines of ``f`` (``head`` being its first bytes), each cut to :data:`LINE_BYTES`."""
    current = bytearray()
    chunk = head
    while chunk:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            room = LINE_BYTES - len(current)
            if room > 0:
                current += chunk[start:min(stop, start + room)]
            if end < 0:
                break
            yield bytes(current)
            current.clear()
            start = end + 1
        chunk = f.read(65536)
    if current:
        yield bytes(current)


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

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``tools.grep``: which backend the grep tool uses on this machine."""
        preference = config.get("backend", "auto")
        kind = choose_backend(preference if preference in BACKENDS else "auto").kind
        message = {"companion": "ripgrep (the runtime's companion)",
                   "path": "ripgrep (on PATH)"}.get(kind, "python (as configured)"
                                                     if preference == "python" else
                                                     "python fallback (no ripgrep found; "
                                                     "slower on large trees)")
        return [Diagnosis("tools.grep", "ok", message)]
