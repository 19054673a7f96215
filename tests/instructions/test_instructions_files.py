"""Which ``AGENTS.md`` files apply to a working directory, and the caps on what is shown.

Real files in the test's temp folders; :mod:`dsh.runtime.tools.agentdocs.instructions` is
called directly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh.runtime.tools.agentdocs import instructions


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project (``.git``) with a nested folder, outside the home."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "pkg" / "sub").mkdir(parents=True)
    return root


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_home_then_project_root_down_to_cwd(dsh_home: Path, project: Path) -> None:
    write(dsh_home / "AGENTS.md", "home rule\n")
    write(project / "AGENTS.md", "root rule\n")
    write(project / "pkg" / "sub" / "AGENTS.md", "sub rule\n")
    write(project.parent / "AGENTS.md", "above the root: never read\n")
    found = instructions.load(str(dsh_home), str(project / "pkg" / "sub"))
    assert [(i.scope, i.path, i.text) for i in found] == [
        ("home", str(dsh_home / "AGENTS.md"), "home rule\n"),
        ("project", str(project / "AGENTS.md"), "root rule\n"),
        ("project", str(project / "pkg" / "sub" / "AGENTS.md"), "sub rule\n"),
    ]
    text = instructions.render(found)
    assert text is not None
    assert text.index("home rule") < text.index("root rule") < text.index("sub rule")
    assert f'<agents-md path="{project / "AGENTS.md"}" scope="project">\nroot rule\n' in text
    assert "above the root" not in text


def test_without_a_project_root_only_the_cwd_is_searched(dsh_home: Path,
                                                         tmp_path: Path) -> None:
    cwd = tmp_path / "loose" / "dir"
    write(cwd / "AGENTS.md", "here\n")
    write(tmp_path / "loose" / "AGENTS.md", "parent\n")
    found = instructions.load(str(dsh_home), str(cwd))
    assert [i.text for i in found] == ["here\n"]
    assert instructions.project_dirs(str(cwd), str(dsh_home)) == [str(cwd)]


def test_a_dot_dsh_folder_marks_a_project_but_the_home_does_not(tmp_path: Path) -> None:
    user = tmp_path / "user"
    home = user / ".dsh"
    home.mkdir(parents=True)
    work = user / "work" / "a"
    work.mkdir(parents=True)
    # ~/.dsh is the home: ~ is not a project root, so only the cwd is searched.
    assert instructions.project_root(str(work), str(home)) is None
    (user / "work" / ".dsh").mkdir()
    assert instructions.project_root(str(work), str(home)) == str(user / "work")


def test_nothing_found_renders_nothing(dsh_home: Path, project: Path) -> None:
    assert instructions.load(str(dsh_home), str(project)) == []
    assert instructions.render([]) is None


def test_per_file_cap_cuts_at_a_character_with_a_note(dsh_home: Path, project: Path) -> None:
    big = write(project / "AGENTS.md", "é" * 100)  # 200 bytes, two per character
    found = instructions.load(str(dsh_home), str(project), max_file_bytes=51,
                              max_total_bytes=1000)
    assert found[0].text == "é" * 25 and found[0].shown == 50 and found[0].size == 200
    text = instructions.render(found)
    assert text is not None
    assert f"[dsh: cut at 50 of 200 bytes (per-file cap); the full file is {big}]" in text


def test_total_cap_cuts_the_inner_files(dsh_home: Path, project: Path) -> None:
    write(dsh_home / "AGENTS.md", "h" * 60)
    write(project / "AGENTS.md", "r" * 60)
    inner = write(project / "pkg" / "AGENTS.md", "p" * 60)
    found = instructions.load(str(dsh_home), str(project / "pkg"), max_file_bytes=60,
                              max_total_bytes=100)
    assert [(i.shown, i.size, i.cap) for i in found] == [
        (60, 60, None), (40, 60, "total"), (0, 60, "total")]
    text = instructions.render(found)
    assert text is not None
    assert "r" * 40 + "\n[dsh: cut at 40 of 60 bytes (total cap)" in text
    assert f"[dsh: {inner} left out (60 bytes): the total for AGENTS.md files" in text
    assert "p" * 10 not in text
    assert len(text.encode()) < 100 + 1000  # the caps bound the section


def test_unreadable_files_are_skipped_with_a_note(dsh_home: Path, project: Path) -> None:
    loop = project / "AGENTS.md"
    os.symlink("AGENTS.md", loop)  # a symlink to itself
    (project / "pkg" / "AGENTS.md").mkdir()  # a folder where a file belongs
    fifo = project / "pkg" / "sub" / "AGENTS.md"
    os.mkfifo(fifo)  # would block forever if opened
    found = instructions.load(str(dsh_home), str(project / "pkg" / "sub"))
    assert [(i.path, i.problem) for i in found] == [
        (str(loop), "cannot read: Too many levels of symbolic links"),
        (str(project / "pkg" / "AGENTS.md"), "not a regular file"),
        (str(fifo), "not a regular file")]
    text = instructions.render(found)
    assert text is not None and f"[dsh: {loop} skipped: cannot read:" in text


def test_dangling_symlink_counts_as_absent(dsh_home: Path, project: Path) -> None:
    os.symlink("missing.md", project / "AGENTS.md")
    assert instructions.load(str(dsh_home), str(project)) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_permission_denied_is_a_note(dsh_home: Path, project: Path) -> None:
    locked = write(project / "AGENTS.md", "secret\n")
    locked.chmod(0)
    found = instructions.load(str(dsh_home), str(project))
    assert [i.problem for i in found] == ["cannot read: Permission denied"]


def test_a_file_reached_twice_is_shown_once(dsh_home: Path, project: Path) -> None:
    write(project / "AGENTS.md", "once\n")
    os.symlink(project, dsh_home / "linked")
    os.symlink(project / "AGENTS.md", dsh_home / "AGENTS.md")
    found = instructions.load(str(dsh_home), str(project))
    assert [i.text for i in found] == ["once\n"]


def test_invalid_utf8_is_replaced_not_fatal(dsh_home: Path, project: Path) -> None:
    (project / "AGENTS.md").write_bytes(b"ok \xff\xfe bytes\n")
    assert instructions.load(str(dsh_home), str(project))[0].text == "ok \ufffd\ufffd bytes\n"
