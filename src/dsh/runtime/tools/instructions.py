"""The ``context-instructions`` row: ``AGENTS.md`` files shown to the model, with their paths.

Its ``instructions`` context section is asked at the start of every turn, so a session
that moved to another folder, or a file edited since, is picked up on the next turn; the
agent resends the section only when its text changed. Which files apply and how they are
capped is :mod:`dsh.runtime.tools.agentdocs.instructions` (shared with ``dsh doctor``). Reading
happens in a worker thread, so a slow filesystem costs the turn's context budget, never the
event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

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
from dsh.runtime.tools.agentdocs import instructions


class InstructionsContext(Plugin):
    """Plugin row ``context-instructions``: the ``instructions`` context section."""

    manifest = Manifest(
        id="context-instructions",
        version=__version__,
        capabilities=frozenset({Capability.PROMPT}),
        description="Shows the AGENTS.md files of the home and of the working directory up "
                    "to the project root to the model, each with its path.",
        config_schema={
            "type": "object",
            "properties": {
                "max_file_bytes": {"type": "integer", "minimum": 1,
                                   "default": instructions.MAX_FILE_BYTES,
                                   "description": "Most bytes shown of one AGENTS.md."},
                "max_total_bytes": {"type": "integer", "minimum": 1,
                                    "default": instructions.MAX_TOTAL_BYTES,
                                    "description": "Most bytes shown of all of them."},
            },
            "additionalProperties": False,
        },
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._home: str | None = None

    def apply(self, reg: Registrar) -> None:
        """Register the section."""
        reg.context("instructions", self.section)

    async def start(self, rt: RuntimeContext) -> None:
        """Remember the home whose ``AGENTS.md`` applies."""
        self._home = rt.home

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New caps apply from the next turn."""
        self.config = config
        return True

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``agents-md.<path>``: each ``AGENTS.md`` a session in the doctor's working
        directory would be shown (warn when cut or skipped), or one ``agents-md``."""
        from dsh.core.errors import DshError
        from dsh.runtime.kernel.schema import validate

        try:
            config = validate(cls.manifest.config_schema or {}, config, row_id=row_id)
        except DshError as exc:
            return [Diagnosis("agents-md", "fail", str(exc))]
        found = []
        for item in instructions.load(checkup.home, checkup.cwd,
                                      max_file_bytes=config["max_file_bytes"],
                                      max_total_bytes=config["max_total_bytes"]):
            check = f"agents-md.{checkup.shown(item.path)}"
            if item.problem is not None:
                found.append(Diagnosis(check, "warn", f"skipped: {item.problem}"))
            elif item.truncated:
                found.append(Diagnosis(check, "warn", f"{item.scope}: {item.shown} of "
                                       f"{item.size} bytes shown ({item.cap} cap)"))
            else:
                found.append(Diagnosis(check, "ok", f"{item.scope}: {item.size} bytes"))
        return found or [Diagnosis("agents-md", "ok", "none in $DSH_HOME nor from $CWD up "
                                   "to the project root")]

    async def section(self, request: ContextRequest) -> str | None:
        """This turn's text: every applicable ``AGENTS.md`` for the session's directory."""
        if self._home is None:
            return None
        found = await asyncio.to_thread(
            instructions.load, self._home, request.cwd,
            max_file_bytes=self.config["max_file_bytes"],
            max_total_bytes=self.config["max_total_bytes"])
        return instructions.render(found)
