"""Race-free access beneath a directory: the file tools' one way onto the disk.

Checking a path and then opening it by name is a race: between the two, a symlink can be
swapped in (``renameat2(RENAME_EXCHANGE)`` from a background job) and the open lands
outside. Every function here therefore starts from a directory *file descriptor* of the
:class:`Anchor` and never lets the kernel follow a symlink it has not checked:

* **Linux 5.6+**: one ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` call (syscall
  437 through ctypes; CPython has no ``os.openat2``). The kernel refuses, atomically, any
  resolution that would leave the anchor. It also refuses absolute symlinks and, with
  ``RESOLVE_NO_SYMLINKS``, every symlink: those cases fall to the walk below, which
  decides them itself (an absolute link that stays inside is allowed).
* **Elsewhere, and whenever a forbidden directory lies beneath the anchor** (the dsh home
  inside a workspace, which ``openat2`` cannot be told about): a walk one component at a
  time from the anchor's fd. Each component is ``lstat``\\ed through its parent's fd; a
  symlink is read (``readlinkat``) and its target spliced into the remaining path (an
  absolute target must lie under the anchor); a directory is opened ``O_NOFOLLOW |
  O_DIRECTORY`` relative to its parent, so a link swapped in after the ``lstat`` fails the
  open instead of being followed, and the walk looks again. ``..`` pops one opened
  directory and never climbs above the anchor. Each opened directory's ``(st_dev,
  st_ino)`` is compared with the forbidden directories'.
* **Windows** (no directory fds): open by path, then verify the opened file's final path
  (``GetFinalPathNameByHandleW``) with :func:`check_within`; what is outside is closed
  unread. The same check runs on Linux in the tests, with ``/proc/self/fd`` as the
  final-path source. Directories are listed and walked by their checked real path,
  junctions and other reparse points treated as links (weaker than the fd walk: a swap
  between the check and the listing can show names, never content).

Only regular files are opened for content: a FIFO, socket or device is refused before it
is read (the walk ``lstat``\\s it first; ``openat2`` opens with ``O_NONBLOCK`` so a FIFO
cannot block, then ``fstat`` decides and ``O_NONBLOCK`` is cleared). Writes
(:func:`write_file`) create a temporary file and rename it over the target through one
parent-directory fd, so a parent swapped mid-write cannot redirect them.

API (all paths are ``str``; every returned fd is the caller's to close):

``Anchor(path, forbid=(), exact=False)``, :func:`open_dir`, :func:`open_regular`,
:func:`write_file`, :func:`listing` (``Entry``), :func:`walk`, :func:`final_path`,
:func:`fd_directory`, :func:`check_within`, :func:`openat2_available`,
:func:`use_openat2`, :func:`kind_of`; errors :class:`EscapeError`, :class:`ForbiddenError`,
:class:`NotRegularError` (all :class:`BeneathError`), and plain ``OSError`` for the rest
(missing file, permission, name too long).

Not covered: hard links (a hard link inside the anchor to a file elsewhere is the same
file; only a process that could already reach the target can make one) and bind mounts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from dsh.core.errors import InvalidArgumentError

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
O_NOCTTY = getattr(os, "O_NOCTTY", 0)
O_BINARY = getattr(os, "O_BINARY", 0)

_DIR = os.O_RDONLY | O_DIRECTORY | O_CLOEXEC
_READ = os.O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_BINARY

MAX_SYMLINKS = 40
"""Symlinks one resolution may follow (the kernel's own limit), then ``ELOOP``."""
MAX_RACES = 16
"""Times a walk may find a component changed under it before giving up (``EAGAIN``)."""

_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437
"""The same number on x86-64 and arm64 (the generic syscall table)."""

WINDOWS = sys.platform == "win32"


class Anchor(NamedTuple):
    """A directory every resolution stays beneath.

    ``path`` is the directory's real absolute path. ``forbid`` are real paths of
    directories at or beneath it that are never entered (the dsh home inside a
    workspace). ``exact`` follows no symlink at all: an approval of one named path grants
    that path, not wherever a link there points.
    """

    path: str
    forbid: tuple[str, ...] = ()
    exact: bool = False


class BeneathError(InvalidArgumentError):
    """A resolution refused for the boundary's sake; ``path`` is the relative path asked."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class EscapeError(BeneathError):
    """The path (through ``..`` or a symlink) leads out of the anchor."""


class ForbiddenError(BeneathError):
    """The path enters the forbidden directory ``directory``."""

    def __init__(self, directory: str, path: str) -> None:
        super().__init__(f"{directory} may not be entered", path)
        self.directory = directory


class NotRegularError(BeneathError):
    """The path names a FIFO, socket, device or directory where a regular file is needed.

    ``kind`` is what it is, in words ("a FIFO").
    """

    def __init__(self, kind: str, path: str) -> None:
        super().__init__(f"not a regular file ({kind})", path)
        self.kind = kind


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words, for refusals."""
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return word
    return "not a regular file"


# -- openat2 ---------------------------------------------------------------------------------

_openat2: Any = None
"""The ctypes ``syscall`` function once loaded; False when openat2 is unusable here."""


def openat2_available() -> bool:
    """Whether this process resolves through ``openat2`` (else the component walk)."""
    return _load_openat2() is not False


def use_openat2(enabled: bool) -> None:
    """Resolve through ``openat2`` where the kernel has it (True, the default) or always
    walk (False): the benchmark measures both, the tests run both."""
    global _openat2
    _openat2 = None if enabled else False


def _load_openat2() -> Any:
    global _openat2
    if _openat2 is None:
        import platform

        if not sys.platform.startswith("linux") or platform.machine() not in (
                "x86_64", "aarch64", "arm64"):
            _openat2 = False
            return _openat2
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            syscall = libc.syscall
        except (OSError, AttributeError):
            _openat2 = False
            return _openat2
        syscall.restype = ctypes.c_long
        syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                            ctypes.c_size_t]
        _openat2 = (syscall, ctypes)
    return _openat2


