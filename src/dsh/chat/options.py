"""What ``dsh chat`` was asked: a plain value the launcher's checks make
(:mod:`dsh.chat.launch`) and the app reads."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class ChatOptions(NamedTuple):
    """What ``dsh chat`` was asked: the profile to run and how to start."""

    profile: str
    home: Path
    patches: tuple[str, ...]
    cwd: Path
    resume: str | None = None
    continue_last: bool = False
    model: str | None = None
    provider: str | None = None
    effort: str | None = None
