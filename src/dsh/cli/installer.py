"""Installing a profile's requirements into a directory: pip (or uv), its log, its cause.

``dsh plugin`` installs with ``--target`` for the interpreter dsh runs on (uv when it is
on PATH, else pip). Local paths build the way pip builds any project: in an isolated
environment that fetches the project's own build backend (hatchling, setuptools, ...),
so a plugin builds whatever is installed beside dsh. Only when that fetch fails (no
index reachable: offline) and every local project's backend is importable here does the
install run again without isolation, with the backend of this environment, and says so.

The installer's whole output goes to a log file. On success it is discarded; on failure
it is kept under ``$DSH_HOME/logs/`` and the error names it, with the cause read from the
output (:func:`cause`): the failing step and its error lines, never pip's closing "See
above for output."
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dsh.config.tomltext import parse_toml
from dsh.core import process
from dsh.core.errors import ConfigError, PluginError

MESSAGE_LIMIT = 300
"""Characters of one quoted cause."""
LOG_DIR = "logs"

_OS_ERROR = re.compile(r"\[Errno \d+\] [^:'\"\]]+")
_STEP = re.compile("^\\s*\u00d7 (.+?)\\.?\\s*$")  # "<x> step did not run..."
_BLOCK_START = re.compile(r"^\s*╰─> \[\d+ lines? of output\]\s*$")
_BLOCK_END = "[end of output]"
_ERROR_LINE = re.compile(r"^\s*(?:ERROR|error|Caused by):\s*(.+)$")
# What the failing step says when it could not fetch the project's build backend.
_FETCH_STEPS = ("install build dependencies", "build dependencies", "build-system.requires")
_NOISE = ("subprocess-exited-with-error",)


def is_local(spec: str) -> bool:
    """Whether a requirement is a path (as opposed to a name with a version range)."""
    return spec.startswith((".", "/", "~")) or os.sep in spec or (
        os.altsep is not None and os.altsep in spec)


def _note(text: str) -> None:
    from dsh.core.termtext import visible  # notes quote pip's output and package names

    sys.stderr.write(f"dsh: {visible(text)}\n")


def cause(output: str) -> tuple[str, bool]:
    """The cause of a failed install, read from the installer's output, and whether the
    failing step was fetching a build backend (what an offline machine hits first).

    pip reports a failing build step as a ``<step> did not run successfully.`` line (marked
    with a multiplication sign) followed by the step's own output between ``╰─> [N lines
    of output]`` and ``[end of output]``; the error lines there (or the last line, often
    an exception) are the cause.
    A crash of pip itself (``ERROR: Exception:``) is named by its last OS error (a full
    disk) or its exception line; other failures by their ``ERROR:`` lines.
    """
    lines = [line.rstrip() for line in output.splitlines()]
    text = [line for line in lines if line.strip()]
    if any(line.strip() == "ERROR: Exception:" for line in text):
        errors = _OS_ERROR.findall(output)
        return _cut(errors[-1] if errors else text[-1].strip()), False
    step = next((m.group(1) for line in text if (m := _STEP.match(line))), None)
    block = _first_block(lines)
    if step is not None:
        detail = _errors(block) or ([block[-1]] if block else [])
        fetching = any(marker in step for marker in _FETCH_STEPS)
        return _cut(f"{step}: {'; '.join(detail)}" if detail else step), fetching
    errors = _errors(text)
    if errors:
        fetching = any(marker in output for marker in _FETCH_STEPS)
        return _cut("; ".join(errors)), fetching
    return _cut(text[-1].strip() if text else "no output"), False


def _first_block(lines: list[str]) -> list[str]:
    """The lines of the first ``╰─> [N lines of output]`` block, stripped."""
    for i, line in enumerate(lines):
        if _BLOCK_START.match(line):
            block = []
            for inner in lines[i + 1:]:
                if inner.strip() == _BLOCK_END:
                    break
                if inner.strip():
                    block.append(inner.strip())
            return block
    return []


def _errors(lines: list[str]) -> list[str]:
    """The ``ERROR:``/``error:``/``Caused by:`` lines, without the prefix, in order."""
    found = []
    for line in lines:
        match = _ERROR_LINE.match(line)
        if match and match.group(1).strip() not in _NOISE and match.group(1) not in found:
            found.append(match.group(1).strip())
    return found


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


def install(requirements: list[str], target: Path, *, home: Path, label: str) -> None:
    """Install ``requirements`` into ``target``; a failure is PluginError (exit 1) naming
    the cause and the kept log (``label`` names the log: ``plugin-<label>-<time>.log``)."""
    local = [r for r in requirements if is_local(r)]
    with tempfile.NamedTemporaryFile("w+", prefix="dsh-plugin-", suffix=".log",
                                     encoding="utf-8", errors="replace") as log:
        code = _run([*_installer(target), *requirements], log)
        if code == 0:
            return
        why, fetching = cause(_read(log))
        if fetching and local:
            missing = [b for b in (_backend_missing(Path(r)) for r in local) if b]
            if not missing:
                _note("note: the build backend could not be fetched (offline?): building "
                      f"{', '.join(local)} with this environment's instead")
                log.write("\n\n==== dsh: again, without build isolation ====\n\n")
                log.flush()
                code = _run([*_installer(target), "--no-build-isolation", *requirements], log)
                if code == 0:
                    return
                why, _ = cause(_read(log, after="==== dsh: again"))
            else:
                why += (f" (offline? {', '.join(missing)} is not installed here either, "
                        "so dsh cannot build it without the index)")
        kept = _keep(Path(log.name), home, label)
        raise PluginError(f"installing {' '.join(requirements)} failed: {why} "
                          f"(installer log: {kept}; nothing was changed)")


def _installer(target: Path) -> list[str]:
    """The install command line for this interpreter: uv when on PATH, else pip."""
    uv = shutil.which("uv")
    if uv:
        return [uv, "pip", "install", "--python", sys.executable, "--target", str(target)]
    return [*process.python_command("pip"), "install", "--target", str(target), "--no-input",
            "--disable-pip-version-check", "--no-warn-script-location", "--progress-bar",
            "off"]


def _run(argv: list[str], log: Any) -> int:
    """Run the installer with its output (both streams) appended to ``log``."""
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    try:
        child = process.spawn(argv, stdout=log, stderr=process.STDOUT)
    except OSError as exc:
        raise PluginError(f"cannot start the installer {argv[0]} ({exc.strerror or exc}); "
                          "nothing was changed") from exc
    try:
        code = child.wait()
    finally:
        child.stop(0)  # what the build left running in its group goes with it
    log.flush()
    assert code is not None
    return code


def _read(log: Any, *, after: str | None = None) -> str:
    log.seek(0)
    text = log.read()
    log.seek(0, os.SEEK_END)
    if after is not None and after in text:
        text = text[text.index(after):]
    return text


def _keep(log: Path, home: Path, label: str) -> Path:
    """Copy the log to ``$DSH_HOME/logs/plugin-<label>-<UTC time>-<pid>.log``; when the
    home cannot take it, the temporary file is kept instead (and named)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    folder = home / LOG_DIR
    kept = folder / f"plugin-{label}-{stamp}-{os.getpid()}.log"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(log, kept)
    except OSError:
        fd, spare = tempfile.mkstemp(prefix="dsh-plugin-", suffix=".log")
        os.close(fd)
        shutil.copyfile(log, spare)
        return Path(spare)
    return kept


