"""The installed runtime payload: where the frozen executable is, and whether it is intact.

The wheel holds one frozen ``dsh`` (``dsh-runtime-<platform>-<arch>[.exe]``), its support
folder, companion programs named ``<executable>-<name>[.exe]`` beside it, and
``runtime.json``: the version, the platform and the sha256 of every payload file. The
build hook (``wheels/hatch_build.py``) loads this module by path to name and hash files
the same way, so the writer and the reader of the manifest cannot drift apart.

Only the standard library is used: SDK clients import this to find their runtime, and an
import must never cost more than reading one small JSON file. ``hashlib`` (which loads
OpenSSL) and ``platform`` cost several milliseconds of every client's start, so they are
imported only by what needs them: hashing, and naming a Windows host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MANIFEST_NAME = "runtime.json"
MANIFEST_FORMAT = 1
VERSION_NAME = "VERSION"
"""The runtime's version alone, beside the manifest (which records it too, and hashes this
file): every SDK client's start compares it with its own ``dsh`` before spawning, and the
manifest's parse would cost that start a millisecond or more."""

_MACHINES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_SYSTEMS = {"linux": "linux", "darwin": "macos", "windows": "win"}


class RuntimeMissingError(FileNotFoundError):
    """A payload file is not where the wheel puts it; ``searched`` lists every path tried.

    A ``FileNotFoundError`` so callers that already handle a missing file keep working;
    the message names each candidate, so a broken install explains itself.
    """

    def __init__(self, what: str, searched: Iterable[Path], note: str | None = None) -> None:
        self.searched = tuple(searched)
        places = ", ".join(str(path) for path in self.searched) or "nowhere"
        message = f"{what} not found; looked for: {places}"
        super().__init__(message if note is None else f"{message} ({note})")


class ManifestError(ValueError):
    """``runtime.json`` exists but is not a manifest this package can read."""


_PACKAGE_DIR = Path(os.path.dirname(os.path.abspath(__file__)))


def package_dir() -> Path:
    """The installed ``dsh_runtime_bin`` folder, which holds the whole payload.

    Made absolute once, at import, not resolved: a symlinked folder runs the same
    executable, and resolving every component costs each client's start ~0.2 ms.
    """
    return _PACKAGE_DIR


def host_platform_key() -> str:
    """This machine's runtime platform key, e.g. ``linux-x64`` (may be one not shipped).

    On POSIX ``os.uname()`` gives what ``platform.system()``/``machine()`` would (they
    read it), without importing ``platform``.
    """
    if hasattr(os, "uname"):
        names = os.uname()
        system_name, machine_name = names.sysname.lower(), names.machine.lower()
    else:
        import platform

        system_name, machine_name = platform.system().lower(), platform.machine().lower()
    system = _SYSTEMS.get(system_name, system_name)
    machine = _MACHINES.get(machine_name, machine_name)
    return f"{system}-{machine}"


def executable_name(key: str) -> str:
    """The frozen runtime's file name for platform ``key``."""
    return f"dsh-runtime-{key}" + (".exe" if key.startswith("win-") else "")


def companion_name(key: str, name: str) -> str:
    """The file name of companion ``name`` (``rg``) beside the runtime for ``key``."""
    return f"dsh-runtime-{key}-{name}" + (".exe" if key.startswith("win-") else "")


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (the runtime's largest library is ~6 MB)."""
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest in payload folder ``root``; the reader behind :func:`manifest`."""
    path = root / MANIFEST_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RuntimeMissingError("the runtime manifest", [path]) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: unreadable: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{path}: not a format-{MANIFEST_FORMAT} dsh runtime manifest")
    files = document.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
        for entry in files.values()
    ):
        raise ManifestError(f"{path}: 'files' must map each path to its sha256")
    return document


def manifest() -> dict[str, Any]:
    """The installed ``runtime.json``: version, platform, executable, companions, files.

    Raises :class:`RuntimeMissingError` when it is absent, :class:`ManifestError` when it
    is not a manifest.
    """
    return read_manifest(package_dir())


def locate_runtime(root: Path) -> Path:
    """The executable in payload folder ``root``; the lookup behind :func:`runtime_path`.

    The host's own name comes first: it is what this platform's wheel ships, and finding
    it costs one ``stat`` on every client's start, where the manifest lists every payload
    file (a 130 KB read). The manifest's name is tried next (a wheel of another platform
    run under emulation), and the error lists both names when neither exists.
    """
    host = root / executable_name(host_platform_key())
    if host.is_file():
        return host
    candidates = [host]
    note = None
    try:
        named = root / str(read_manifest(root)["executable"])
    except (RuntimeMissingError, ManifestError, KeyError) as exc:
        note = f"manifest unusable: {exc}"
    else:
        if named.is_file():
            return named
        if named != host:
            candidates.insert(0, named)
    raise RuntimeMissingError("the dsh runtime executable", candidates, note)


def locate_companion(root: Path, name: str) -> Path:
    """Companion ``name`` beside the executable in ``root``; behind :func:`companion_path`."""
    runtime = locate_runtime(root)
    suffix = runtime.suffix
    candidate = runtime.with_name(f"{runtime.stem}-{name}{suffix}")
    if candidate.is_file():
        return candidate
    try:
        known = sorted(read_manifest(root).get("companions", {}))
    except (RuntimeMissingError, ManifestError):
        known = []
    raise RuntimeMissingError(f"companion {name!r}", [candidate],
                              f"companions in the manifest: {', '.join(known) or 'none'}")


def runtime_path() -> Path:
    """The installed frozen ``dsh`` executable; SDK clients spawn it as the exe carrier."""
    return locate_runtime(package_dir())


def companion_path(name: str) -> Path:
    """The installed companion program ``name`` (``"rg"``) that ships beside the runtime."""
    return locate_companion(package_dir(), name)


def check_files(root: Path, files: dict[str, dict[str, Any]]) -> list[str]:
    """Paths in ``files`` (relative to ``root``) that are missing or fail their sha256."""
    failed = []
    for relative, entry in sorted(files.items()):
        path = root / relative
        if not path.is_file() or file_sha256(path) != entry["sha256"]:
            failed.append(relative)
    return failed


def verify() -> list[str]:
    """Installed payload files that fail their manifest sha256 (missing ones included).

    An empty list means the runtime is exactly what was built; ``dsh doctor`` reports the
    rest. Raises like :func:`manifest` when the manifest itself is missing or corrupt.
    """
    root = package_dir()
    return check_files(root, read_manifest(root)["files"])


def version() -> str:
    """The version the runtime was built as (the ``dsh`` version it is pinned to), read
    from :data:`VERSION_NAME`.

    Raises :class:`RuntimeMissingError` when that file is absent, :class:`ManifestError`
    when it is unreadable or empty.
    """
    path = package_dir() / VERSION_NAME
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise RuntimeMissingError("the runtime version file", [path]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: unreadable: {exc}") from exc
    if not text:
        raise ManifestError(f"{path}: empty")
    return text