class _FallbackError(Exception):
    """openat2 cannot decide this one: use the walk."""


def _call_openat2(dir_fd: int, rel: str, flags: int, exact: bool) -> int:
    """``openat2(dir_fd, rel, flags, BENEATH|NO_MAGICLINKS[|NO_SYMLINKS])``.

    Raises :class:`_FallbackError` when the walk must decide (a symlink the kernel will not
    follow beneath, an ``EAGAIN`` race, or no openat2 at all) and ``OSError`` otherwise.
    """
    global _openat2
    loaded = _load_openat2()
    if loaded is False:
        raise _FallbackError
    syscall, ctypes = loaded
    resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS | (_RESOLVE_NO_SYMLINKS if exact else 0)
    how = (flags.to_bytes(8, sys.byteorder) + bytes(8) + resolve.to_bytes(8, sys.byteorder))
    fd = syscall(_SYS_OPENAT2, dir_fd, os.fsencode(rel), how, 24)
    if fd >= 0:
        return int(fd)
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EPERM, errno.E2BIG):
        _openat2 = False  # no openat2 here (old kernel, seccomp filter): walk from now on
        raise _FallbackError
    if code in (errno.EXDEV, errno.ELOOP, errno.EAGAIN, errno.EINVAL):
        raise _FallbackError  # the walk decides this one (and says what is wrong, if anything)
    raise OSError(code, os.strerror(code), rel)


# -- the walk --------------------------------------------------------------------------------


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def file_ids(paths: Iterable[str]) -> dict[tuple[int, int], str]:
    """Each existing path by its ``(st_dev, st_ino)``: how a walk (and the boundary)
    knows a protected directory whatever name reaches it."""
    found = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        found[(st.st_dev, st.st_ino)] = path
    return found


def _relative(anchor: Anchor, rel: str) -> str:
    """``rel`` made relative to the anchor: an absolute path must lie under it (as written)."""
    if not rel.startswith("/"):
        return rel
    prefix = anchor.path.rstrip("/")
    if rel == prefix or rel.startswith(prefix + "/"):
        return rel[len(prefix):].lstrip("/") or "."
    raise EscapeError(f"an absolute path outside {anchor.path}", rel)


