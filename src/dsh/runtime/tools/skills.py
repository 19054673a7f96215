"""The ``tools-skills`` row: skills listed to the model, and the ``skill`` tool that loads one.

Skills come from two kinds of source. Folders with a ``SKILL.md`` in the home, the profile
and the project's ``.dsh/skills`` (:mod:`dsh.runtime.tools.agentdocs.skills`, shared with
``dsh doctor``), and skills plugins register with ``reg.skill`` (``rt.skills``). Files
override plugins of the same name, as later places override earlier ones: the most
specific source wins.

The ``skills`` context section (name and description of each usable skill) is asked every
turn for the session's current directory, so a skill added or edited meanwhile shows up on
the next turn. The ``skill`` tool searches again when called and reads the file then, so
the body it returns is the file as it is now. A malformed skill is left out of the list;
asking for it by name is a tool error naming the file and what is wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, NamedTuple

from dsh._version import __version__
from dsh.runtime.kernel.plugin import (
    Capability,
    Checkup,
    ContextRequest,
    Diagnosis,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)
from dsh.runtime.tools.agentdocs import skills
from dsh.runtime.tools.base import ToolContext, ToolResult


class Available(NamedTuple):
    """One skill as the model may see it: from a file (``entry``) or a plugin (``body``)."""

    name: str
    description: str
    entry: skills.SkillEntry | None = None
    row_id: str | None = None
    body: str = ""

    @property
    def problem(self) -> str | None:
        """Why the skill cannot be used, or None."""
        return None if self.entry is None else self.entry.problem


class SkillTool:
    """``skill {name}``: the full instructions of one skill."""

    name = "skill"
    description = (
        "Load a skill: the full instructions for a kind of task. The skills context lists "
        "each skill's name and description; when a task matches one, load it first."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The skill's name, as listed."},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    mutating = False

    def __init__(self, plugin: SkillsTools) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Find the skill for the session's directory and return its body as it is now."""
        name = args["name"]
        found = await self._plugin.available(ctx.cwd)
        skill = found.get(name)
        if skill is None:
            usable = ", ".join(n for n, s in found.items() if s.problem is None)
            return ToolResult(f"unknown skill {name!r} (available: {usable or 'none'})",
                              is_error=True)
        if skill.entry is None:
            return ToolResult(f"Skill {name!r} (from row {skill.row_id!r}).\n\n{skill.body}")
        entry = skill.entry
        if entry.problem is not None:
            return ToolResult(f"skill {name!r} cannot be loaded: {entry.path}: {entry.problem}",
                              is_error=True)
        try:
            _, _, body, note = await asyncio.to_thread(skills.read, entry.path)
        except skills.SkillFormatError as exc:  # edited since the search
            return ToolResult(f"skill {name!r} cannot be loaded: {entry.path}: {exc}",
                              is_error=True)
        tail = f"\n[dsh: {note}]" if note else ""
        return ToolResult(f"Skill {name!r} ({entry.path}). Paths in it are relative to "
                          f"{entry.folder}.\n\n{body}{tail}")


class SkillsTools(Plugin):
    """Plugin row ``tools-skills``: the ``skill`` tool and the ``skills`` context section."""

    manifest = Manifest(
        id="tools-skills",
        version=__version__,
        capabilities=frozenset({Capability.TOOL, Capability.PROMPT}),
        description="Skills (folders with a SKILL.md in the home, the profile and the "
                    "project's .dsh/skills, and plugin skills): listed to the model, loaded "
                    "by the skill tool.",
        config_schema={"type": "object", "additionalProperties": False},
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._rt: RuntimeContext | None = None

    def apply(self, reg: Registrar) -> None:
        """Register the tool and the section."""
        reg.tool(SkillTool(self))
        reg.context("skills", self.section)

    async def start(self, rt: RuntimeContext) -> None:
        """Remember the home, profile and plugin skills the search reads."""
        self._rt = rt

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``skill.<name>``: each skill folder a session in the doctor's working directory
        would list (warn when malformed; what it overrides named), ``skills.<folder>``
        for a folder skipped, or one ``skills``."""
        found = skills.discover(checkup.home, checkup.profile, checkup.cwd)
        checks = []
        for name, entry in found.skills.items():
            where = checkup.shown(entry.path) + "".join(
                f" (overrides {checkup.shown(p)})" for p in entry.overrides)
            if entry.problem is not None:
                checks.append(Diagnosis(f"skill.{name}", "warn", f"{where}: {entry.problem}"))
            else:
                checks.append(Diagnosis(f"skill.{name}", "ok", f"{where}: {entry.description}"))
        if not found.skills:
            checks.append(Diagnosis("skills", "ok", "none in $DSH_HOME/skills, the profile's "
                                    "skills nor the project's .dsh/skills"))
        for folder, problem in found.notes:
            checks.append(Diagnosis(f"skills.{checkup.shown(folder)}", "warn", problem))
        return checks

    async def available(self, cwd: str) -> dict[str, Available]:
        """Every skill for a session in ``cwd`` by name (sorted), malformed ones included."""
        rt = self._rt
        if rt is None:
            return {}
        found: dict[str, Available] = {
            s.name: Available(s.name, s.description, row_id=s.row_id, body=s.body)
            for s in rt.skills.values()}
        on_disk = await asyncio.to_thread(skills.discover, rt.home, rt.profile, cwd)
        for name, entry in on_disk.skills.items():
            found[name] = Available(name, entry.description, entry)
        return {name: found[name] for name in sorted(found)}

    async def section(self, request: ContextRequest) -> str | None:
        """The list of usable skills, or None when there are none."""
        usable = [s for s in (await self.available(request.cwd)).values() if s.problem is None]
        if not usable:
            return None
        lines = ["Skills: instructions for particular kinds of task. When a task matches a "
                 "skill's description, call the `skill` tool with its name and follow what "
                 "it says."]
        lines += [f"- {s.name}: {s.description}" for s in usable]
        return "\n".join(lines)
