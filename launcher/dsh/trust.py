"""Trusted project folders: whose own ``.env`` may route the user's credentials.

A project's ``.env`` is read on every launch in that folder, and a cloned repository's
``.env`` is written by whoever wrote the repository. Names that decide where credentials
go (provider base URLs, proxies, CA bundles, ``DSH_POSTGRES_DSN``: see
:data:`dsh.envsnapshot.ROUTING`) are therefore taken from a project's ``.env`` only when
the user said the folder is theirs: ``dsh trust [PATH]``, recorded in
``$DSH_HOME/trusted.toml``::

    # Folders whose own .env may route credentials (dsh trust; docs/security.md).
    folders = [
      "/home/me/work/shop",
    ]

A folder is trusted exactly (not its subfolders: a launch reads only its own working
directory's ``.env``), compared by real path, so a symlink or a ``..`` spelling of a folder
is the same folder. Changes are atomic (a temporary file renamed over the old one) under
a lock, so two ``dsh trust`` commands never lose each other's change. The file is the
user's: a malformed one is an error naming it, never silently ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dsh.errors import ConfigError, UsageError

TRUST_FILE = "trusted.toml"
_HEADER = ("# Folders whose own .env may route credentials: provider base URLs, proxies,\n"
           "# CA bundles, DSH_POSTGRES_DSN. Managed by `dsh trust`; see docs/security.md.\n")


def folders(home: Path) -> list[str]:
    """The trusted folders, as recorded (real paths); ``[]`` when there is no file."""
    path = home / TRUST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
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
    unknown = sorted(set(data) - {"folders"})
    if unknown:
        raise ConfigError(f"{path}: unknown key '{unknown[0]}' (expected only 'folders')")
    listed = data.get("folders", [])
    if not isinstance(listed, list) or not all(isinstance(f, str) and os.path.isabs(f)
                                               for f in listed):
        raise ConfigError(f"{path}: 'folders' must be a list of absolute paths")
    return listed


def is_trusted(home: Path, folder: Path) -> bool:
    """Whether ``folder`` (by its real path) is one the user trusts."""
    return os.path.realpath(folder) in folders(home)


def add(home: Path, folder: Path) -> bool:
    """Trust ``folder`` (an existing directory); False when it already was."""
    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        raise UsageError(f"{folder}: not an existing directory")
    with _locked(home):
        listed = folders(home)
        if real in listed:
            return False
        _write(home, [*listed, real])
    return True


def remove(home: Path, folder: Path) -> None:
    """Stop trusting ``folder`` (given as recorded, or any path to it); exit 2 when it was
    not trusted."""
    candidates = {os.path.abspath(folder), os.path.realpath(folder)}
    with _locked(home):
        listed = folders(home)
        kept = [f for f in listed if f not in candidates]
        if len(kept) == len(listed):
            raise UsageError(f"{folder}: not a trusted folder (`dsh trust --list` shows them)")
        _write(home, kept)


def _write(home: Path, listed: list[str]) -> None:
    """Replace the file atomically (a crash leaves the old one or the new one whole)."""
    path = home / TRUST_FILE
    try:
        body = "".join(f"  {json.dumps(f, ensure_ascii=False)},\n" for f in listed)
        text = f"{_HEADER}folders = [\n{body}]\n"
        data = text.encode("utf-8")
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
