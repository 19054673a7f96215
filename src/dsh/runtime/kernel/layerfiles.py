"""Whether the files a tree was composed from changed since boot.

A ``startup`` profile reads its patch layers once; editing one later does nothing until
a restart, so servers report ``reloadRequired`` instead of leaving the user to wonder.
A change is judged by content: size or modification time only say "look again", and a
file merely touched (same bytes) is not a change. A file that appears or disappears is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple


class _Stamp(NamedTuple):
    size: int
    mtime_ns: int
    content: bytes  # layer files are small; keeping them beats importing hashlib at boot


def _stamp(path: Path) -> _Stamp | None:
    try:
        st = os.stat(path)
        content = path.read_bytes()
    except OSError:
        return None
    return _Stamp(st.st_size, st.st_mtime_ns, content)


class LayerFingerprint:
    """The state of a set of files at one moment, comparable with their state now."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self._stamps = {Path(p): _stamp(Path(p)) for p in paths}

    def changed(self) -> list[Path]:
        """The files whose content differs from when the fingerprint was taken."""
        return [path for path, old in self._stamps.items() if self._differs(path, old)]

    @staticmethod
    def _differs(path: Path, old: _Stamp | None) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            return old is not None
        if old is None:
            return True
        if st.st_size != old.size:
            return True
        if st.st_mtime_ns == old.mtime_ns:
            return False
        now = _stamp(path)
        return now is None or now.content != old.content
