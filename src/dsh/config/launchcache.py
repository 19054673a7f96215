"""A profile's composition kept between launches, so a warm launch composes nothing.

The layer cache (:mod:`dsh.config.layercache`) spares a launch the YAML parser, but the
launch still imports the patch reader and the composer and applies every layer again.
Here the composition itself is kept: the leaf rows with their tags unresolved, the
variables they route by, the ``--dump-config`` document and the warnings
(:class:`Composed`). A launch that finds it imports neither the YAML reader nor the
composer; the environment snapshot, the tags' values (``!env``, ``!home``) and the plugin
folder are still taken fresh on every launch, since they are not the files'.

An entry is used only while everything the composition was made from is as it was:

* every file read, by its whole text: ``profile.toml``, each bundle's ``patch.yml``, each
  ``--patch`` file, and the profile's and the home's ``patch.yml``, a missing one
  included (one that appears is a change);
* each bundle still the shipped one of its name (a profile with a bundle found through
  an entry point is never kept: installing a package may change which one wins);
* each ``!path`` tag still resolving to the target it had (a symlink on the way may move);
* the code that composed it: dsh's version, the modification times of the configuration
  modules, and where PyYAML is (its resolver decides what plain values mean);
* the home, the profile name and the ``--patch`` files (absolute), which name the entry.

Anything else, or an entry that cannot be read, means the launch composes as if there
were none. Only ``startup`` profiles are kept: a ``live`` one's reloads recompose from the
layers its boot parsed. Entries are written after the launch resolved without an error
(bad input writes nothing), atomically; the oldest beyond :data:`MAX_ENTRIES` go.
Unpickling trusts the home, as the layer cache does: it is private (0700).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import pickle
import zlib
from pathlib import Path
from typing import Any, NamedTuple

from dsh.config import shipped
from dsh.config.profiles import Profile
from dsh.core.atomicfile import replaced

FORMAT = 1
"""Bump when what an entry holds changes in a way the code stamp would not notice."""
MAGIC = b"dsh launch cache %d\n" % FORMAT
SUBDIR = ("cache", "launch")
MAX_ENTRIES = 64
BUNDLE_FILE = "patch.yml"
CODE = ("bundles.py", "compose.py", "launchcache.py", "layercache.py", "layers.py",
        "patchfile.py", "profiles.py", "resolve.py", "tags.py", "yamlreader.py")
"""The modules whose code a composition depends on, beside this one."""


class Composed(NamedTuple):
    """A profile's composition as a launch uses it, free of the composer's types.

    ``rows`` are the kernel's leaf rows (full ids, a disabled group's children disabled)
    with their tags unresolved; ``routing`` the variables their configs connect by;
    ``document`` the ``--dump-config --json`` document; ``layer_files`` every layer file
    that existed (what ``reload_required`` compares); ``user_files`` the profile's and the
    home's ``patch.yml`` (what a ``live`` profile watches).
    """

    profile: Profile
    rows: tuple[dict[str, Any], ...]
    routing: frozenset[str]
    document: dict[str, Any]
    warnings: tuple[str, ...]
    layer_files: tuple[Path, ...]
    user_files: tuple[Path, Path]


class Inputs(NamedTuple):
    """What a composition was made from, as :func:`lookup` checks it again."""

    files: tuple[tuple[str, str | None], ...]
    """Each file read, with its text (None: it did not exist)."""
    bundles: tuple[tuple[str, str], ...]
    """Each bundle's name and the shipped ``patch.yml`` it was."""
    path_tags: tuple[tuple[str, str, str], ...]
    """Each ``!path`` tag: the folder of its layer, its text as written, its target."""


def patch_path(patch: str, cwd: Path) -> Path:
    """A ``--patch`` argument as the absolute file it names (relative to ``cwd``)."""
    return Path(patch) if Path(patch).is_absolute() else (cwd / patch).resolve()


def lookup(home: Path, profile: str, patches: list[str], cwd: Path) -> Composed | None:
    """The kept composition of ``profile`` with ``patches``, if every input is unchanged;
    None otherwise (then the launch composes, and may :func:`store` the result).

    The name needs no check here: it only feeds the entry's hashed file name, and an entry
    exists only for a launch that resolved, so a bad name finds none and is refused where
    the launch resolves."""
    entry, header = _entry(home, profile, [patch_path(p, cwd) for p in patches])
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    if not data.startswith(header):
        return None  # another format, other code, or another launch's entry
    try:
        inputs, composed = pickle.loads(memoryview(data)[len(header):])
        if not isinstance(inputs, Inputs) or not isinstance(composed, Composed):
            return None
        if not _unchanged(inputs):
            return None
    except Exception:  # truncated, foreign, from code that no longer exists, unreadable
        return None
    return composed


def store(home: Path, profile: str, patches: list[Path], inputs: Inputs,
          composed: Composed) -> None:
    """Keep ``composed`` for the next launch of ``profile`` with ``patches`` (absolute);
    a home that cannot take it only means the next launch composes again."""
    entry, header = _entry(home, profile, patches)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with replaced(entry, prefix=".tmp-") as out:
            out.write(header)
            pickle.dump((inputs, composed), out, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        return
    entries = list(entry.parent.glob("*.pickle"))
    if len(entries) > MAX_ENTRIES:
        entries.sort(key=_mtime)
        for stale in entries[:len(entries) - MAX_ENTRIES]:
            with contextlib.suppress(OSError):
                stale.unlink()


def shipped_bundle(name: str) -> Path:
    """Where bundle ``name`` is when it is a shipped one."""
    return shipped.bundle_dir(name) / BUNDLE_FILE


def _entry(home: Path, profile: str, patches: list[Path]) -> tuple[Path, bytes]:
    """The entry's file and the header that must open it: format, code stamp, the home,
    the profile and its ``--patch`` files."""
    name = "\0".join((_code_stamp(), str(home), profile, *map(str, patches))).encode()
    entry = home.joinpath(*SUBDIR) / f"{zlib.crc32(name):08x}-{zlib.adler32(name):08x}.pickle"
    return entry, MAGIC + name.hex().encode() + b"\n"


def _unchanged(inputs: Inputs) -> bool:
    for path, text in inputs.files:
        if _text(Path(path)) != text:
            return False
    for name, path in inputs.bundles:
        if str(shipped_bundle(name)) != path:
            return False
    return all(str((Path(folder) / written).resolve()) == target
               for folder, written, target in inputs.path_tags)


def _text(path: Path) -> str | None:
    """The file's text; None when there is no file (any other failure raises)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """dsh's version, the configuration modules' modification times and PyYAML's place."""
    from dsh import _version

    here = Path(__file__).parent
    yaml = importlib.util.find_spec("yaml")
    origin = yaml.origin if yaml is not None else None
    stamps = [_version.__version__, str(origin)]
    for file in (*(here / name for name in CODE), origin):
        try:
            stamps.append(str(os.stat(file or "").st_mtime_ns))
        except OSError:
            stamps.append("?")
    return ":".join(stamps)