def build_backend(project: Path) -> tuple[str, list[str]]:
    """A local project's build backend module and build requirements (PEP 517/518; no
    ``[build-system]`` means setuptools' legacy backend)."""
    legacy = ("setuptools.build_meta:__legacy__", ["setuptools>=40.8.0"])
    pyproject = project / "pyproject.toml"
    try:
        data = parse_toml(pyproject.read_text(encoding="utf-8"), pyproject)
    except (OSError, UnicodeDecodeError, ConfigError):
        return legacy
    system = data.get("build-system")
    if not isinstance(system, dict):
        return legacy
    backend = system.get("build-backend")
    requires = system.get("requires", [])
    if not isinstance(requires, list):
        requires = []
    return (backend if isinstance(backend, str) and backend else legacy[0],
            [r for r in requires if isinstance(r, str)])


def _backend_missing(project: Path) -> str | None:
    """What of ``project``'s build backend this environment lacks (None: it has it all)."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, distribution

    backend, requires = build_backend(project)
    module = backend.split(":", 1)[0].split(".")[0]
    try:
        if importlib.util.find_spec(module) is None:
            return module
    except (ImportError, ValueError):
        return module
    for requirement in requires:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match is None:
            continue
        try:
            distribution(match.group(1))
        except PackageNotFoundError:
            return match.group(1)
    return None
