"""``@path`` in a message: a file of the workspace attached as a content block.

The path is relative to the session's working directory and must stay inside its
workspace root (the real path, symlinks followed: ``@../secret`` and a link out of the
root are refused, as the model's own tools refuse them). A text file becomes a text
block holding its name and contents, cut at :data:`MAX_TEXT_BYTES` with a line saying
so; an image (PNG, JPEG, GIF, WebP, by its first bytes) an image block of at most
:data:`MAX_IMAGE_BYTES`. Anything else is refused with the reason, and the message is
not sent, so nothing is attached by surprise.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from dsh.core.errors import InvalidArgumentError

MAX_TEXT_BYTES = 256 * 1024
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_LISTED = 200
_MENTION = re.compile(r"(?:(?<=\s)|^)@((?:[^\s\\]|\\ )+)")
_IMAGES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
           (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))


class Attached(NamedTuple):
    """One attachment: its block, and what the transcript says of it."""

    block: dict[str, Any]
    said: str


class AttachError(InvalidArgumentError):
    """A mention that cannot be attached; the message says why."""


def mentions(message: str) -> list[str]:
    """The ``@path`` mentions of ``message`` (``\\ `` for a space inside a path; a
    sentence's punctuation after it is not part of it)."""
    return [m.replace("\\ ", " ").rstrip(",.;:!?)") for m in _MENTION.findall(message)]


def inside(root: str, cwd: str, path: str) -> Path:
    """``path`` (relative to ``cwd``) resolved, refused unless inside ``root``."""
    target = Path(os.path.realpath(os.path.join(cwd, os.path.expanduser(path))))
    real_root = Path(os.path.realpath(root))
    if target != real_root and real_root not in target.parents:
        raise AttachError(f"@{path}: outside the workspace ({real_root})")
    return target


def attach(root: str, cwd: str, path: str) -> Attached:
    """The block for ``@path``; AttachError saying why not."""
    target = inside(root, cwd, path)
    if not target.is_file():
        raise AttachError(f"@{path}: no such file" if not target.exists()
                          else f"@{path}: not a regular file")
    with open(target, "rb") as f:
        head = f.read(16)
        kind = next((mime for magic, mime in _IMAGES if head.startswith(magic)), None)
        if kind is None and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
            kind = "image/webp"
        if kind is not None:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_IMAGE_BYTES:
                raise AttachError(f"@{path}: an image of {size} bytes (at most "
                                  f"{MAX_IMAGE_BYTES})")
            data = head + f.read()
            return Attached({"type": "image", "mimeType": kind,
                             "data": base64.b64encode(data).decode("ascii")},
                            f"{path} ({kind}, {size} bytes)")
        data = head + f.read(MAX_TEXT_BYTES + 1 - len(head))
    if b"\0" in data:
        raise AttachError(f"@{path}: a binary file (neither text nor an image)")
    cut = len(data) > MAX_TEXT_BYTES
    text = data[:MAX_TEXT_BYTES].decode("utf-8", errors="replace")
    note = (f"\n[cut: only the first {MAX_TEXT_BYTES} bytes of {target.stat().st_size} "
            "are attached]" if cut else "")
    said = f"{path} ({len(data[:MAX_TEXT_BYTES])} bytes{', cut' if cut else ''})"
    return Attached({"type": "text", "text": f"Attached file {path}:\n```\n{text}\n```{note}"},
                    said)


def candidates(root: str, cwd: str, prefix: str) -> list[str]:
    """Paths under the workspace completing ``prefix`` (what follows ``@``), directories
    with a trailing slash; hidden entries only when the prefix names them."""
    folder, _, start = prefix.rpartition("/")
    try:
        base = inside(root, cwd, folder or ".")
        names = sorted(os.listdir(base))
    except (AttachError, OSError):
        return []
    found = []
    for name in names:
        if not name.startswith(start) or (name.startswith(".") and not start.startswith(".")):
            continue
        shown = f"{folder}/{name}" if folder else name
        found.append(shown + "/" if (base / name).is_dir() else shown)
        if len(found) >= MAX_LISTED:
            break
    return found
