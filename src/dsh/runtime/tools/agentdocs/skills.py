"""Skills on disk: folders holding a ``SKILL.md``, found in the home, profile and project.

Shared by the runtime (the ``tools-skills`` row lists them to the model and its ``skill``
tool loads one) and ``dsh doctor`` (which lists them), so it imports nothing from the
runtime.

A skill is ``<place>/<name>/SKILL.md``: YAML front matter between ``---`` lines, then the
body the model reads on demand::

    ---
    name: release-notes          # optional; must equal the folder name
    description: Write release notes from the git log.   # required
    ---
    Steps ...

Places, in order: ``$DSH_HOME/skills``, ``$DSH_HOME/profiles/<profile>/skills``,
``<project root>/.dsh/skills`` (project root as in
:mod:`dsh.runtime.tools.agentdocs.instructions`). A later place overrides an earlier one by name,
*even when the later one is malformed*: a broken project skill is reported, never silently
replaced by the home one it was meant to override.

A malformed skill (no front matter, invalid YAML, missing description, bad name, not
readable) is kept as an entry with a ``problem``: listings leave it out, doctor says why,
and loading it by name is an error naming the file and the problem.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError
from dsh.runtime.tools.agentdocs.instructions import UnreadableError, project_root, read_capped

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 64 * 1024
MAX_SKILLS_PER_PLACE = 200
MAX_NAME = 64
MAX_DESCRIPTION = 1024
NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*\Z")


class SkillFormatError(ConfigError):
    """What is wrong with a ``SKILL.md``; the message is written for a person or model."""


class SkillEntry(NamedTuple):
    """A skill found on disk (``path`` is its ``SKILL.md``), usable or not.

    ``scope``: ``home``, ``profile`` or ``project``. ``problem`` is None for a usable
    skill. ``overrides`` are the ``SKILL.md`` paths of earlier places it hides.
    """

    name: str
    scope: str
    path: str
    description: str = ""
    problem: str | None = None
    overrides: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        """The skill's folder: paths in its body are relative to it."""
        return os.path.dirname(self.path)


class Found(NamedTuple):
    """What a search found: skills by name (sorted), and ``(folder, problem)`` of places
    that could not be read whole."""

    skills: Mapping[str, SkillEntry]
    notes: tuple[tuple[str, str], ...] = ()


def places(home: str, profile: str, cwd: str) -> list[tuple[str, str]]:
    """``(scope, folder)`` of every place skills may live, in override order."""
    home = os.path.abspath(home)
    found = [("home", os.path.join(home, "skills")),
             ("profile", os.path.join(home, "profiles", profile, "skills"))]
    root = project_root(cwd, home)
    if root is not None:
        found.append(("project", os.path.join(root, ".dsh", "skills")))
    return found


def parse(text: str, folder_name: str) -> tuple[str, str, str]:
    """``(name, description, body)`` of a ``SKILL.md``'s text; SkillFormatError if malformed.

    ``name`` defaults to ``folder_name`` and, when given, must equal it, so the name a
    model asks for always leads to one folder.
    """
    import yaml

    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillFormatError("no front matter: the file must start with a '---' line")
    end = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() == "---"), None)
    if end is None:
        raise SkillFormatError("front matter is not closed by a '---' line")
    try:
        meta: Any = yaml.load("".join(lines[1:end]),
                              Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = "" if mark is None else f" at line {mark.line + 2}"
        raise SkillFormatError(f"invalid YAML in front matter{where}: "
                               f"{getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(meta, Mapping):
        raise SkillFormatError("front matter must be a mapping with 'description'")
    name = meta.get("name", folder_name)
    if not isinstance(name, str) or not NAME.match(name) or len(name) > MAX_NAME:
        raise SkillFormatError(f"name {name!r} is not a skill name (lowercase letters, "
                               f"digits and single hyphens, at most {MAX_NAME})")
    if name != folder_name:
        raise SkillFormatError(f"name {name!r} does not match its folder {folder_name!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillFormatError("front matter has no 'description' (a non-empty string)")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION:
        raise SkillFormatError(f"description is {len(description)} characters "
                               f"(at most {MAX_DESCRIPTION})")
    return name, description, "".join(lines[end + 1:]).lstrip("\n")


def read(path: str) -> tuple[str, str, str, str | None]:
    """``(name, description, body, note)`` of the ``SKILL.md`` at ``path``.

    The body is cut at :data:`MAX_SKILL_BYTES` with ``note`` saying so (else None). Raises
    SkillFormatError for a malformed file and for one that cannot be read.
    """
    try:
        capped = read_capped(path, MAX_SKILL_BYTES)
    except FileNotFoundError:
        raise SkillFormatError(f"no {SKILL_FILE} in the folder") from None
    except UnreadableError as exc:
        raise SkillFormatError(str(exc)) from None
    name, description, body = parse(capped.text, os.path.basename(os.path.dirname(path)))
    note = None
    if capped.truncated:
        note = (f"cut at {capped.shown} of {capped.size} bytes; the full file is {path}")
    return name, description, body, note


def discover(home: str, profile: str, cwd: str) -> Found:
    """Every skill for ``profile`` working in ``cwd``, later places overriding earlier ones."""
    skills: dict[str, SkillEntry] = {}
    notes: list[tuple[str, str]] = []
    seen: set[str] = set()
    for scope, folder in places(home, profile, cwd):
        real = os.path.realpath(folder)
        if real in seen:  # the project's .dsh/skills may be the home's own
            continue
        seen.add(real)
        for entry in _scan(scope, folder, notes):
            earlier = skills.get(entry.name)
            if earlier is not None:
                entry = SkillEntry(entry.name, entry.scope, entry.path, entry.description,
                                   entry.problem, (*earlier.overrides, earlier.path))
            skills[entry.name] = entry
    return Found({name: skills[name] for name in sorted(skills)}, tuple(notes))


def _scan(scope: str, folder: str, notes: list[tuple[str, str]]) -> list[SkillEntry]:
    """The skills directly under ``folder`` (one level; no recursion, so no loops)."""
    try:
        with os.scandir(folder) as it:
            names = sorted(e.name for e in it if not e.name.startswith("."))
    except FileNotFoundError:
        return []
    except OSError as exc:
        notes.append((folder, f"skipped: cannot list: {exc.strerror or exc}"))
        return []
    if len(names) > MAX_SKILLS_PER_PLACE:
        notes.append((folder, f"only the first {MAX_SKILLS_PER_PLACE} of {len(names)} "
                              "entries were read"))
        names = names[:MAX_SKILLS_PER_PLACE]
    found = []
    for name in names:
        sub = os.path.join(folder, name)
        if not os.path.isdir(sub):  # stray files beside the skill folders
            continue
        path = os.path.join(sub, SKILL_FILE)
        try:
            _, description, _, _ = read(path)
        except SkillFormatError as exc:
            found.append(SkillEntry(name, scope, path, problem=str(exc)))
            continue
        found.append(SkillEntry(name, scope, path, description))
    return found
