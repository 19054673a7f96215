"""The ``agent-core`` row's settings, read by every part of the agent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from dsh.runtime.tools import confine


class AgentConfig(NamedTuple):
    """The ``agent-core`` row's config (defaults here; the manifest's schema reuses them)."""

    default_route: str = "deepseek-official"
    max_steps: int = 50
    max_queued: int = 32
    system_prompt: str = "You are a helpful software engineer assistant."
    hook_budget_s: float = 10.0
    compact_at: float = 0.8
    compact_keep: float = 0.25
    protected_paths: tuple[str, ...] = ()
    max_idle_sessions: int = 32

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any], *, row_id: str = "agent") -> AgentConfig:
        """Build from a validated row config (unknown keys were rejected by the schema);
        ``protected_paths`` are checked and expanded (ConfigError naming a bad one)."""
        values = {k: config[k] for k in cls._fields if k in config}
        values["protected_paths"] = confine.config_paths(
            config, "protected_paths", f"row '{row_id}' config")
        return cls(**values)
