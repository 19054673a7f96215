"""What was typed at the chat, kept across runs: per profile, in the home, capped.

``$DSH_HOME/chat/<profile>/history.jsonl``, one JSON string a line, oldest first, at most
:data:`MAX_ENTRIES` entries and :data:`MAX_BYTES` bytes (the oldest go first), an entry
at most :data:`MAX_ENTRY_CHARS` characters (a longer one, a big paste, is not kept). It
is replaced whole on each entry (:func:`dsh.core.atomicfile.replaced`), so two chats on
one profile never leave half a file, and what is read is always a whole history. Only
what was sent as a message, a command or ``!command`` is kept, never an answer to a
secret prompt (the chat has none; the rule is for whatever asks one later: it passes
``secret=True`` and nothing is written).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dsh.core.atomicfile import replaced
from dsh.core.home import ensure_dir

MAX_ENTRIES = 1000
MAX_BYTES = 512 * 1024
MAX_ENTRY_CHARS = 16 * 1024


class History:
    """The input history of one profile; ``entries`` oldest first."""

    def __init__(self, home: Path, profile: str) -> None:
        self.path = home / "chat" / profile / "history.jsonl"
        self.entries: list[str] = self._read()

    def _read(self) -> list[str]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        entries = []
        for raw in lines:
            try:
                value = json.loads(raw)
            except ValueError:
                continue  # a line another version wrote, or damage: skipped, never fatal
            if isinstance(value, str) and value:
                entries.append(value)
        return entries[-MAX_ENTRIES:]

    def add(self, entry: str, *, secret: bool = False) -> None:
        """Remember ``entry`` (not when ``secret``, empty, too long, or the last one)."""
        if secret or not entry.strip() or len(entry) > MAX_ENTRY_CHARS:
            return
        if self.entries and self.entries[-1] == entry:
            return
        self.entries.append(entry)
        lines = [json.dumps(e, ensure_ascii=False) + "\n" for e in self.entries]
        size = sum(len(x.encode("utf-8")) for x in lines)
        while len(lines) > MAX_ENTRIES or size > MAX_BYTES:
            size -= len(lines.pop(0).encode("utf-8"))
            self.entries.pop(0)
        try:
            ensure_dir(self.path.parent)
            with replaced(self.path, prefix=".history-", text=True) as out:
                out.writelines(lines)
            os.chmod(self.path, 0o600)
        except OSError:  # history is a convenience: it never stops the chat
            return
