"""Session modes: ``default`` (tools run as the policy says) and ``plan`` (read-only).

The ``tools-plan`` row publishes one :class:`SessionModes` as service ``modes``. Protocol
servers set a session's mode through it (SDK ``session/mode/set``, ACP
``session/set_mode``); the plan-mode guardrail and context section read it on every call;
``exit_plan_mode`` moves a session back to ``default`` once the plan is approved.

Modes live in the runtime process: a session this runtime has not seen starts in the
row's start mode (``start_in_plan_mode``), a restarted runtime included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.core.errors import InvalidArgumentError

DEFAULT = "default"
PLAN = "plan"

MODES: Mapping[str, tuple[str, str]] = {
    DEFAULT: ("Default", "Tools run as the profile's policy allows."),
    PLAN: ("Plan", "Read and plan only: tools that change files are refused until the "
                   "plan is approved (exit_plan_mode)."),
}
"""Mode id → (name, description), in the order clients show them."""


class UnknownModeError(InvalidArgumentError):
    """A mode id that is not one of :data:`MODES`; the message lists the known ones."""


class SessionModes:
    """The current mode of each session; sessions not set yet are in the start mode."""

    def __init__(self, start: str = DEFAULT) -> None:
        self.start = check(start)
        self._modes: dict[str, str] = {}
        self._planned: set[str] = set()

    def get(self, session_id: str) -> str:
        """The session's mode now."""
        return self._modes.get(session_id, self.start)

    def set(self, session_id: str, mode: str) -> str:
        """Put the session in ``mode`` (checked); returns it."""
        self._modes[session_id] = check(mode)
        if mode == PLAN:
            self._planned.add(session_id)
        return mode

    def was_planning(self, session_id: str) -> bool:
        """Whether the session was ever in plan mode here (the model may still think so)."""
        return session_id in self._planned or self.get(session_id) == PLAN

    def state(self, session_id: str) -> dict[str, Any]:
        """ACP ``SessionModeState``: ``{currentModeId, availableModes}``."""
        return {"currentModeId": self.get(session_id), "availableModes": available()}


def check(mode: Any) -> str:
    """``mode`` if it is a known mode id; otherwise :class:`UnknownModeError`."""
    if not isinstance(mode, str) or mode not in MODES:
        raise UnknownModeError(f"unknown mode {mode!r} (modes: {', '.join(MODES)})")
    return mode


def available() -> list[dict[str, str]]:
    """ACP ``SessionMode`` objects: ``{id, name, description}`` of every mode."""
    return [{"id": mode, "name": name, "description": text}
            for mode, (name, text) in MODES.items()]