def _open_anchor(anchor: Anchor, rel: str) -> tuple[int, dict[tuple[int, int], str]]:
    """The anchor's fd and the forbidden directories' ids; a forbidden anchor is refused."""
    try:
        fd = os.open(anchor.path, _DIR | O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise EscapeError(f"{anchor.path} is no longer a directory", rel) from None
        raise
    forbid = file_ids(anchor.forbid) if anchor.forbid else {}
    if forbid:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in forbid:
            os.close(fd)
            raise ForbiddenError(forbid[(st.st_dev, st.st_ino)], rel)
    return fd, forbid


def _inside_rel(anchor: str, target: str) -> str | None:
    """``target`` (absolute) as a path relative to ``anchor``, or None when outside it.

    Judged on the target's real path: the walk re-resolves the result from the anchor,
    so a stale answer can only send it somewhere it checks again.
    """
    try:
        real = os.path.realpath(target)
    except OSError:  # changed while resolved (CPython's realpath race): refuse
        return None
    if real == anchor:
        return "."
    prefix = anchor.rstrip(os.sep) + os.sep
    return real[len(prefix):] if real.startswith(prefix) else None


def _walk_to(anchor: Anchor, anchor_fd: int, rel: str, forbid: dict[tuple[int, int], str],
             *, create: bool) -> tuple[int, str]:
    """Resolve ``rel`` beneath the anchor: ``(parent fd, last name)``.

    The last name is not a symlink when checked (a link there was followed) and may not
    exist; ``""`` means ``rel`` ends at the returned directory itself. ``create`` makes
    missing intermediate directories. The returned fd is the caller's.
    """
    stack = [anchor_fd]
    parts = deque(_split(rel))
    links = races = 0

    def race() -> None:
        nonlocal races
        races += 1
        if races > MAX_RACES:
            raise OSError(errno.EAGAIN, "the path kept changing while it was opened", rel)

    try:
        while parts:
            name = parts.popleft()
            if name == "..":
                if len(stack) == 1:
                    raise EscapeError("'..' leads out", rel)
                os.close(stack.pop())
                continue
            top = stack[-1]
            try:
                st = os.stat(name, dir_fd=top, follow_symlinks=False)
            except FileNotFoundError:
                if not parts:
                    parts.append(name)
                    break
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o777, dir_fd=top)
                except FileExistsError:
                    race()
                parts.appendleft(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                if anchor.exact:
                    raise EscapeError("it is a symlink, and only the approved path itself "
                                      "may be used", rel)
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
                try:
                    target = os.readlink(name, dir_fd=top)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOENT):
                        raise
                    race()  # no longer a link (or gone) since the lstat: look again
                    parts.appendleft(name)
                    links -= 1
                    continue
                if target.startswith("/"):
                    inner = _inside_rel(anchor.path, target)
                    if inner is None:
                        raise EscapeError(f"a symlink points out ({name} -> {target})", rel)
                    while len(stack) > 1:
                        os.close(stack.pop())
                    target = inner
                parts.extendleft(reversed(_split(target)))
                continue
            if not parts:
                parts.append(name)
                break
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), rel)
            try:
                fd = os.open(name, _DIR | O_NOFOLLOW, dir_fd=top)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    race()  # swapped since the lstat: look at it again
                    parts.appendleft(name)
                    continue
                raise
            stack.append(fd)
            if forbid:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) in forbid:
                    raise ForbiddenError(forbid[(st.st_dev, st.st_ino)], rel)
        last = parts[0] if parts else ""
        result = stack.pop() if len(stack) > 1 else os.dup(anchor_fd)
        return result, last
    finally:
        for fd in stack[1:]:
            os.close(fd)


def _resolve(anchor: Anchor, rel: str, *, create: bool = False) -> tuple[int, str]:
    """``(parent fd, last name)`` of ``rel`` beneath ``anchor`` (see :func:`_walk_to`).

    The parent comes from ``openat2`` when it can decide; the last name is then checked
    with ``lstat``, and a symlink there sends the whole path through the walk.
    """
    anchor_fd, forbid = _open_anchor(anchor, rel)
    try:
        parts = _split(rel)
        if not forbid and not create and parts and parts[-1] != "..":
            parent = "/".join(parts[:-1]) or "."
            try:
                fd = _call_openat2(anchor_fd, parent, _DIR, anchor.exact)
            except (_FallbackError, FileNotFoundError):
                pass
            else:
                try:
                    st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return fd, parts[-1]
                except BaseException:
                    os.close(fd)
                    raise
                if not stat.S_ISLNK(st.st_mode):
                    return fd, parts[-1]
                os.close(fd)
        return _walk_to(anchor, anchor_fd, rel, forbid, create=create)
    finally:
        os.close(anchor_fd)


