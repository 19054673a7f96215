"""Trusted project folders: whose own ``.env`` may route the user's credentials.

A project's ``.env`` is read on every launch in that folder, and a cloned repository's
``.env`` is written by whoever wrote the repository. Names that decide where credentials
go (provider base URLs, proxies, CA bundles, ``DSH_POSTGRES_DSN``: see
:data:`dsh.envsnapshot.ROUTING`) are therefore taken from a project's ``.env`` only when
the user said so: ``dsh trust [PATH]``, recorded in ``$DSH_HOME/trusted.toml``::

    # Folders whose own .env may route credentials (dsh trust; docs/security.md).
    [[folder]]
    path = "/home/me/work/shop"
    routing = "sha256:1f0c..."

Trust covers the routing settings **as they were when the user trusted the folder**
(``routing`` is a digest of those names and values): anything that later adds or changes
one (a ``git pull``, or the model writing ``.env`` in its workspace) makes them ignored
again, with a warning, until ``dsh trust`` is run again. Other names of the file are
never affected. A folder is trusted exactly (not its subfolders: a launch reads only its
own working directory's ``.env``), compared by real path, so a symlink or a ``..``
spelling of a folder is the same folder. Changes are atomic (a temporary file renamed
over the old one) under a lock, so two ``dsh trust`` commands never lose each other's
change. The file is the user's: a malformed one is an error naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from dsh.errors import ConfigError, UsageError

TRUST_FILE = "trusted.toml"
_HEADER = ("# Folders whose own .env may route credentials (provider base URLs, proxies, CA\n"
           "# bundles, DSH_POSTGRES_DSN) as they were when trusted. Managed by `dsh trust`;\n"
           "# see docs/security.md.\n")


def records(home: Path) -> dict[str, str]:
    """Trusted folder (real path) -> digest of its routing settings; ``{}`` without a file."""
    path = home / TRUST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") \
            from exc
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
    unknown = sorted(set(data) - {"folder"})
    if unknown:
        raise ConfigError(f"{path}: unknown key '{unknown[0]}' (expected [[folder]] tables)")
    found: dict[str, str] = {}
    entries = data.get("folder", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: 'folder' must be [[folder]] tables")
    for index, entry in enumerate(entries):
        where = f"{path}: folder {index + 1}"
        if not isinstance(entry, dict) or set(entry) != {"path", "routing"}:
            raise ConfigError(f"{where}: expected exactly the keys 'path' and 'routing'")
        folder, routing = entry["path"], entry["routing"]
        if not isinstance(folder, str) or not os.path.isabs(folder):
            raise ConfigError(f"{where}: 'path' must be an absolute path")
        if not isinstance(routing, str) or not routing.startswith("sha256:"):
            raise ConfigError(f"{where}: 'routing' must be a sha256: digest")
        found[folder] = routing
    return found


def folders(home: Path) -> list[str]:
    """The trusted folders, as recorded (real paths), in the order they were trusted."""
    return list(records(home))


def digest(routing: Mapping[str, str]) -> str:
    """The digest ``trusted.toml`` keeps of a folder's routing names and values."""
    text = json.dumps(sorted(routing.items()), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def verdict(home: Path, folder: Path, routing: Mapping[str, str]) -> str:
    """Whether ``folder``'s ``routing`` settings are trusted: ``trusted``, ``changed`` (the
    folder is, with other settings) or ``untrusted``."""
    from dsh.envsnapshot import CHANGED, TRUSTED, UNTRUSTED

    recorded = records(home).get(os.path.realpath(folder))
    if recorded is None:
        return UNTRUSTED
    return TRUSTED if recorded == digest(routing) else CHANGED


def add(home: Path, folder: Path) -> str:
    """Trust ``folder`` (an existing directory) with its ``.env``'s routing settings as
    they are now: ``added``, ``updated`` (it was, with other settings) or ``unchanged``."""
    from dsh.envsnapshot import routing_settings

    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        raise UsageError(f"{folder}: not an existing directory")
    now = digest(routing_settings(Path(real) / ".env"))
    with _locked(home):
        recorded = records(home)
        before = recorded.get(real)
        if before == now:
            return "unchanged"
        recorded[real] = now
        _write(home, recorded)
    return "added" if before is None else "updated"


def remove(home: Path, folder: Path) -> None:
    """Stop trusting ``folder`` (given as recorded, or any path to it); exit 2 when it was
    not trusted."""
    candidates = {os.path.abspath(folder), os.path.realpath(folder)}
    with _locked(home):
        recorded = records(home)
        kept = {f: d for f, d in recorded.items() if f not in candidates}
        if len(kept) == len(recorded):
            raise UsageError(f"{folder}: not a trusted folder (`dsh trust --list` shows them)")
        _write(home, kept)


def _write(home: Path, recorded: Mapping[str, str]) -> None:
    """Replace the file atomically (a crash leaves the old one or the new one whole)."""
    path = home / TRUST_FILE
    try:
        body = "".join(f"\n[[folder]]\npath = {json.dumps(f, ensure_ascii=False)}\n"
                       f"routing = {json.dumps(d)}\n" for f, d in recorded.items())
        data = (_HEADER + body).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError("a trusted folder's path must be valid UTF-8") from exc
    try:
        fd, staging = tempfile.mkstemp(dir=home, prefix=".trusted.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(staging, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(staging)
            raise
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from exc


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Hold ``$DSH_HOME/.trusted.lock`` while reading and replacing the file.

    Standard library only (the frozen runtime leaves ``filelock`` out): ``flock`` on POSIX,
    ``msvcrt.locking`` on Windows.
    """
    from dsh.home import ensure_dir

    ensure_dir(home)
    lock = home / ".trusted.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"{lock}: cannot open ({exc.strerror or exc})") from exc
    try:
        if os.name == "posix":
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        else:  # pragma: no cover - Windows
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        yield
    finally:
        os.close(fd)  # closing releases the lock on both
