"""AGENTS.md and skills in a real ``dsh --profile sdk`` session with the scripted model.

The runtime is a real process on real pipes; the home, the project and its files are real.
The verdict is what the model was shown (``user/message`` events of the runtime-context
sections, sent before the first model request) and what the ``skill`` tool answered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.config.profiles import seed_template

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

SCRIPT = [
    {"text": "Loading skills.", "tool_calls": [
        {"name": "skill", "arguments": {"name": "greet"}},
        {"name": "skill", "arguments": {"name": "broken"}},
        {"name": "skill", "arguments": {"name": "nope"}}]},
    {"text": "Done."},
    {"text": "Second turn done."},
]


def skill(place: Path, name: str, text: str) -> Path:
    path = place / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def events_of(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"]


def sections(events: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The runtime-context sections the session was shown, in order."""
    return [s for e in events if e["type"] == "user/message"
            and e["data"]["source"]["kind"] == "runtime-context"
            for s in e["data"]["source"]["sections"]]


def result_text(event: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in event["data"]["message"]["content"])


def prompt(proc: RuntimeProcess, text: str) -> list[dict[str, Any]]:
    answer = proc.call("session/prompt", {"sessionId": "s1",
                                          "contentBlocks": [{"type": "text", "text": text}]})
    assert "messageId" in answer["result"], answer
    return events_of(proc.until("session.status",
                                lambda f: f["params"]["status"] == "idle", timeout=30))


def test_agents_md_and_skills_reach_the_model(dsh_home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    work = project / "pkg"
    (project / ".git").mkdir(parents=True)
    work.mkdir()
    (dsh_home / "AGENTS.md").write_text("Home rule: answer briefly.\n")
    (project / "AGENTS.md").write_text("Root rule: run the tests.\n")
    huge = work / "AGENTS.md"
    huge.write_text("Inner rule.\n" + "x" * 99_988)  # 100 000 bytes
    skill(dsh_home / "skills", "greet", "---\ndescription: home greeting\n---\nHOME BODY\n")
    # The profile folder must hold the seeded template before skills go in beside it.
    seed_template(dsh_home, "sdk")
    skill(dsh_home / "profiles" / "sdk" / "skills", "deploy",
          "---\ndescription: Ship a release.\n---\nDEPLOY BODY\n")
    greet = skill(project / ".dsh" / "skills", "greet",
                  "---\nname: greet\ndescription: Greet the user warmly.\n---\nPROJECT BODY\n")
    broken = skill(project / ".dsh" / "skills", "broken", "---\nname: broken\n---\nno desc\n")
    script = tmp_path / "script.yml"
    script.write_text(json.dumps(SCRIPT))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted",
                                  "merge": {"config": {"script": str(script)}}}]))

    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work)
    try:
        proc.initialize(work, provider="scripted", model="scripted")
        events = prompt(proc, "greet me")
        first_request = next(i for i, e in enumerate(events) if e["type"] == "assistant/message")
        shown = {s["name"]: s["text"] for s in sections(events[:first_request])}
        assert set(shown) == {"working-directory:current", "instructions", "skills"}

        text = shown["instructions"]
        for path, rule in ((dsh_home / "AGENTS.md", "Home rule"),
                           (project / "AGENTS.md", "Root rule"), (huge, "Inner rule")):
            assert f'<agents-md path="{path}"' in text and rule in text
        assert text.index("Home rule") < text.index("Root rule") < text.index("Inner rule")
        assert f"[dsh: cut at 32768 of 100000 bytes (per-file cap); the full file is {huge}]" \
            in text
        assert len(text.encode()) < 34_000

        assert shown["skills"].splitlines()[1:] == [
            "- deploy: Ship a release.", "- greet: Greet the user warmly."]

        results = [e for e in events if e["type"] == "tool/result"]
        assert [r["data"]["message"]["isError"] for r in results] == [False, True, True]
        loaded, malformed, unknown = map(result_text, results)
        assert loaded == (f"Skill 'greet' ({greet}). Paths in it are relative to "
                          f"{greet.parent}.\n\nPROJECT BODY\n")
        assert malformed == (f"skill 'broken' cannot be loaded: {broken}: front matter has no "
                             "'description' (a non-empty string)")
        assert unknown == "unknown skill 'nope' (available: deploy, greet)"
        ends = [e for e in events if e["type"] == "turn/end"]
        assert ends[-1]["data"]["reason"]["kind"] == "completed"

        # Next turn, from the project root: the inner file no longer applies and the edited
        # root file is shown again; the skills did not change, so they are not resent.
        (project / "AGENTS.md").write_text("Root rule: run the tests twice.\n")
        moved = proc.call("session/working-directory/set", {"sessionId": "s1",
                                                             "path": str(project)})
        assert moved["result"] == {"cwd": str(project)}
        second = {s["name"]: s["text"] for s in sections(prompt(proc, "again"))}
        assert set(second) == {"working-directory:current", "instructions"}
        assert "run the tests twice" in second["instructions"]
        assert "Inner rule" not in second["instructions"]
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()


def test_no_agents_md_and_no_skills_add_nothing(tmp_path: Path) -> None:
    work = tmp_path / "bare"
    work.mkdir()
    script = tmp_path / "script.yml"
    script.write_text(json.dumps([{"text": "Hi."}]))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted",
                                  "merge": {"config": {"script": str(script)}}}]))
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work)
    try:
        proc.initialize(work, provider="scripted", model="scripted")
        assert [s["name"] for s in sections(prompt(proc, "hello"))] == [
            "working-directory:current"]
        tools = [t["name"] for t in proc.call("tools/list")["result"]["tools"]]
        assert "skill" in tools
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()


def test_plugin_skills_are_listed_and_files_override_them(dsh_home: Path,
                                                          tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / ".dsh" / "skills").mkdir(parents=True)
    skill(work / ".dsh" / "skills", "override-me",
          "---\ndescription: From the project.\n---\nFILE BODY\n")
    script = tmp_path / "script.yml"
    script.write_text(json.dumps([
        {"tool_calls": [{"name": "skill", "arguments": {"name": "checklist"}},
                        {"name": "skill", "arguments": {"name": "override-me"}}]},
        {"text": "Done."}]))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([
        {"id": "llm-scripted", "merge": {"config": {"script": str(script)}}},
        {"insert": [{"id": "skill-plugin", "name": "skill_plugin:SkillPlugin"}]}]))
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parent)})
    try:
        proc.initialize(work, provider="scripted", model="scripted")
        events = prompt(proc, "check")
        shown = {s["name"]: s["text"] for s in sections(events)}
        assert shown["skills"].splitlines()[1:] == [
            "- checklist: A checklist from a plugin.", "- override-me: From the project."]
        results = [result_text(e) for e in events if e["type"] == "tool/result"]
        assert results[0] == "Skill 'checklist' (from row 'skill-plugin').\n\nPLUGIN BODY"
        assert results[1].endswith("\n\nFILE BODY\n")
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