# -- the public operations -------------------------------------------------------------------


def open_dir(anchor: Anchor, rel: str = ".", *, create: bool = False) -> int:
    """A read-only fd of the directory ``rel`` beneath ``anchor`` (made when ``create``)."""
    if WINDOWS:
        raise OSError(errno.ENOSYS, "directory descriptors are not available on Windows", rel)
    rel = _relative(anchor, rel)
    anchor_fd, forbid = _open_anchor(anchor, rel)
    try:
        if not forbid and not create:
            try:
                return _call_openat2(anchor_fd, rel or ".", _DIR, anchor.exact)
            except _FallbackError:
                pass
        for _ in range(MAX_RACES):
            parent, name = _walk_to(anchor, anchor_fd, rel, forbid, create=create)
            if not name:
                return parent
            try:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=parent)
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    continue  # became a link since the walk: resolve again
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), rel)
                try:
                    fd = os.open(name, _DIR | O_NOFOLLOW, dir_fd=parent)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        continue
                    raise
            finally:
                os.close(parent)
            if forbid:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) in forbid:
                    os.close(fd)
                    raise ForbiddenError(forbid[(st.st_dev, st.st_ino)], rel)
            return fd
        raise OSError(errno.EAGAIN, "the path kept changing while it was opened", rel)
    finally:
        os.close(anchor_fd)


def open_regular(anchor: Anchor, rel: str) -> int:
    """A blocking, read-only fd of the regular file ``rel`` beneath ``anchor``.

    A directory raises ``IsADirectoryError``; a FIFO, socket or device
    :class:`NotRegularError` without a read (and, through the walk, without an open).
    """
    if WINDOWS:
        return _open_verified(anchor, rel)
    rel = _relative(anchor, rel)
    for _ in range(MAX_RACES):
        fd = _open_nonblocking(anchor, rel)
        if fd is None:
            continue
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
            if not stat.S_ISREG(mode):
                raise NotRegularError(kind_of(mode), rel)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise OSError(errno.EAGAIN, "the path kept changing while it was opened", rel)


