"""``dsh doctor`` lists the AGENTS.md files and skills a session would see, and why some
would be skipped; run as a real process in a real project, paths never absolute."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

RunDsh = Callable[..., subprocess.CompletedProcess[str]]


def skill(place: Path, name: str, text: str) -> None:
    (place / name).mkdir(parents=True, exist_ok=True)
    (place / name / "SKILL.md").write_text(text, encoding="utf-8")


def doctor_checks(run_dsh: RunDsh, cwd: Path) -> dict[str, dict[str, str]]:
    proc = run_dsh("doctor", "--json", cwd=cwd)
    assert proc.stderr == ""
    assert '"/' not in proc.stdout  # no absolute path
    document = json.loads(proc.stdout)
    ids = [c["id"] for c in document["data"]["checks"]]
    assert ids == sorted(ids)
    again = run_dsh("doctor", "--json", cwd=cwd)
    assert again.stdout == proc.stdout
    return {c["id"]: c for c in document["data"]["checks"]
            if c["id"].split(".")[0] in ("agents-md", "skill", "skills")}


def test_doctor_lists_agents_md_and_skills(run_dsh: RunDsh, dsh_home: Path,
                                           tmp_path: Path) -> None:
    project = tmp_path / "project"
    work = project / "pkg"
    (project / ".git").mkdir(parents=True)
    work.mkdir()
    (dsh_home / "AGENTS.md").write_text("home\n")
    (project / "AGENTS.md").write_text("root\n")
    (work / "AGENTS.md").write_text("x" * 40_000)
    skill(dsh_home / "skills", "greet", "---\ndescription: Say hello.\n---\nbody\n")
    skill(project / ".dsh" / "skills", "greet", "---\ndescription: Say hi.\n---\nbody\n")
    skill(project / ".dsh" / "skills", "broken", "---\ndescription: [oops\n---\n")
    checks = doctor_checks(run_dsh, work)
    broken = checks.pop("skill.broken")
    assert broken["status"] == "warn"
    # libyaml and the pure-Python parser word the problem differently.
    assert broken["message"].startswith("$CWD/../.dsh/skills/broken/SKILL.md: invalid YAML "
                                        "in front matter at line 3: ")
    assert {i: (c["status"], c["message"]) for i, c in checks.items()} == {
        "agents-md.$DSH_HOME/AGENTS.md": ("ok", "home: 5 bytes"),
        "agents-md.$CWD/../AGENTS.md": ("ok", "project: 5 bytes"),
        "agents-md.$CWD/AGENTS.md": ("warn", "project: 32768 of 40000 bytes shown "
                                             "(per-file cap)"),
        "skill.greet": ("ok", "$CWD/../.dsh/skills/greet/SKILL.md (overrides "
                              "$DSH_HOME/skills/greet/SKILL.md): Say hi."),
    }


def test_doctor_with_nothing_to_find(run_dsh: RunDsh) -> None:
    checks = doctor_checks(run_dsh, Path.cwd())
    assert {i: c["status"] for i, c in checks.items()} == {"agents-md": "ok", "skills": "ok"}
