"""Skills on disk: front matter, places and overrides, malformed files named with a reason.

Real folders under the test's home and a temp project; :mod:`dsh.runtime.tools.agentdocs.skills`
called directly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh.runtime.tools.agentdocs import skills


def skill(place: Path, name: str, text: str) -> Path:
    """Write ``place/name/SKILL.md``; returns its path."""
    path = place / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def good(description: str, body: str = "Do it.\n", name: str | None = None) -> str:
    head = f"name: {name}\n" if name else ""
    return f"---\n{head}description: {description}\n---\n{body}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    return root


def test_parse_reads_name_description_and_body() -> None:
    text = "\ufeff---\nname: notes\ndescription: >\n  Write release\n  notes.\n---\n\nBody\n"
    assert skills.parse(text, "notes") == ("notes", "Write release notes.", "Body\n")
    assert skills.parse("---\ndescription: d\n---\n", "x")[0] == "x"  # the folder's name


@pytest.mark.parametrize(("text", "problem"), [
    ("no front matter\n", "no front matter: the file must start with a '---' line"),
    ("", "no front matter: the file must start with a '---' line"),
    ("---\ndescription: d\n", "front matter is not closed by a '---' line"),
    ("---\ndescription: [unclosed\n---\n", "invalid YAML in front matter at line 3: "),
    ("---\n- a list\n---\n", "front matter must be a mapping with 'description'"),
    ("---\nname: ok\n---\n", "front matter has no 'description' (a non-empty string)"),
    ("---\ndescription: '  '\n---\n", "front matter has no 'description'"),
    ("---\ndescription: 5\n---\n", "front matter has no 'description'"),
    ("---\nname: Bad_Name\ndescription: d\n---\n", "name 'Bad_Name' is not a skill name"),
    ("---\nname: other\ndescription: d\n---\n", "name 'other' does not match its folder 'ok'"),
    ("---\ndescription: " + "x" * 1025 + "\n---\n", "description is 1025 characters"),
])
def test_parse_rejects_malformed_front_matter(text: str, problem: str) -> None:
    with pytest.raises(skills.SkillFormatError) as caught:
        skills.parse(text, "ok")
    assert str(caught.value).startswith(problem)


def test_places_and_overrides(dsh_home: Path, project: Path) -> None:
    home_greet = skill(dsh_home / "skills", "greet", good("home greeting"))
    skill(dsh_home / "skills", "only-home", good("home only"))
    prof_greet = skill(dsh_home / "profiles" / "sdk" / "skills", "greet", good("profile greeting"))
    proj_greet = skill(project / ".dsh" / "skills", "greet", good("project greeting"))
    skill(dsh_home / "profiles" / "other" / "skills", "elsewhere", good("other profile"))
    (dsh_home / "skills" / "README.md").write_text("not a skill\n")
    found = skills.discover(str(dsh_home), "sdk", str(project / "src"))
    assert list(found.skills) == ["greet", "only-home"]
    greet = found.skills["greet"]
    assert (greet.scope, greet.path, greet.description) == (
        "project", str(proj_greet), "project greeting")
    assert greet.overrides == (str(home_greet), str(prof_greet))
    assert greet.folder == str(proj_greet.parent)
    assert found.notes == ()


def test_a_malformed_later_skill_still_overrides(dsh_home: Path, project: Path) -> None:
    skill(dsh_home / "skills", "greet", good("home greeting"))
    broken = skill(project / ".dsh" / "skills", "greet", "---\nname: greet\n---\nbody\n")
    (project / ".dsh" / "skills" / "empty").mkdir()
    found = skills.discover(str(dsh_home), "sdk", str(project))
    greet = found.skills["greet"]
    assert (greet.path, greet.problem) == (
        str(broken), "front matter has no 'description' (a non-empty string)")
    assert found.skills["empty"].problem == "no SKILL.md in the folder"


def test_project_skills_need_a_project_root(dsh_home: Path, tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    skill(loose / ".dsh" / "skills", "x", good("x"))  # .dsh marks loose as the root
    assert list(skills.discover(str(dsh_home), "sdk", str(loose)).skills) == ["x"]
    assert skills.discover(str(dsh_home), "sdk", str(tmp_path)).skills == {}


def test_the_homes_dot_dsh_does_not_make_a_project(tmp_path: Path) -> None:
    user = tmp_path / "user"
    home = user / ".dsh"
    skill(home / "skills", "h", good("home"))
    (user / "work").mkdir()
    found = skills.discover(str(home), "sdk", str(user / "work"))
    assert [(e.name, e.scope, e.overrides) for e in found.skills.values()] == [
        ("h", "home", ())]


def test_read_caps_the_body_with_a_note(dsh_home: Path) -> None:
    path = skill(dsh_home / "skills", "long", good("long", "line\n" * 20000))
    name, description, body, note = skills.read(str(path))
    assert (name, description) == ("long", "long")
    assert len(body.encode()) < skills.MAX_SKILL_BYTES
    assert note == f"cut at {skills.MAX_SKILL_BYTES} of {path.stat().st_size} bytes; " \
                   f"the full file is {path}"


def test_unreadable_skill_file_and_symlink_loops(dsh_home: Path) -> None:
    place = dsh_home / "skills"
    place.mkdir()
    (place / "loop").mkdir()
    os.symlink("SKILL.md", place / "loop" / "SKILL.md")
    os.symlink(".", place / "self")  # a folder linking to its parent: one level, no recursion
    found = skills.discover(str(dsh_home), "sdk", str(dsh_home))
    assert found.skills["loop"].problem == "cannot read: Too many levels of symbolic links"
    assert found.skills["self"].problem == "no SKILL.md in the folder"


def test_too_many_folders_is_a_note(dsh_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skills, "MAX_SKILLS_PER_PLACE", 3)
    for n in range(5):
        skill(dsh_home / "skills", f"s{n}", good(f"skill {n}"))
    found = skills.discover(str(dsh_home), "sdk", str(dsh_home))
    assert list(found.skills) == ["s0", "s1", "s2"]
    assert found.notes == ((str(dsh_home / "skills"),
                            "only the first 3 of 5 entries were read"),)