def _open_nonblocking(anchor: Anchor, rel: str) -> int | None:
    """One attempt at opening ``rel`` ``O_NONBLOCK``; None when it changed under us."""
    anchor_fd, forbid = _open_anchor(anchor, rel)
    try:
        if not forbid:
            try:
                return _call_openat2(anchor_fd, rel, _READ, anchor.exact)
            except _FallbackError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # a socket: say what it is
                    raise
        parent, name = _walk_to(anchor, anchor_fd, rel, forbid, create=False)
    finally:
        os.close(anchor_fd)
    try:
        if not name:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            return None
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
        if not stat.S_ISREG(mode):
            raise NotRegularError(kind_of(mode), rel)
        try:
            return os.open(name, _READ | O_NOFOLLOW, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                return None  # swapped for a link or a socket since the lstat
            raise
    finally:
        os.close(parent)


def write_file(anchor: Anchor, rel: str, data: bytes, *, create_parents: bool = True) -> bool:
    """Replace ``rel`` beneath ``anchor`` with ``data`` atomically; True when it existed.

    A temporary file is written and fsynced in the target's directory, then renamed over
    the target, both through one directory fd. An existing file keeps its permission
    bits; a new one gets ``0o666`` less the umask. A directory, FIFO, socket or device at
    the target is refused; a symlink there was followed by the resolution (staying beneath
    the anchor), so its target is what is replaced.
    """
    if WINDOWS:
        return _write_verified(anchor, rel, data, create_parents=create_parents)
    rel = _relative(anchor, rel)
    for _ in range(MAX_RACES):
        parent, name = _resolve(anchor, rel, create=create_parents)
        try:
            if not name:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                continue  # became a link since the resolution: resolve again
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise NotRegularError(kind_of(st.st_mode), rel)
            _replace_at(parent, name, data, None if st is None else stat.S_IMODE(st.st_mode))
            return st is not None
        finally:
            os.close(parent)
    raise OSError(errno.EAGAIN, "the path kept changing while it was written", rel)


def _replace_at(parent: int, name: str, data: bytes, mode: int | None) -> None:
    """Write ``data`` to a temporary file in ``parent`` and rename it to ``name``."""
    temp = f".dsh-{os.urandom(6).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC
    fd = os.open(temp, flags, 0o666 if mode is None else 0o600, dir_fd=parent)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise
    with contextlib.suppress(OSError):
        os.fsync(parent)


class Entry(NamedTuple):
    """One directory entry: its name and whether it is a directory or a link (a link is
    never a directory here, whatever it points to)."""

    name: str
    is_dir: bool = False
    is_link: bool = False


def listing(anchor: Anchor, rel: str = ".") -> list[Entry]:
    """The entries of the directory ``rel`` beneath ``anchor``, sorted by name."""
    if WINDOWS:
        path = checked_dir(anchor, rel)
        with os.scandir(path) as it:
            return sorted((_entry(e) for e in it), key=lambda e: e.name)
    fd = open_dir(anchor, rel)
    try:
        with os.scandir(fd) as it:
            return sorted((_entry(e) for e in it), key=lambda e: e.name)
    finally:
        os.close(fd)


def walk(anchor: Anchor, rel: str = ".") -> Iterator[
        tuple[str, list[str], list[str], list[str]]]:
    """Walk the directory ``rel`` beneath ``anchor`` top-down, following no link.

    Yields ``(directory relative to rel, dirnames, filenames, linknames)``, each list
    sorted; links, to directories too, are listed apart and never entered, and no
    directory of ``anchor.forbid`` is entered or named. The caller may prune
    ``dirnames`` in place. Only names come out: open what was found with
    :func:`open_regular` (``rel`` joined), which checks the path again.
    """
    if WINDOWS:
        yield from _walk_paths(anchor, checked_dir(anchor, rel), "")
        return
    fd = open_dir(anchor, rel)
    try:
        ids = file_ids(anchor.forbid)
        for top, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            # fwalk lists a link to a directory among dirs (it only declines to enter it).
            kept: list[str] = []
            links: list[str] = []
            plain: list[str] = []
            for name in dirs:
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    links.append(name)
                elif (st.st_dev, st.st_ino) not in ids:
                    kept.append(name)
            for name in files:
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                (links if stat.S_ISLNK(st.st_mode) else plain).append(name)
            dirs[:] = sorted(kept)
            yield ("" if top == "." else top[2:]), dirs, sorted(plain), sorted(links)
    finally:
        os.close(fd)


def _entry(entry: os.DirEntry[str]) -> Entry:
    link = entry.is_symlink() or _reparse_point(entry)
    return Entry(entry.name, not link and entry.is_dir(follow_symlinks=False), link)


def _reparse_point(entry: os.DirEntry[str]) -> bool:
    """A Windows junction or other reparse point (a link by another name)."""
    if not WINDOWS:
        return False
    attributes = getattr(entry.stat(follow_symlinks=False), "st_file_attributes", 0)
    return bool(attributes & 0x400)  # FILE_ATTRIBUTE_REPARSE_POINT


def checked_dir(anchor: Anchor, rel: str) -> str:
    """The directory's real path, checked to lie beneath the anchor and outside its
    forbidden directories: for what must work by path (Windows, and a program given a
    directory where there is no ``/proc``); a swap after the check is not caught."""
    real = os.path.realpath(os.path.join(anchor.path, rel))
    check_within(anchor, real, rel)
    if not os.path.isdir(real):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), rel)
    return real


