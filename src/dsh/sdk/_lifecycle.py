"""Where a client is in its life, and how its errors say so.

Two scales. :class:`ClientState` is the client object's lifecycle (``new`` → ``starting``
→ ``ready`` → ``closing`` → ``closed``, or ``failed`` when the runtime died or broke the
protocol), which is what turns misuse into a precise error ("client is closed") instead of
an attribute error. :class:`Stage` is the startup readiness ladder, ``configured`` →
``spawned`` → ``handshake`` → ``tools_ready``: every startup error names the stage that
failed, with the profile and carrier, because "the runtime did not start" is useless
without knowing how far it got and which runtime it was.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.core.errors import ClientClosedError, ClientError, DshError, render_stderr_tail

if TYPE_CHECKING:
    from dsh.sdk._locate import RuntimeInfo


class ClientState(enum.Enum):
    """The client object's lifecycle."""

    NEW = "new"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    CLOSING = "closing"
    CLOSED = "closed"


class Stage(enum.Enum):
    """The startup readiness ladder, in order."""

    CONFIGURED = "configured"  # runtime found, paths valid
    SPAWNED = "spawned"  # the process runs
    HANDSHAKE = "handshake"  # initialize answered
    TOOLS_READY = "tools_ready"  # the tool list received

    @property
    def next(self) -> Stage | None:
        """The stage after this one; ``None`` at the top."""
        ladder = list(Stage)
        index = ladder.index(self)
        return ladder[index + 1] if index + 1 < len(ladder) else None


_NOT_USABLE = {
    ClientState.NEW: "client is not started (call start() or use it as a context manager)",
    ClientState.STARTING: "client is still starting",
    ClientState.READY: "client is already started",
    ClientState.CLOSING: "client is closing",
    ClientState.CLOSED: "client is closed",
}


def not_usable(state: ClientState, what: str) -> ClientClosedError:
    """The error for ``what`` (a method) asked of a client in ``state``."""
    return ClientClosedError(f"{what}: {_NOT_USABLE[state]}")


@dataclass(frozen=True)
class Readiness:
    """What :meth:`AsyncDshClient.readiness` reports.

    ``stage`` is the highest stage reached (``None`` before the runtime was found).
    ``reload_required`` is the runtime's own answer: a layer file of a ``startup`` profile
    changed after it started, so the running configuration no longer matches the files
    and a restart applies them; ``None`` when the runtime could not be asked.
    """

    state: ClientState
    stage: Stage | None
    reload_required: bool | None


class ErrorContext:
    """The facts every error of one client names: profile, carrier, startup progress.

    Shared by the client (which advances it) and the router (which builds the errors that
    fail every waiter when the runtime goes away), and referencing neither, so an
    abandoned client can still be garbage collected.
    """

    def __init__(self, profile: str, carrier: str) -> None:
        self.profile = profile
        self.carrier = carrier
        self.runtime: RuntimeInfo | None = None
        self.reached: Stage | None = None
        self.started = False

    def where(self) -> str:
        """``profile 'sdk', carrier python (/usr/bin/python3 -m dsh)``."""
        carrier = self.carrier if self.runtime is None else self.runtime.describe()
        return f"profile {self.profile!r}, carrier {carrier}"

    def failing_stage(self) -> Stage:
        """The stage being attempted: the one a startup failure is reported against."""
        if self.reached is None:
            return Stage.CONFIGURED
        return self.reached.next or Stage.TOOLS_READY

    def prefix(self) -> str:
        """How an error of this client begins: during startup, the failing stage."""
        if self.started:
            return f"dsh runtime ({self.where()})"
        return f"dsh runtime startup failed at stage {self.failing_stage().value!r} " \
               f"({self.where()})"

    def annotate(self, exc: DshError, stderr_tail: Sequence[str] = ()) -> DshError:
        """Prefix ``exc`` with :meth:`prefix` and attach the stderr tail; returns ``exc``.

        Errors of the shared tree (a ``ProtocolError`` from the codec, a ``ConfigError``
        from the home) are annotated in place so their type, the contract, is unchanged.
        """
        exc.message = f"{self.prefix()}: {exc.message}"
        if isinstance(exc, ClientError):
            exc.stderr_tail = exc.stderr_tail or tuple(stderr_tail)
        else:
            exc.message += render_stderr_tail(stderr_tail)
        exc.args = (exc.message,)
        return exc
