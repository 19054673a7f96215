"""The workspace boundary: what a session's tools may reach, and how they reach it.

A session's **root** is the real path of its ``cwd`` when it was created; it never moves
(``working_directory`` moves the session inside it). Besides the root, a session has
**granted roots**: directories the user allowed "always" (ACP ``allow_always``). The
**protected** directories, the dsh home and any the ``agent`` row's ``protected_paths``
names, are never reachable by a tool, even inside the root and whatever anyone approves;
only when the root itself lies *strictly inside* one (a workspace kept in the home) is
the root's own subtree usable, the rest of that directory staying protected.

Two steps use one :class:`Boundary`:

* **Judging** (:meth:`Boundary.place`, :func:`reach`): where a path argument lands, with
  ``~`` expanded and symlinks resolved now. The agent judges every call's declared path
  arguments before its guardrails: a protected path refuses the call outright; a path
  outside the root and the granted roots makes the call ask (``ToolCall.outside``), and an
  approval grants exactly those paths for that call (:meth:`Boundary.allowing`).
* **Opening** (:meth:`Boundary.target`, then :mod:`.safeopen`): the tool opens the path
  beneath the root (or granted root, or approved path) that holds it, race-free, so a
  symlink swapped in after the judgement cannot lead the open elsewhere, and the
  protected directories beneath that anchor are never entered.

Paths are shown to the model relative to the working directory (:func:`shown`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError, InvalidArgumentError
from dsh.runtime.tools import safeopen

INSIDE, GRANTED, ALLOWED, OUTSIDE, PROTECTED = (
    "inside", "granted", "allowed", "outside", "protected")
"""Where a path lands: the root, a granted root, a path approved for this call, outside
all of them, or a protected directory."""

PATH_MAX = 4096
"""Bytes of a path (Linux's ``PATH_MAX``): longer paths are refused before any lookup."""
NAME_MAX = 255
"""Bytes of one path component."""


class PathError(InvalidArgumentError):
    """A path argument a tool cannot use; the message is written for the model."""


class PathEscapeError(PathError):
    """A path resolves outside the root and everything granted."""


class ProtectedPathError(PathError):
    """A path lies in a protected directory (the dsh home)."""


def real_root(cwd: str) -> str:
    """``cwd`` with symlinks resolved."""
    return realpath(cwd)


def realpath(path: str) -> str:
    """``os.path.realpath``, retried when the path changes under it.

    CPython's realpath reads a link it has just seen with ``lstat``; a link swapped for a
    directory in between makes that ``readlink`` fail (``EINVAL``). A path that keeps
    changing is a :class:`PathError`, never an exception out of a turn.
    """
    for _ in range(8):
        try:
            return os.path.realpath(path)
        except OSError:
            continue
    raise PathError(f"path kept changing while it was resolved: {path}")


_FOLDED = sys.platform in ("darwin", "win32")
"""Whether paths compare case-insensitively (the default disks of macOS and Windows)."""


def is_inside(root: str, target: str) -> bool:
    """Whether the real path ``target`` is ``root`` or lies under it."""
    if _FOLDED:
        root, target = root.casefold(), target.casefold()
    try:
        return os.path.commonpath([root, target]) == root
    except ValueError:  # different drives (Windows), or a relative path
        return False


def absolute(cwd: str, path: str) -> str:
    """``path`` as an absolute path: ``~`` expanded, joined to ``cwd``, not resolved.

    NUL bytes and over-long paths are refused here, so every tool says the same thing.
    """
    if "\x00" in path:
        raise PathError(f"invalid path (contains a NUL byte): {path!r}")
    full = os.path.join(cwd, os.path.expanduser(path) if path.startswith("~") else path)
    raw = os.fsencode(full)
    if len(raw) >= PATH_MAX:
        raise PathError(f"path too long: {len(raw)} bytes (the limit is {PATH_MAX - 1})")
    if any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise PathError(f"path has a name longer than {NAME_MAX} bytes: {path[:80]}...")
    return full


def config_paths(config: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    """The ``key`` list of absolute (or ``~/``) paths in a row's config, expanded;
    ConfigError naming a bad entry (``where`` names the config, e.g. the row)."""
    found = []
    for index, path in enumerate(config.get(key, ())):
        full = os.path.expanduser(path)
        if not os.path.isabs(full):
            raise ConfigError(f"{where}.{key}[{index}]: expected an absolute or ~/ path")
        found.append(full)
    return tuple(found)


def protected_dirs(home: str, configured: Iterable[str] = ()) -> tuple[str, ...]:
    """The directories no tool reaches (real paths): the dsh home, ``configured`` ones
    and, on Linux, this process's own ``/proc/PID`` (what ``/proc/self`` resolves to: its
    environment holds the credentials, its fds the home's open files)."""
    own = f"/proc/{os.getpid()}" if sys.platform.startswith("linux") else ""
    paths = (home, *configured, own if own and os.path.isdir(own) else "")
    return tuple(dict.fromkeys(realpath(p) for p in paths if p))


class Place(NamedTuple):
    """Where a path lands: ``kind`` (:data:`INSIDE` ...), its real path, and the root,
    granted root or approved path holding it (None when outside or protected; for
    :data:`PROTECTED`, the protected directory)."""

    kind: str
    real: str
    holder: str | None


class Target(NamedTuple):
    """A path ready to open: the anchor to open beneath, the path relative to it, and
    the real path it was judged as."""

    anchor: safeopen.Anchor
    rel: str
    real: str


class Boundary(NamedTuple):
    """One session's reach (real paths throughout).

    ``root`` and ``granted`` are the session's; ``protected`` the directories no tool
    enters; ``allowed`` the paths the running call was approved to reach.
    """

    root: str
    granted: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()

    @classmethod
    def at(cls, cwd: str, *, protected: Iterable[str] = ()) -> Boundary:
        """A boundary rooted at ``cwd`` (a tool called with no session behind it)."""
        return cls(real_root(cwd), protected=tuple(realpath(p) for p in protected))

    def protects(self, real: str) -> str | None:
        """The protected directory holding ``real``, or None.

        Judged twice: by name, and by the identity (``st_dev``, ``st_ino``) of each
        existing directory above ``real``, so a name the filesystem folds to the same
        directory (``~/.DSH`` on a case-insensitive disk) is caught too. A root lying
        strictly inside a protected directory keeps its own subtree usable.
        """
        for path in self.protected:
            if is_inside(path, real) and not self._exempt(path, real):
                return path
        ids = safeopen.file_ids(self.protected)
        if not ids:
            return None
        root = safeopen.file_ids((self.root,))
        below_root = False
        for ancestor in _ancestors(real):
            try:
                st = os.stat(ancestor)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in ids:
                return None if below_root and key not in root else ids[key]
            below_root = below_root or key in root
        return None

    def _exempt(self, protected: str, real: str) -> bool:
        """A root strictly inside ``protected``, and ``real`` inside that root."""
        return (self.root != protected and is_inside(protected, self.root)
                and is_inside(self.root, real))

    def place(self, cwd: str, path: str) -> Place:
        """Where ``path`` (relative to ``cwd``) lands now; :class:`PathError` if unusable."""
        real = realpath(absolute(cwd, path))
        guarded = self.protects(real)
        if guarded is not None:
            return Place(PROTECTED, real, guarded)
        if is_inside(self.root, real):
            return Place(INSIDE, real, self.root)
        for kind, holders in ((GRANTED, self.granted), (ALLOWED, self.allowed)):
            for holder in holders:
                if is_inside(holder, real):
                    return Place(kind, real, holder)
        return Place(OUTSIDE, real, None)

    def target(self, cwd: str, path: str) -> Target:
        """The anchor and relative path to open ``path`` with; raises :class:`PathError`
        when it is protected or outside everything this call may reach."""
        place = self.place(cwd, path)
        if place.kind == PROTECTED:
            raise protected_error(path, place.holder or "")
        if place.kind == OUTSIDE:
            raise PathEscapeError(
                f"path is outside the workspace root: {path} (resolves to {place.real}, "
                f"outside {self.root}); reaching it needs the user's approval")
        holder = place.holder or self.root
        exact = False
        if place.kind == ALLOWED and not os.path.isdir(holder):
            # One approved file (perhaps not there yet): open beneath its nearest existing
            # ancestor, following no symlink, so the approval covers that path only.
            holder, exact = _existing_ancestor(os.path.dirname(holder)), True
        anchor = safeopen.Anchor(holder, self.forbid_under(holder), exact)
        return Target(anchor, os.path.relpath(place.real, holder), place.real)

    def forbid_under(self, anchor: str) -> tuple[str, ...]:
        """The protected directories at or beneath ``anchor`` (a walk never enters them)."""
        return tuple(p for p in self.protected if is_inside(anchor, p))

    def allowing(self, reals: Iterable[str]) -> Boundary:
        """This boundary with ``reals`` approved for the running call."""
        return self._replace(allowed=(*self.allowed, *reals))


def _ancestors(path: str) -> Iterable[str]:
    """``path`` and each directory above it, up to the filesystem root."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def _existing_ancestor(path: str) -> str:
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def protected_error(path: str, holder: str) -> ProtectedPathError:
    """The refusal of a path inside the protected directory ``holder``."""
    return ProtectedPathError(
        f"path is in a protected directory: {path} (inside {holder}: the dsh home, or a "
        "directory the configuration protects, is never reachable by tools, and no "
        "approval can change that)")


class Reach(NamedTuple):
    """What one call's path arguments reach beyond the root and the granted roots:
    ``outside`` real paths (the call must be approved), ``protected`` pairs of
    ``(argument value, protected directory)`` (the call is refused)."""

    outside: tuple[str, ...] = ()
    protected: tuple[tuple[str, str], ...] = ()


def reach(boundary: Boundary, cwd: str, tool: Any, args: Mapping[str, Any]) -> Reach:
    """Judge ``tool``'s declared path arguments in ``args``.

    An absent path argument of a mutating tool counts as ``.`` (``bash`` without
    ``workdir`` runs in the working directory, which may lie outside the root).
    Raises :class:`PathError` for a path no tool could use (NUL byte, too long).
    """
    outside: list[str] = []
    protected: list[tuple[str, str]] = []
    for name in getattr(tool, "path_arguments", None) or ():
        value = args.get(name)
        if value is None and getattr(tool, "mutating", False):
            value = "."
        if not isinstance(value, str):
            continue
        place = boundary.place(cwd, value)
        if place.kind == PROTECTED:
            protected.append((value, place.holder or ""))
        elif place.kind == OUTSIDE and place.real not in outside:
            outside.append(place.real)
    return Reach(tuple(outside), tuple(protected))


def grant_dirs(reals: Iterable[str]) -> list[str]:
    """The directories an "always" approval of ``reals`` grants: each directory itself,
    each file's directory."""
    found: list[str] = []
    for real in reals:
        directory = real if os.path.isdir(real) else os.path.dirname(real)
        if directory not in found:
            found.append(directory)
    return found


def of(ctx: Any) -> Boundary:
    """The running call's boundary (a context without one: rooted at its cwd)."""
    boundary = getattr(ctx, "boundary", None)
    return boundary if boundary is not None else Boundary.at(ctx.cwd)


def outside_reason(name: str, outside: Sequence[str], root: str) -> str:
    """Why a call reaching ``outside`` is asked about: the paths it reaches, then the root
    they lie outside of, each named for what it is (``'working_directory' reaches /src,
    outside the workspace root /src/app``)."""
    where = f"the workspace root {root}" if root else "the workspace root"
    return f"'{name}' reaches {', '.join(outside)}, outside {where}"


def shown(cwd: str, real: str) -> str:
    """How a resolved path is shown to the model: relative to the working directory."""
    rel = os.path.relpath(real, real_root(cwd))
    return "." if rel == os.curdir else rel


def refusal_text(path: str, exc: Exception, verb: str = "open") -> str:
    """What a tool answers (as an error result) for a path the boundary or
    :mod:`.safeopen` refused; any other exception is raised again."""
    if isinstance(exc, PathError):
        return str(exc)
    if isinstance(exc, safeopen.ForbiddenError):
        return str(protected_error(path, exc.directory))
    if isinstance(exc, safeopen.EscapeError):
        return (f"path escapes the workspace: {path} ({exc}); nothing outside what this "
                "call may reach is opened")
    if isinstance(exc, safeopen.NotRegularError):
        return f"cannot {verb} {path}: {exc}; only regular files are read or written"
    if isinstance(exc, OSError):
        return f"cannot {verb} {path}: {exc.strerror or exc}"
    raise exc
