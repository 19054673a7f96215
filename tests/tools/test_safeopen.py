"""``safeopen``: opening beneath a directory without following a symlink out of it.

Every case runs twice where the kernel has ``openat2``: once through it and once through
the component walk (``use_openat2(False)``), since a machine without it (macOS, an old
kernel, a seccomp filter) takes the walk for everything.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.runtime.tools import safeopen
from dsh.runtime.tools.safeopen import Anchor

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="directory fds are POSIX")

STRATEGIES = ["walk", pytest.param("openat2", marks=pytest.mark.skipif(
    not safeopen.openat2_available(), reason="no openat2 on this machine"))]


@pytest.fixture(params=STRATEGIES)
def strategy(request: pytest.FixtureRequest) -> Iterator[str]:
    safeopen.use_openat2(request.param == "openat2")
    yield request.param
    safeopen.use_openat2(True)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``root`` (the anchor) and ``outside`` beside it, with links both ways."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "sub" / "f.txt").write_text("inside\n")
    (outside / "secret.txt").write_text("secret\n")
    (root / "rel-in").symlink_to("sub/f.txt")
    (root / "abs-in").symlink_to(root / "sub" / "f.txt")
    (root / "dir-in").symlink_to("sub", target_is_directory=True)
    (root / "rel-out").symlink_to("../outside/secret.txt")
    (root / "abs-out").symlink_to(outside / "secret.txt")
    (root / "dir-out").symlink_to(outside, target_is_directory=True)
    (root / "zero").symlink_to("/dev/zero")
    (root / "loop").symlink_to("loop")
    return root, outside


def read(anchor: Anchor, rel: str) -> str:
    fd = safeopen.open_regular(anchor, rel)
    with os.fdopen(fd) as f:
        return f.read()


@pytest.mark.parametrize("rel", ["sub/f.txt", "rel-in", "abs-in", "dir-in/f.txt",
                                 "sub/../sub/f.txt", "dir-in/../sub/f.txt", "./sub//f.txt"])
def test_reads_inside_including_links_that_stay_inside(strategy: str, tree: tuple[Path, Path],
                                                       rel: str) -> None:
    assert read(Anchor(str(tree[0])), rel) == "inside\n"


@pytest.mark.parametrize("rel", ["../outside/secret.txt", "rel-out", "abs-out",
                                 "dir-out/secret.txt", "sub/../../outside/secret.txt",
                                 "zero", "/etc/passwd", "dir-in/../../outside/secret.txt"])
def test_escapes_are_refused(strategy: str, tree: tuple[Path, Path], rel: str) -> None:
    with pytest.raises(safeopen.EscapeError):
        read(Anchor(str(tree[0])), rel)


def test_missing_loops_directories_and_long_names(strategy: str,
                                                  tree: tuple[Path, Path]) -> None:
    anchor = Anchor(str(tree[0]))
    with pytest.raises(FileNotFoundError):
        read(anchor, "sub/nope.txt")
    with pytest.raises(NotADirectoryError):
        read(anchor, "sub/f.txt/x")
    with pytest.raises(IsADirectoryError):
        read(anchor, "sub")
    with pytest.raises(OSError) as caught:
        read(anchor, "loop")
    assert caught.value.errno in (errno.ELOOP, errno.EXDEV) or isinstance(
        caught.value, safeopen.EscapeError)
    with pytest.raises(OSError) as too_long:
        read(anchor, "x" * 300)
    assert too_long.value.errno == errno.ENAMETOOLONG


def test_fifo_socket_and_device_are_refused_without_blocking(strategy: str,
                                                             tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    found: dict[str, BaseException] = {}

    def attempt() -> None:
        for name in ("fifo", "sock"):
            try:
                read(Anchor(str(tmp_path)), name)
            except BaseException as exc:  # recorded for the assertions below
                found[name] = exc

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(10)
    server.close()
    assert not thread.is_alive(), "opening a FIFO blocked"
    assert isinstance(found["fifo"], safeopen.NotRegularError)
    assert found["fifo"].kind == "a FIFO"
    assert isinstance(found["sock"], safeopen.NotRegularError)
    assert found["sock"].kind == "a socket"
    with pytest.raises(safeopen.NotRegularError, match="character device"):
        read(Anchor("/dev"), "null")


def test_forbidden_directories_are_never_entered(strategy: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    home = root / "home"
    home.mkdir(parents=True)
    (home / ".env").write_text("KEY=1\n")
    (root / "to-home").symlink_to("home", target_is_directory=True)
    (root / "env-link").symlink_to(home / ".env")
    anchor = Anchor(str(root), forbid=(str(home),))
    for rel in ("home/.env", "to-home/.env", "env-link", "home/../home/.env"):
        with pytest.raises(safeopen.ForbiddenError) as caught:
            read(anchor, rel)
        assert caught.value.directory == str(home)
    with pytest.raises(safeopen.ForbiddenError):
        safeopen.open_dir(anchor, "to-home")
    with pytest.raises(safeopen.ForbiddenError):
        safeopen.write_file(anchor, "home/patch.yml", b"- {id: x}\n")
    assert not (home / "patch.yml").exists()
    with pytest.raises(safeopen.ForbiddenError):
        safeopen.open_dir(Anchor(str(home), forbid=(str(home),)))


def test_exact_anchors_follow_no_symlink(strategy: str, tree: tuple[Path, Path]) -> None:
    exact = Anchor(str(tree[0]), exact=True)
    assert read(exact, "sub/f.txt") == "inside\n"
    for rel in ("rel-in", "dir-in/f.txt"):
        with pytest.raises(safeopen.EscapeError):
            read(exact, rel)


def test_open_dir_listing_and_walk(strategy: str, tree: tuple[Path, Path]) -> None:
    root = tree[0]
    (root / "sub" / "deeper").mkdir()
    fd = safeopen.open_dir(Anchor(str(root)), "dir-in")
    try:
        assert sorted(os.listdir(fd)) == ["deeper", "f.txt"]
    finally:
        os.close(fd)
    with pytest.raises(safeopen.EscapeError):
        safeopen.open_dir(Anchor(str(root)), "dir-out")
    with pytest.raises(safeopen.EscapeError):
        safeopen.listing(Anchor(str(root)), "dir-out")
    entries = {e.name: e for e in safeopen.listing(Anchor(str(root)))}
    assert entries["sub"] == safeopen.Entry("sub", is_dir=True)
    assert entries["dir-in"] == safeopen.Entry("dir-in", is_link=True)
    assert entries["zero"] == safeopen.Entry("zero", is_link=True)
    seen = {rel: (dirs, files, links) for rel, dirs, files, links
            in safeopen.walk(Anchor(str(root)))}
    # Links, to directories too, are listed apart and never entered.
    assert seen[""] == (["sub"], [], ["abs-in", "abs-out", "dir-in", "dir-out", "loop",
                                      "rel-in", "rel-out", "zero"])
    assert seen["sub"] == (["deeper"], ["f.txt"], [])
    assert set(seen) == {"", "sub", "sub/deeper"}
    pruned = safeopen.walk(Anchor(str(root), forbid=(str(root / "sub"),)))
    assert [rel for rel, *_ in pruned] == [""]


def test_write_file(strategy: str, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    anchor = Anchor(str(root))
    assert safeopen.write_file(anchor, "new/deep/n.txt", b"hello") is False
    assert (root / "new/deep/n.txt").read_bytes() == b"hello"
    (root / "sub" / "f.txt").chmod(0o640)
    assert safeopen.write_file(anchor, "rel-in", b"through the link") is True
    assert (root / "sub" / "f.txt").read_bytes() == b"through the link"
    assert (root / "rel-in").is_symlink()
    assert stat.S_IMODE((root / "sub" / "f.txt").stat().st_mode) == 0o640
    for rel in ("rel-out", "dir-out/new.txt", "../outside/new.txt", "abs-out"):
        with pytest.raises(safeopen.EscapeError):
            safeopen.write_file(anchor, rel, b"pwned")
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"
    os.mkfifo(root / "fifo")
    with pytest.raises(safeopen.NotRegularError):
        safeopen.write_file(anchor, "fifo", b"x")
    with pytest.raises(IsADirectoryError):
        safeopen.write_file(anchor, "sub", b"x")
    leftovers = [p for p in root.rglob(".dsh-*")]
    assert leftovers == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
def test_open_then_verify_branch(tree: tuple[Path, Path]) -> None:
    """The Windows branch's logic, with Linux's /proc as the final-path source."""
    root, outside = tree
    anchor = Anchor(str(root), forbid=(str(root / "sub"),))
    assert safeopen.final_path(os.open(root / "abs-in", os.O_RDONLY)) == str(
        root / "sub" / "f.txt")
    with pytest.raises(safeopen.EscapeError, match="outside"):
        safeopen._open_verified(anchor, "abs-out")
    with pytest.raises(safeopen.ForbiddenError):
        safeopen._open_verified(anchor, "rel-in")
    fd = safeopen._open_verified(Anchor(str(root)), "dir-in/f.txt")
    os.close(fd)
    with pytest.raises(safeopen.EscapeError):
        safeopen.check_within(Anchor(str(root)), None)
    with pytest.raises(safeopen.EscapeError, match="not the approved path"):
        safeopen.check_within(Anchor(str(root), exact=True), str(root / "sub" / "f.txt"),
                              "rel-in")
    safeopen.check_within(Anchor(str(root), exact=True), str(root / "sub" / "f.txt"),
                          "sub/f.txt")
    with pytest.raises(safeopen.EscapeError):
        safeopen.check_within(Anchor(str(root)), str(outside / "secret.txt"))


def test_the_by_path_directory_branch(tree: tuple[Path, Path]) -> None:
    """Windows lists and walks by checked path; the logic runs anywhere."""
    root = tree[0]
    (root / "sub" / "deeper").mkdir()
    assert safeopen.checked_dir(Anchor(str(root)), "dir-in") == str(root / "sub")
    with pytest.raises(safeopen.EscapeError):
        safeopen.checked_dir(Anchor(str(root)), "dir-out")
    with pytest.raises(safeopen.ForbiddenError):
        safeopen.checked_dir(Anchor(str(root), forbid=(str(root / "sub"),)), "dir-in")
    walked = list(safeopen._walk_paths(Anchor(str(root)), str(root), ""))
    assert walked[0] == ("", ["sub"], [], ["abs-in", "abs-out", "dir-in", "dir-out",
                                           "loop", "rel-in", "rel-out", "zero"])
    assert [rel for rel, *_ in walked] == ["", "sub", "sub/deeper"]
    pruned = safeopen._walk_paths(Anchor(str(root), forbid=(str(root / "sub"),)),
                                  str(root), "")
    assert [rel for rel, *_ in pruned] == [""]
