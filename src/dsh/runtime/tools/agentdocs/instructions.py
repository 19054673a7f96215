"""``AGENTS.md`` instructions: which files apply to a working directory, read within caps.

Shared by the runtime (the ``context-instructions`` row shows them to the model every turn)
and ``dsh doctor`` (which lists them), so it imports nothing from the runtime.

Search order, outermost first (a later file refines an earlier one):

1. the home's ``$DSH_HOME/AGENTS.md``;
2. each ``AGENTS.md`` from the project root down to the working directory. The project root
   is the nearest ancestor of the working directory (itself included) holding ``.git`` or
   ``.dsh``; with none, only the working directory is searched. A ``.dsh`` that *is* the
   home (``~/.dsh``) does not mark a project, or every folder under ``~`` would be one.

Files are bounded: at most ``max_file_bytes`` of each and ``max_total_bytes`` of all of them
are shown, cut at a character boundary with a note saying what was cut and where the full
file is. A file that cannot be read (permissions, a symlink loop, not a regular file) is
skipped with a note; nothing here raises for a bad file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import NamedTuple

from dsh.core.errors import DshError

AGENTS_FILE = "AGENTS.md"
PROJECT_MARKERS = (".git", ".dsh")
MAX_FILE_BYTES = 32 * 1024
MAX_TOTAL_BYTES = 64 * 1024


class UnreadableError(DshError):
    """A file that exists but cannot be used; the message says why, for a note."""


class Capped(NamedTuple):
    """The first bytes of a file, decoded, and how much of it there was."""

    text: str
    shown: int
    size: int

    @property
    def truncated(self) -> bool:
        """Whether part of the file was left out."""
        return self.shown < self.size


class Instruction(NamedTuple):
    """One ``AGENTS.md`` as the model sees it.

    ``scope`` is ``home`` or ``project``. ``shown`` of ``size`` bytes made it into
    ``text``; ``cap`` names the cap that cut it (``per-file`` or ``total``), ``problem``
    why it was skipped (then nothing is shown).
    """

    path: str
    scope: str
    text: str
    size: int
    shown: int
    cap: str | None = None
    problem: str | None = None

    @property
    def truncated(self) -> bool:
        """Whether part of the file was left out (or all of it)."""
        return self.problem is not None or self.shown < self.size

    @property
    def note(self) -> str | None:
        """What the model is told about a file it does not see whole, or None."""
        if self.problem is not None:
            return f"{self.path} skipped: {self.problem}"
        if self.shown >= self.size:
            return None
        if self.shown == 0:
            return (f"{self.path} left out ({self.size} bytes): the total for AGENTS.md "
                    "files is used up; read the file itself if it matters")
        return (f"cut at {self.shown} of {self.size} bytes ({self.cap} cap); the full file "
                f"is {self.path}")


def read_capped(path: str, cap: int) -> Capped:
    """At most ``cap`` bytes of the regular file ``path``, decoded as UTF-8.

    Raises FileNotFoundError when nothing is there (a dangling symlink included) and
    :class:`UnreadableError` for anything else in the way, so callers tell "absent" from
    "broken". The cut never splits a character; undecodable bytes become U+FFFD.
    """
    try:
        info = os.stat(path)  # follows symlinks: a loop is ELOOP, not a hang
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableError(f"cannot read: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        # A FIFO or device would block or never end; a folder is a mistake.
        raise UnreadableError("not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise UnreadableError(f"cannot read: {exc.strerror or exc}") from exc
    size = max(info.st_size, len(data))
    if len(data) <= cap:
        return Capped(data.decode("utf-8", errors="replace"), len(data), size)
    cut = cap
    while cut > 0 and data[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte
        cut -= 1
    return Capped(data[:cut].decode("utf-8", errors="replace"), cut, size)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def project_root(cwd: str, home: str) -> str | None:
    """The nearest ancestor of ``cwd`` (itself included) that holds ``.git`` or ``.dsh``.

    The home folder's own ``.dsh`` does not count when it is the dsh home.
    """
    here = os.path.abspath(cwd)
    while True:
        for marker in PROJECT_MARKERS:
            candidate = os.path.join(here, marker)
            if os.path.lexists(candidate) and not (
                    marker == ".dsh" and _same_file(candidate, home)):
                return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def project_dirs(cwd: str, home: str) -> list[str]:
    """The folders searched for a project ``AGENTS.md``: project root down to ``cwd``."""
    here = os.path.abspath(cwd)
    root = project_root(here, home)
    if root is None:
        return [here]
    chain = [here]
    while chain[-1] != root:
        chain.append(os.path.dirname(chain[-1]))
    return chain[::-1]


def candidates(home: str, cwd: str) -> Iterator[tuple[str, str]]:
    """Every place an ``AGENTS.md`` may be, outermost first, as ``(scope, path)``."""
    yield "home", os.path.join(os.path.abspath(home), AGENTS_FILE)
    for folder in project_dirs(cwd, home):
        yield "project", os.path.join(folder, AGENTS_FILE)


def load(home: str, cwd: str, *, max_file_bytes: int = MAX_FILE_BYTES,
         max_total_bytes: int = MAX_TOTAL_BYTES) -> list[Instruction]:
    """The ``AGENTS.md`` files that apply in ``cwd``, outermost first, within the caps.

    The total budget is spent outermost first, so a file the budget cannot take is cut or
    skipped with a note pointing at it. A file reached twice (the home inside the
    project, a symlinked folder) is shown once.
    """
    found: list[Instruction] = []
    seen: set[str] = set()
    budget = max_total_bytes
    for scope, path in candidates(home, cwd):
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        cap, which = ((max_file_bytes, "per-file") if max_file_bytes <= budget
                      else (budget, "total"))
        try:
            capped = read_capped(path, cap)
        except FileNotFoundError:
            continue
        except UnreadableError as exc:
            found.append(Instruction(path, scope, "", 0, 0, problem=str(exc)))
            continue
        budget -= capped.shown
        found.append(Instruction(path, scope, capped.text, capped.size, capped.shown,
                                 which if capped.truncated else None))
    return found


def render(found: list[Instruction]) -> str | None:
    """The context section the model reads, or None when there is nothing to show."""
    if not found:
        return None
    parts = ["Instructions from AGENTS.md files, outermost first. Follow them; where two "
             "disagree, the one nearer the working directory wins."]
    for item in found:
        if item.shown == 0 and item.truncated:
            parts.append(f"[dsh: {item.note}]")
            continue
        body = item.text if item.text.endswith("\n") or not item.text else item.text + "\n"
        note = f"[dsh: {item.note}]\n" if item.note else ""
        parts.append(f'<agents-md path="{item.path}" scope="{item.scope}">\n{body}{note}'
                     "</agents-md>")
    return "\n\n".join(parts)