def _walk_paths(anchor: Anchor, path: str, rel: str) -> Iterator[
        tuple[str, list[str], list[str], list[str]]]:
    """Windows' walk: by path, reparse points listed as links, forbidden ones skipped."""
    with os.scandir(path) as it:
        entries = sorted((_entry(e) for e in it), key=lambda e: e.name)
    forbid = [os.path.normcase(p) for p in anchor.forbid]
    dirs = [e.name for e in entries if e.is_dir
            and os.path.normcase(os.path.join(path, e.name)) not in forbid]
    files = [e.name for e in entries if not e.is_dir and not e.is_link]
    yield rel, dirs, files, [e.name for e in entries if e.is_link]
    for name in dirs:
        yield from _walk_paths(anchor, os.path.join(path, name),
                               f"{rel}/{name}" if rel else name)


def fd_directory(fd: int) -> str | None:
    """A path a child process can ``chdir`` to that is exactly the directory of ``fd``
    (pass the fd to it), or None where there is none (no ``/proc``)."""
    if sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd"):
        return f"/proc/self/fd/{fd}"
    return None


def final_path(fd: int) -> str | None:
    """The real path of the open file ``fd`` now, or None when the platform cannot say."""
    if sys.platform.startswith("linux"):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return None if path.endswith(" (deleted)") or not path.startswith("/") else path
    if sys.platform == "darwin":
        import fcntl

        try:
            raw = fcntl.fcntl(fd, 50, b"\0" * 1024)  # F_GETPATH
        except OSError:
            return None
        return os.fsdecode(raw.split(b"\0", 1)[0]) or None
    if WINDOWS:
        return _windows_final_path(fd)
    return None


def check_within(anchor: Anchor, real: str | None, rel: str = "") -> None:
    """Refuse an opened file whose real path is outside ``anchor`` or in a forbidden
    directory (the open-then-verify branch; ``real`` None is refused too)."""
    if real is None:
        raise EscapeError("the opened file's real path cannot be checked", rel)

    def norm(path: str) -> str:  # case-insensitive where the platform's disks are
        return os.path.normcase(path).casefold() if sys.platform == "darwin" else \
            os.path.normcase(path)

    def inside(root: str, path: str) -> bool:
        try:
            return os.path.commonpath([norm(root), norm(path)]) == norm(root)
        except ValueError:
            return False

    if anchor.exact:
        target = os.path.join(anchor.path, rel) if rel else anchor.path
        if norm(os.path.normpath(real)) != norm(os.path.normpath(target)):
            raise EscapeError(f"it resolves to {real}, not the approved path", rel)
    if not inside(anchor.path, real):
        raise EscapeError(f"it resolves to {real}, outside {anchor.path}", rel)
    for path in anchor.forbid:
        if inside(path, real):
            raise ForbiddenError(path, rel)


def _open_verified(anchor: Anchor, rel: str) -> int:
    """Open by path, then keep the fd only when its final path passes :func:`check_within`."""
    fd = os.open(os.path.join(anchor.path, rel), os.O_RDONLY | O_BINARY | O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        check_within(anchor, final_path(fd), rel)
        if not stat.S_ISREG(mode):
            raise NotRegularError(kind_of(mode), rel)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_verified(anchor: Anchor, rel: str, data: bytes, *, create_parents: bool) -> bool:
    """Windows writes: the parent's real path checked, then a temp file and a replace."""
    target = os.path.join(anchor.path, rel)
    parent = os.path.dirname(target)
    if create_parents:
        os.makedirs(parent, exist_ok=True)
    check_within(anchor._replace(exact=False), os.path.realpath(parent), rel)
    existed = os.path.exists(target)
    if existed:
        fd = _open_verified(anchor, rel)
        os.close(fd)
    temp = os.path.join(parent, f".dsh-{os.urandom(6).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_BINARY, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return existed


def _windows_final_path(fd: int) -> str | None:  # pragma: no cover - Windows only
    import ctypes
    import msvcrt

    handle = msvcrt.get_osfhandle(fd)  # type: ignore[attr-defined]  # Windows' msvcrt
    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    buffer = ctypes.create_unicode_buffer(32768)
    length = kernel32.GetFinalPathNameByHandleW(handle, buffer, len(buffer), 0)
    if not length or length >= len(buffer):
        return None
    path = buffer.value
    if path.startswith("\\\\?\\UNC\\"):
        return "\\\\" + path[8:]
    return path[4:] if path.startswith("\\\\?\\") else path
