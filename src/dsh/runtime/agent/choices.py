"""A session's own choices: its route, model and effort, its policy mode, the approvals
it remembers.

A client changes them while the session lives (``session/model/set``,
``session/policy/set``, an approval answered "always for this session"), and they apply
from the session's next turn, or its next tool call, on. The connection's choice made at
``initialize`` stays the default beneath them, and the rows' defaults beneath that.

Every change is logged whole, as a ``session/settings`` event holding all of them
(``{provider?, model?, reasoningEffort?, policy?, remembered?: {tool: "allow" | "deny"}}``),
so a client replaying the log sees when they changed, and a session restored from the
store (after a restart, in another runtime) has them back: its last such event is its
settings (:func:`dsh.runtime.sessions.records.replay`).

Remembered decisions are per tool name, as ACP's "always" options are. A call that
reaches outside the workspace root is the exception: the tool memory never allows it (a
remembered "allow" for ``write_file`` does not open ``/etc``); its "always allow" grants
the directories it reaches to the session instead (:mod:`.toolrun`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from dsh.core.errors import InvalidArgumentError
from dsh.runtime.agent import events
from dsh.runtime.agent.session import Session
from dsh.runtime.tools.policy import MODES


class TurnRunner(Protocol):
    """What choosing needs of the turn runner (:class:`.turns.TurnRunner`)."""

    def choice(self, session: Session | None = None) -> dict[str, Any]:
        """What a turn of ``session`` asks for."""
        ...

    def route(self, name: str | None) -> Any:
        """The provider object of route ``name``."""
        ...

    def check(self, provider: str | None, model: str | None,
              reasoning_effort: str | None) -> tuple[str, str]:
        """The route and model these resolve to; InvalidArgumentError when refused."""
        ...

    def effort_problem(self, chosen: Any, reasoning_effort: str | None,
                       model: str | None = None) -> str | None:
        """Why ``chosen`` cannot send the effort to ``model``."""
        ...

    def plan(self, session: Session | None = None) -> Any:
        """What the next turn of ``session`` runs with."""
        ...

UNSET: Any = object()
"""An argument not given (``None`` means "back to the default")."""
DECISIONS = ("allow", "deny")


def settings(session: Session) -> dict[str, Any]:
    """The session's own settings (a copy)."""
    return dict(session.record.settings)


def update(session: Session, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Apply ``changes`` (a ``None`` value removes a key) and log the new settings when
    they differ; returns them."""
    before = session.record.settings
    after = {**before, **changes}
    after = {k: v for k, v in after.items() if v is not None and v != {}}
    if after != before:
        session.record.settings = after
        session.emit(events.SESSION_SETTINGS, after)
    return dict(after)


def choose_model(turns: TurnRunner, session: Session, *, provider: Any = UNSET,
                 model: Any = UNSET, reasoning_effort: Any = UNSET) -> dict[str, Any]:
    """Set the session's route, model and effort for its next turns, checked now like
    ``initialize`` checks them (InvalidArgumentError naming what is refused, and nothing
    changed); returns what its next turn will use (:func:`current`).

    A new route without a model takes the route's default model; without an effort, the
    effort chosen so far when the route can send it, else the route's default (the
    answer's ``effortDropped`` names the one left behind).
    """
    for name, value in (("provider", provider), ("model", model),
                        ("reasoningEffort", reasoning_effort)):
        if value is not UNSET and value is not None and (not isinstance(value, str)
                                                         or not value):
            raise InvalidArgumentError(f'"{name}" must be a non-empty string or null')
    was = turns.choice(session)
    route = was["provider"] if provider is UNSET else provider
    moved = provider is not UNSET and turns.route(route) is not turns.route(was["provider"])
    changes: dict[str, Any] = {}
    if provider is not UNSET:
        changes["provider"] = provider
    if model is not UNSET or moved:
        changes["model"] = None if model is UNSET else model
    effort = was["reasoning_effort"] if reasoning_effort is UNSET else reasoning_effort
    dropped = None
    if reasoning_effort is not UNSET:
        changes["reasoningEffort"] = reasoning_effort
    elif moved and effort is not None and turns.effort_problem(
            turns.route(route), effort, changes.get("model")) is not None:
        dropped, effort = effort, None
        changes["reasoningEffort"] = None
    turns.check(route, changes.get("model", was["model"]), effort)
    update(session, changes)
    answer = current(turns, session)
    if dropped is not None:
        answer["effortDropped"] = dropped
    return answer


def current(turns: TurnRunner, session: Session) -> dict[str, Any]:
    """What the session's next turn uses: ``{provider, model, reasoningEffort,
    contextWindow}`` (a null effort: the route's default)."""
    plan = turns.plan(session)
    return {"provider": plan.route, "model": plan.model,
            "reasoningEffort": plan.reasoning_effort,
            "contextWindow": plan.provider.context_window}


def check_policy(mode: Any) -> str | None:
    """``mode`` as a policy mode, ``None`` (the row's own) included; InvalidArgumentError
    naming the accepted ones otherwise."""
    if mode is None or mode in MODES:
        return mode
    raise InvalidArgumentError(f"unknown policy mode {mode!r} (accepted: "
                               f"{', '.join(MODES)}, or null for the profile's own)",
                               code="unknown-policy")


def recall(session: Session, tool: str) -> str | None:
    """The decision remembered for ``tool`` in this session, if any."""
    remembered = session.record.settings.get("remembered") or {}
    decision = remembered.get(tool)
    return decision if decision in DECISIONS else None


def remember(session: Session, tool: str, decision: str) -> None:
    """Remember ``decision`` for every later call of ``tool`` in this session."""
    remembered = dict(session.record.settings.get("remembered") or {})
    remembered[tool] = decision
    update(session, {"remembered": remembered})


def forget(session: Session) -> None:
    """Forget every remembered decision of the session."""
    update(session, {"remembered": None})


class Memory:
    """The remembered decisions of one session, as :func:`.toolrun.execute` uses them."""

    __slots__ = ("_session",)

    def __init__(self, session: Session) -> None:
        self._session = session

    def recall(self, tool: str) -> str | None:
        """The decision remembered for ``tool``, if any."""
        return recall(self._session, tool)

    def remember(self, tool: str, decision: str) -> None:
        """Remember ``decision`` for ``tool`` from now on."""
        remember(self._session, tool, decision)
