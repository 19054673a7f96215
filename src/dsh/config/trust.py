"""Trusted project folders: whose own ``.env`` may route the user's credentials.

A project's ``.env`` is read on every launch in that folder, and a cloned repository's
``.env`` is written by whoever wrote the repository. Names that decide where credentials
go (provider base URLs, proxies, CA bundles, ``DSH_POSTGRES_DSN``: see
:data:`dsh.config.envfile.ROUTING`) are therefore taken from a project's ``.env`` only
when the user said so: ``dsh trust [PATH]``, recorded in ``$DSH_HOME/trusted.toml``::

    # Folders whose own .env may route credentials (dsh trust; docs/security.md).
    [[folder]]
    path = "/home/me/work/shop"
    [folder.settings]
    DEEPSEEK_BASE_URL = "sha256:1f0c..."

Trust covers the routing settings **as they were when the user trusted the folder**:
``settings`` holds a digest of every value the ``.env`` set then (never the value), so
a routing name added or changed later (a ``git pull``, or the model writing ``.env`` in
its workspace) is ignored again, with a warning, until ``dsh trust`` is run again. Which
names route is known only at launch (a config can read an address from any variable:
``url: !env TRACKER_URL``), so every name is recorded; a name that does not route at that
launch may change freely. A folder is trusted exactly (not its subfolders: a launch reads only its
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
from collections.abc import Iterator, Mapping
from pathlib import Path

from dsh.config.envfile import CHANGED, TRUSTED, UNTRUSTED, routing_settings
from dsh.config.tomltext import parse_toml
from dsh.core.atomicfile import replaced
from dsh.core.errors import ConfigError, UsageError

TRUST_FILE = "trusted.toml"
_HEADER = ("# Folders whose own .env may route credentials (provider base URLs, proxies, CA\n"
           "# bundles, DSH_POSTGRES_DSN) as they were when trusted. Managed by `dsh trust`;\n"
           "# see docs/security.md.\n")


def records(home: Path) -> dict[str, dict[str, str]]:
    """Trusted folder (real path) -> {name: digest of the value it was trusted with};
    ``{}`` without a file."""
    path = home / TRUST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") \
            from exc
    data = parse_toml(text, path)
    unknown = sorted(set(data) - {"folder"})
    if unknown:
        raise ConfigError(f"{path}: unknown key '{unknown[0]}' (expected [[folder]] tables)")
    found: dict[str, dict[str, str]] = {}
    entries = data.get("folder", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: 'folder' must be [[folder]] tables")
    for index, entry in enumerate(entries):
        where = f"{path}: folder {index + 1}"
        if not isinstance(entry, dict) or set(entry) - {"path", "settings"} \
                or "path" not in entry:
            raise ConfigError(f"{where}: expected the keys 'path' and 'settings'")
        folder, settings = entry["path"], entry.get("settings", {})
        if not isinstance(folder, str) or not os.path.isabs(folder):
            raise ConfigError(f"{where}: 'path' must be an absolute path")
        if not isinstance(settings, dict) or not all(
                isinstance(d, str) and d.startswith("sha256:") for d in settings.values()):
            raise ConfigError(f"{where}: 'settings' must map names to sha256: digests")
        found[folder] = settings
    return found


def folders(home: Path) -> list[str]:
    """The trusted folders, as recorded (real paths), in the order they were trusted."""
    return list(records(home))


def digest(value: str) -> str:
    """The digest ``trusted.toml`` keeps of one value."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def verdict(home: Path, folder: Path, routing: Mapping[str, str]) -> str:
    """Whether ``folder``'s ``routing`` settings are trusted: ``trusted`` (each was there,
    with this value, when the folder was trusted), ``changed`` (the folder is trusted, with
    other settings) or ``untrusted``."""
    recorded = records(home).get(os.path.realpath(folder))
    if recorded is None:
        return UNTRUSTED
    same = all(recorded.get(name) == digest(value) for name, value in routing.items())
    return TRUSTED if same else CHANGED


def add(home: Path, folder: Path) -> str:
    """Trust ``folder`` (an existing directory) with its ``.env``'s routing settings as
    they are now: ``added``, ``updated`` (it was, with other settings) or ``unchanged``."""
    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        raise UsageError(f"{folder}: not an existing directory")
    now = {name: digest(value)
           for name, value in sorted(routing_settings(Path(real) / ".env").items())}
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


def _write(home: Path, recorded: Mapping[str, Mapping[str, str]]) -> None:
    """Replace the file atomically (a crash leaves the old one or the new one whole)."""
    path = home / TRUST_FILE
    try:
        body = "".join(
            f"\n[[folder]]\npath = {json.dumps(f, ensure_ascii=False)}\n[folder.settings]\n"
            + "".join(f"{n} = {json.dumps(d)}\n" for n, d in settings.items())
            for f, settings in recorded.items())
        data = (_HEADER + body).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError("a trusted folder's path must be valid UTF-8") from exc
    try:
        with replaced(path, prefix=".trusted.", suffix=".tmp", durable=True) as f:
            f.write(data)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from exc


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Hold ``$DSH_HOME/.trusted.lock`` while reading and replacing the file.

    Standard library only (the frozen runtime leaves ``filelock`` out): ``flock`` on POSIX,
    ``msvcrt.locking`` on Windows.
    """
    from dsh.core.home import ensure_dir

    ensure_dir(home)
    lock = home / ".trusted.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"{lock}: cannot open ({exc.strerror or exc})") from exc
    try:
        if sys.platform == "win32":  # pragma: no cover - Windows
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock on both
