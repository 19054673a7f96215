"""A test plugin registering skills with ``reg.skill``, loaded by a patch row by module path."""

from __future__ import annotations

from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar


class SkillPlugin(Plugin):
    """Registers ``checklist`` and ``override-me`` (which a project skill file replaces)."""

    manifest = Manifest(id="skill-plugin", version="1",
                        capabilities=frozenset({Capability.SKILL}))

    def apply(self, reg: Registrar) -> None:
        """Register the two skills."""
        reg.skill("checklist", "A checklist from a plugin.", "PLUGIN BODY")
        reg.skill("override-me", "Hidden by a file skill.", "NEVER SHOWN")
