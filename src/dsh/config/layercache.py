"""Parsed patch layers (and profile files) kept between launches, as CPython keeps
compiled modules.

Reading YAML is most of a launch's composition cost: libyaml's C parser handing its
events to Python, and their conversion, take about 1 ms per 50-row layer on the 2-core
machines dsh is measured on, while unpickling the parsed :class:`~dsh.config.patchfile.PatchLayer`
takes a sixth of that, and a launch that finds every layer here imports no YAML at all.
So a layer parsed once is stored under ``<home>/cache/layers/``, one entry per file and
parser: the parser's own code (its *stamp*: dsh's version and the modification times of
the modules that parse, PyYAML's included) and the file's path, kind and source label
name the entry, so two installations sharing a home (the exe and the python carrier)
keep an entry each instead of overwriting each other's on every launch. An entry starts
with its stamp in plain text, and is unpickled only when that matches this code's: a
pickle is never read by code other than the one that wrote it. It then holds the file's
whole text, used only while it still matches, so an edited file parses again and
overwrites its entry. Comparing
the text itself rather than a digest keeps ``hashlib`` (and OpenSSL's start-up) out of a
launch: spawn-to-``initialize`` is a benchmarked target.

A ``!path`` tag is resolved against the filesystem while parsing (symlinks included), so
the text alone does not fix its value: an entry keeps each such tag's text and target,
and is only used while every text still resolves to its target. Invalid files are never
cached (the error comes from parsing, every time). New entries are only written by
:meth:`LayerCache.save`, which the launcher calls once the whole launch resolved: bad
input writes nothing, not even entries for the layers that parsed before the bad one.

The cache is only an accelerator: an entry that cannot be read or written, or unpickles
to something else, means a parse, never an error. Entries are written atomically (a
temporary file renamed over the name), so two launches racing on one entry each leave a
whole file; the oldest are pruned beyond :data:`MAX_ENTRIES`.

A profile's ``profile.toml`` is kept the same way (:meth:`LayerCache.load_profile`): it is
read on every launch, and a cached one spares the launch importing a TOML parser (a warm
``dsh --profile sdk --dump-config`` took 7% longer without it, measured whole-process,
interleaved, when issue 22 asked whether it pays).

Unpickling trusts the home: it is private (0700), and whoever can write to it can
already add a plugin that runs as the user.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import pickle
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from dsh.config.patchfile import PatchLayer, parse_layer, read_layer_text
from dsh.config.profiles import Profile, parse_profile_text, read_profile_text
from dsh.config.tags import PathRef
from dsh.core.atomicfile import replaced

FORMAT = 2
"""Bump when the stored structure changes in a way the code stamp would not notice."""
MAGIC = b"dsh layer cache %d\n" % FORMAT
MAX_ENTRIES = 512
SUBDIR = ("cache", "layers")
T = TypeVar("T", PatchLayer, Profile)

Entry = tuple[str, PatchLayer | Profile, tuple[tuple[str, str], ...]]
"""What an entry's pickle holds, after its header (:data:`MAGIC`, the code stamp): the
file's text, what it parsed to, and each ``!path`` tag's text with its target."""


class LayerCache:
    """The layer cache of one home (its folder is created on the first save)."""

    def __init__(self, home: Path) -> None:
        self.folder = home.joinpath(*SUBDIR)
        self._pending: dict[Path, tuple[bytes, Entry]] = {}
        self.texts: dict[Path, str] = {}
        """The text of every file loaded, as it was parsed (what a composition came from)."""

    def load(self, path: Path, *, kind: str, source: str | None = None) -> PatchLayer:
        """:func:`dsh.config.patchfile.load_layer`, from the cache when the file was seen before."""
        text = self.texts[path] = read_layer_text(path)
        label = source or str(path)
        return self._cached(path, text, kind, label, PatchLayer,
                            lambda: parse_layer(text, path=path, kind=kind, source=label))

    def load_profile(self, path: Path, name: str) -> Profile:
        """:func:`dsh.config.profiles.parse_profile_toml`, from the cache when the file was seen
        before."""
        text = self.texts[path] = read_profile_text(path)
        return self._cached(path, text, "profile", name, Profile,
                            lambda: parse_profile_text(text, path, name))

    def _cached(self, path: Path, text: str, kind: str, label: str, parsed: type[T],
                parse: Callable[[], T]) -> T:
        """The entry for ``path`` (named by kind and label) if it holds ``text`` parsed by
        this code, else ``parse()``, kept for the next :meth:`save`."""
        stamp = _code_stamp()
        name = "\0".join((stamp, kind, label, str(path))).encode()
        entry = self.folder / f"{zlib.crc32(name):08x}-{zlib.adler32(name):08x}.pickle"
        header = MAGIC + f"{stamp}\0{name.hex()}\n".encode()
        value = _read(entry, header, text, path.parent, parsed)
        if value is None:
            value = parse()
            checks = tuple((ref.written, ref.path) for ref in path_refs(value)
                           ) if "!path" in text else ()
            self._pending[entry] = (header, (text, value, checks))
        return value

    def save(self) -> None:
        """Store the layers parsed since the last save (call once they all proved good)."""
        pending, self._pending = self._pending, {}
        for entry, stored in pending.items():
            if not self._store(entry, stored):
                return
        if pending:
            self._prune()

    def _store(self, entry: Path, stored: tuple[bytes, Entry]) -> bool:
        header, content = stored
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with replaced(entry, prefix=".tmp-") as out:
                out.write(header)
                pickle.dump(content, out, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError:
            return False  # a read-only or full home: the next launch parses again
        return True

    def _prune(self) -> None:
        entries = list(self.folder.glob("*.pickle"))
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(key=_mtime)
        for stale in entries[:len(entries) - MAX_ENTRIES]:
            with contextlib.suppress(OSError):
                stale.unlink()


def _read(entry: Path, header: bytes, text: str, base: Path, kind: type[T]) -> T | None:
    """The entry's ``kind`` value if it was parsed from ``text`` by this code and its
    ``!path`` tags still resolve the same; else None (missing, stale, unreadable or foreign).

    The header (format, code stamp, entry name) is compared before anything is unpickled.
    """
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    if not data.startswith(header):
        return None  # another format, another parser's code, or another file's entry
    try:
        stored_text, value, checks = pickle.loads(memoryview(data)[len(header):])
        if stored_text != text or not isinstance(value, kind):
            return None
        for written, target in checks:
            if str((base / written).resolve()) != target:
                return None  # a symlink or folder on the way changed since the parse
    except Exception:  # truncated, foreign or from code that no longer exists
        return None
    return value


def path_refs(value: Any) -> Iterator[PathRef]:
    """Every ``!path`` reference inside a parsed file (a layer's operations hold them)."""
    if isinstance(value, PathRef):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from path_refs(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from path_refs(item)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """dsh's version and the parsing modules' modification times (a dev edit misses)."""
    from dsh import _version
    from dsh.config import patchfile, profiles, tags, yamlreader

    yaml = importlib.util.find_spec("yaml")  # its resolver decides what plain values mean
    stamps = [_version.__version__]
    for file in (patchfile.__file__, profiles.__file__, tags.__file__, yamlreader.__file__,
                 yaml.origin if yaml is not None else None):
        try:
            stamps.append(str(os.stat(file or "").st_mtime_ns))
        except OSError:
            stamps.append("?")
    return ":".join(stamps)
