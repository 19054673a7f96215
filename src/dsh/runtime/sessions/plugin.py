"""The ``sessions-sqlite`` plugin row: publishes the ``sessions`` service.

The store opens ``$DSH_HOME/sessions.db`` at ``start`` (never in ``apply``: loading a
profile for ``--dump-config`` must not create files) and reconciles what crashed runtimes
left behind before any agent uses it. ``agent-core`` injects the service, so the store
starts before the agent and is disposed after it: the agent's final saves still land.

While the row runs, a background task heartbeats this runtime's session leases every
``lease_heartbeat_s`` (default 5 s); a lease not heartbeaten for ``lease_expiry_s``
(default 30 s) may be taken over by any runtime on any host, and a holder on the same
host is taken over at once when its process is gone. Each heartbeat is two statements on
the lease table's holder index, bounded by ``busy_timeout_ms`` like any write (two more
when sessions released here are watched for a move). The agent gives a session's lease
back ``idle_release_s`` (default 2 s) after the session's work ends.

The lease keys are one schema, :data:`LEASE_PROPERTIES`, that every sessions row
(``sessions-sqlite``, ``sessions-postgres``) shares, read by :func:`lease_timing`.

``asyncio`` is imported where the row runs, not with the module: ``dsh sessions list``
loads this module to open the store, and asyncio alone would cost it a tenth of its
300 ms budget.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh._version import __version__
from dsh.core.errors import ConfigError
from dsh.runtime.agent.store import DEFAULT_IDLE_RELEASE_S
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, RuntimeContext
from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

if TYPE_CHECKING:
    import asyncio

DB_NAME = "sessions.db"
HEARTBEAT_S = 5.0
EXPIRY_S = 30.0

LEASE_PROPERTIES: dict[str, Any] = {
    "lease_heartbeat_s": {
        "type": "number", "minimum": 0.05, "default": HEARTBEAT_S,
        "description": "How often this runtime refreshes its session leases.",
    },
    "lease_expiry_s": {
        "type": "number", "minimum": 0.1, "default": EXPIRY_S,
        "description": "A lease not refreshed for this long may be taken over from any "
                       "runtime on any host (at least twice lease_heartbeat_s).",
    },
    "idle_release_s": {
        "type": "number", "minimum": 0, "default": DEFAULT_IDLE_RELEASE_S,
        "description": "How long a session whose work ended (no turn, queued prompt, "
                       "approval, job or sub-agent) keeps its lease before this runtime "
                       "gives it back, so another runtime (a terminal, another host) can "
                       "continue it; the next prompt here takes it back.",
    },
}
"""The lease keys of every sessions row's config schema (one definition for both)."""

logger = logging.getLogger("dsh.sessions")


class SessionsSqlite(Plugin):
    """Sessions, event logs and workspaces in SQLite; publishes service ``sessions``."""

    manifest = Manifest(
        id="sessions-sqlite",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="Persists sessions and their event logs in $DSH_HOME/sessions.db; "
                    "leases each session to one runtime; reference-counts workspaces. "
                    "Publishes service 'sessions'.",
        config_schema={
            "type": "object",
            "properties": {
                "busy_timeout_ms": {
                    "type": "integer", "minimum": 0, "default": 5000,
                    "description": "How long a write waits for another runtime's lock.",
                },
                **LEASE_PROPERTIES,
            },
            "additionalProperties": False,
        },
        provides=("sessions",),
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self.store: SqliteSessionStore | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    async def start(self, rt: RuntimeContext) -> None:
        """Open the database, reconcile leftovers of dead runtimes, publish the store,
        start heartbeating its leases."""
        heartbeat_s, expiry_s = lease_timing(self.config)
        self.store = SqliteSessionStore(Path(rt.home) / DB_NAME, profile=rt.profile,
                                        busy_timeout_ms=int(self.config.get(
                                            "busy_timeout_ms", 5000)),
                                        lease_expiry_ms=int(expiry_s * 1000))
        self.store.idle_release_s = idle_release(self.config)
        try:
            self.store.reconcile()
        except BaseException:
            self.store.close()
            self.store = None
            raise
        rt.publish("sessions", self.store)
        import asyncio

        self._heartbeat = asyncio.get_running_loop().create_task(
            _beat(self.store, heartbeat_s), name="dsh-session-leases")

    async def update(self, config: Mapping[str, Any]) -> bool:
        """Take new timings in place: replacing the store would pull it (and the leases
        it holds) from under the agent holding it."""
        heartbeat_s, expiry_s = lease_timing(config)
        self.config = config
        if self.store is not None:
            self.store.set_busy_timeout(int(config.get("busy_timeout_ms", 5000)))
            self.store.lease_expiry_ms = int(expiry_s * 1000)
            self.store.idle_release_s = idle_release(config)
            if self._heartbeat is not None:
                self._heartbeat.cancel()
            import asyncio

            self._heartbeat = asyncio.get_running_loop().create_task(
                _beat(self.store, heartbeat_s), name="dsh-session-leases")
        return True

    @classmethod
    def open_store(cls, config: Mapping[str, Any], *, home: str,
                   profile: str) -> SqliteSessionStore:
        """The home's store for a command outside a runtime (``dsh sessions
        export/import``); the caller closes it."""
        return SqliteSessionStore(Path(home) / DB_NAME, profile=profile,
                                  busy_timeout_ms=int(config.get("busy_timeout_ms", 5000)))

    async def dispose(self) -> None:
        """Stop heartbeating; mark this runtime's sessions closed, release its leases and
        close the database."""
        if self._heartbeat is not None:
            import asyncio

            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if self.store is not None:
            self.store.close()
            self.store = None


def lease_timing(config: Mapping[str, Any]) -> tuple[float, float]:
    """``(heartbeat, expiry)`` in seconds (every sessions row's keys); an expiry under two
    heartbeats is refused, since one late heartbeat would let another runtime take a live
    session."""
    heartbeat = float(config.get("lease_heartbeat_s", HEARTBEAT_S))
    expiry = float(config.get("lease_expiry_s", EXPIRY_S))
    if expiry < 2 * heartbeat:
        raise ConfigError(f"config.lease_expiry_s ({expiry:g}) must be at least twice "
                          f"config.lease_heartbeat_s ({heartbeat:g})")
    return heartbeat, expiry


def idle_release(config: Mapping[str, Any]) -> float:
    """Seconds a session with no work keeps its lease (``idle_release_s``)."""
    return float(config.get("idle_release_s", DEFAULT_IDLE_RELEASE_S))


async def _beat(store: SqliteSessionStore, interval: float) -> None:
    """Refresh the store's leases every ``interval`` seconds until cancelled; a failed
    beat (a locked or full database) is logged and retried at the next one."""
    import asyncio

    while True:
        await asyncio.sleep(interval)
        try:
            lost = store.heartbeat()
        except Exception as exc:
            logger.warning("could not refresh session leases: %s", exc)
            continue
        for session_id in lost:
            logger.warning("session %s: another runtime took over its lease (this one "
                           "stalled past the %d ms expiry)", session_id,
                           store.lease_expiry_ms)
