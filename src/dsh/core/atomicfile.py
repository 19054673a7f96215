"""Files replaced whole or not at all: written beside the target, then renamed over it.

A reader (another launch, another process) sees the old file or the new one, never a
half-written one, and a write that fails or is interrupted leaves no temporary file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def replaced(target: Path, *, prefix: str, suffix: str = "", text: bool = False,
             durable: bool = False) -> Iterator[IO[Any]]:
    """A new file (binary, or UTF-8 text with ``\\n`` lines) that becomes ``target`` when
    the block ends without an error; it is named ``prefix…suffix`` in ``target``'s folder
    until then. ``durable``: its bytes reach the disk before the rename (a file whose loss
    in a crash would cost the user a decision, not just a cache entry)."""
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=suffix)
    try:
        with (os.fdopen(fd, "w", encoding="utf-8", newline="\n") if text
              else os.fdopen(fd, "wb")) as out:
            yield out
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
