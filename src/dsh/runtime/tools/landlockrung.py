"""The Landlock rung: the bubblewrap policy said as Landlock rules, and what it cannot say.

Where bubblewrap cannot run (Docker's and Kubernetes' seccomp profiles refuse the
namespaces it needs, Ubuntu's AppArmor restricts unprivileged user namespaces, many images
lack the binary), the shell's sandbox falls back to Landlock with a seccomp filter
(:mod:`dsh.core.confinement`). This module turns the same inputs the bubblewrap mounts are
made from (:class:`Layout`) into a :class:`~dsh.core.confinement.Confinement`:

- **read** (and run) everything bubblewrap shows: ``/`` but the hidden and private
  directories (the user's home, the dsh home, ``hide``, ``protected_paths``), the host's
  ``/tmp`` and ``/dev``; then ``readable`` paths and ``PATH`` toolchains inside a hidden
  home, and a working directory outside the roots;
- **write** the workspace root and its granted roots (``workspace-write``; read only in
  ``read-only``), and a fresh private temporary directory, given as ``TMPDIR`` (and
  ``TMP``, ``TEMP``);
- **devices**: ``/dev/null``, ``/dev/zero``, ``/dev/full``, ``/dev/tty`` read and written,
  ``/dev/random``, ``/dev/urandom`` read; nothing else of the host's ``/dev`` (its disks,
  its terminals in ``/dev/pts``, its shared memory in ``/dev/shm``).

Landlock only grants; it cannot hide a path inside a granted one, mount an empty ``/tmp``
or give a private ``/dev``. Each gap is handled, never papered over:

- **A directory that must stay out of reach lies inside one that is granted** (the dsh
  home or a protected path inside the workspace, the user's home under ``/``): the outer
  directory is not granted as a whole but entry by entry around that path, down to it
  (:func:`grant_around`). The cost is on the outer levels themselves: they cannot be
  listed, and nothing can be created, removed or renamed directly in them (those rights
  belong to a directory, and a rule on it would reach the hidden path too). For ``/``
  that means ``ls /`` fails; for a workspace holding the dsh home, the tool result says
  so in one line (:attr:`Rules.notes`). A root that *is* such a directory is not granted
  at all.
- **No private ``/tmp``**: the host's ``/tmp`` is neither readable nor writable; the
  command's temporary directory is a fresh one, removed after the command, and
  programs that honour ``TMPDIR`` use it. A program that writes ``/tmp/x`` by name
  fails with "Permission denied".
- **No network namespace**: a command's network is whatever seccomp and Landlock's TCP
  rules leave it (:mod:`dsh.core.seccomp`); there is no private loopback either, so a
  test suite's local TCP server fails where bubblewrap would give it one.
- **Metadata is not an access**: ``chmod``, timestamps and extended attributes of a file
  the command can name are not Landlock rights (content, names and links are), so they
  stay possible outside the workspace on the user's own files; refusing them by seccomp
  would refuse ``chmod +x`` in the workspace too. Said in ``docs/security.md`` and by
  ``dsh doctor``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from dsh.core import landlock
from dsh.runtime.tools.sandbox import SandboxUnavailableError

SYSTEM_SKIPPED = ("/tmp", "/dev")
"""Host directories never granted whole: replaced by ``TMPDIR`` and :data:`DEVICES`."""
NEVER_WRITTEN = ("/proc", "/sys", "/dev", "/tmp")  # platform: Landlock is Linux's alone
"""Kernel and host directories a writable root (say ``/``) is never granted over."""
DEVICES = (("/dev/null", landlock.DEVICE), ("/dev/zero", landlock.DEVICE),
           ("/dev/full", landlock.DEVICE), ("/dev/tty", landlock.DEVICE),
           ("/dev/random", landlock.FS_READ_FILE), ("/dev/urandom", landlock.FS_READ_FILE))
MAX_RULES = 4096
"""Rules one command's ruleset may hold; a granted directory with more entries around a
hidden one than that is refused rather than half granted."""


class Layout(NamedTuple):
    """What the sandbox must show and hide for one command (real paths), the inputs of
    the bubblewrap mounts and of these rules alike."""

    writable: bool
    """``workspace-write`` (roots writable) or ``read-only``."""
    roots: tuple[str, ...]
    """The workspace root and its granted roots."""
    hidden: tuple[str, ...]
    """The user's home, the dsh home, ``hide`` and protected paths: never readable."""
    private: tuple[str, ...]
    """The dsh home and protected paths: never shown, even inside a root."""
    readable: tuple[str, ...]
    """Shown read-only although inside a hidden directory (toolchains, a cwd outside
    the roots)."""


class Rules(NamedTuple):
    """The Landlock rules of one command and the lines its result must carry."""

    rules: tuple[tuple[str, int], ...]
    notes: tuple[str, ...]


def rules(layout: Layout, scratch: str) -> Rules:
    """The rules for ``layout``, with ``scratch`` as the private temporary directory."""
    found: list[tuple[str, int]] = []
    notes: list[str] = []
    hidden = _unique([*layout.hidden, *layout.private])
    grant_around("/", landlock.READ, [*hidden, *SYSTEM_SKIPPED], found)
    for path in layout.readable:
        real = os.path.realpath(path)
        if not any(_inside(real, p) for p in layout.private):
            found.append((real, landlock.READ))
    rights = landlock.WRITE if layout.writable else landlock.READ
    for root in layout.roots:
        if root in layout.private:
            notes.append(f"[Sandbox: the workspace root {root} is a protected directory, "
                         "which the Landlock sandbox grants nothing of]")
            continue
        inner = [p for p in (*hidden, *NEVER_WRITTEN) if p != root and _inside(p, root)]
        if inner:
            notes.append(f"[Sandbox: Landlock cannot take {', '.join(inner)} back out of the "
                         f"workspace root {root}: those stay out of reach, and the folders "
                         "above them inside the root cannot be listed or have entries "
                         "created or removed directly in them]")
        grant_around(root, rights, inner, found)
    found.append((scratch, landlock.WRITE))
    found.extend(DEVICES)
    if len(found) > MAX_RULES:
        raise _too_many(f"{len(found)} rules to grant around the hidden directories")
    return Rules(tuple(found), tuple(notes))


def grant_around(path: str, rights: int, exclude: Sequence[str],
                 out: list[tuple[str, int]]) -> None:
    """Add ``(path, rights)`` to ``out``, or, when an ``exclude`` path lies strictly inside
    ``path``, a rule for each entry of ``path`` instead, recursing towards the excluded
    one (which gets nothing). Symbolic links are skipped: whatever they point to is
    judged by its own place."""
    if path in exclude:
        return
    inner = [e for e in exclude if e != path and _inside(e, path)]
    if not inner:
        out.append((path, rights))
        return
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            continue
        grant_around(entry.path, rights, inner, out)
        if len(out) > MAX_RULES:
            raise _too_many(f"more than {MAX_RULES} rules to grant {path} around {inner[0]}")


def _too_many(what: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(f"Refused: the Landlock sandbox would need {what} (at "
                                   f"most {MAX_RULES}). The command was not run.")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(p for p in paths if p))
