"""The local spool: what a runtime could not store while its database was away.

Every event is stored before any client sees it. With the database unreachable that
promise is kept on the host: the event goes to ``$DSH_HOME/spool/<pid>-<holder>.jsonl``
(one JSON line per entry, appended and flushed before the event is sent), and the store
writes the spool into the database as soon as it is back, then empties it. An entry is
``{"session": ID, "event": {...}}`` or ``{"session": ID, "row": {cwd, title, state}}``
(the session row a ``save`` could not write; the latest one wins).

A runtime that dies with a non-empty spool leaves its file behind. The next runtime
started on the same home *claims* it (an atomic rename to a name carrying its own pid, so
of two runtimes starting together one gets it) and replays it under each session's lease.
Entries that can no longer be written (another runtime continued the session from the
database meanwhile, so the seqs are taken by other events) are moved to
``spool/conflicts/`` and named in a warning, never dropped silently.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

logger = logging.getLogger("dsh.sessions")

Entry = dict[str, Any]


def _write_private(path: Path, text: str, *, append: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, text.encode("utf-8", "surrogatepass"))
    finally:
        os.close(fd)


class Spool:
    """The spool files of one runtime (``pid``, ``holder_id``) under ``directory``."""

    def __init__(self, directory: Path, *, pid: int, holder_id: str) -> None:
        self.directory = directory
        self.pid = pid
        self.prefix = f"{pid}-{holder_id}"
        self.path = directory / f"{self.prefix}.jsonl"
        self._count = 0

    def add(self, entry: Entry) -> None:
        """Append ``entry`` (written to the file before this returns)."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        _write_private(self.path, json.dumps(entry, separators=(",", ":"),
                                             ensure_ascii=False) + "\n", append=True)
        self._count += 1

    def __bool__(self) -> bool:
        return self._count > 0 or self.path.exists()

    def entries(self) -> list[Entry]:
        """This runtime's own entries, in the order they were added."""
        return read(self.path)

    def keep(self, entries: list[Entry]) -> None:
        """Replace this runtime's entries by ``entries`` (none: the file goes)."""
        rewrite(self.path, entries)
        self._count = len(entries)

    def claim_orphans(self, alive: Callable[[int], bool]) -> list[Path]:
        """Take over the files of runtimes of this home that died (their pid is gone);
        returns the claimed files (renamed to carry this runtime's pid)."""
        if not self.directory.is_dir():
            return []
        claimed: list[Path] = []
        for path in sorted(self.directory.glob("*.jsonl")):
            owner = path.name.partition("-")[0]
            if path == self.path or not owner.isdigit() or int(owner) == self.pid:
                continue
            if alive(int(owner)):
                continue
            target = self.directory / f"{self.prefix}.claimed-{path.stem.partition('.')[0]}-" \
                                      f"{len(claimed)}.jsonl"
            try:
                os.rename(path, target)  # atomic: of two claimants, one wins
            except FileNotFoundError:
                continue
            claimed.append(target)
        return claimed

    def claimed(self) -> list[Path]:
        """Files this runtime claimed and has not finished replaying."""
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob(f"{self.prefix}.claimed-*.jsonl"))

    def set_aside(self, session_id: str, entries: Iterable[Entry], why: str) -> Path:
        """Move entries that cannot be written to ``conflicts/`` (kept, never dropped)."""
        folder = self.directory / "conflicts"
        os.makedirs(folder, mode=0o700, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id)[:80]
        path = folder / f"{safe}-{self.prefix}.jsonl"
        text = "".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n"
                       for e in entries)
        _write_private(path, text, append=True)
        logger.warning("session %s: spooled events could not be stored (%s); they are kept "
                       "in %s", session_id, why, path)
        return path


def read(path: Path) -> list[Entry]:
    """The entries of a spool file; a torn last line (a crash mid-write) is skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="surrogatepass")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            logger.warning("skipping a torn line of %s", path)
            continue
        if isinstance(entry, dict) and isinstance(entry.get("session"), str):
            out.append(entry)
    return out


def rewrite(path: Path, entries: list[Entry]) -> None:
    """Replace the file's entries atomically (remove it when there are none)."""
    if not entries:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    temp = path.with_name(path.name + ".tmp")
    _write_private(temp, "".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False)
                                 + "\n" for e in entries), append=False)
    os.replace(temp, path)


def by_session(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    """Entries grouped per session, each group in spool order."""
    out: dict[str, list[Entry]] = {}
    for entry in entries:
        out.setdefault(entry["session"], []).append(entry)
    return out
