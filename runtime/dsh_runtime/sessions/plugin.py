"""The ``sessions-sqlite`` plugin row: publishes the ``sessions`` service.

The store opens ``$DSH_HOME/sessions.db`` at ``start`` (never in ``apply``: loading a
profile for ``--dump-config`` must not create files) and reconciles what crashed runtimes
left behind before any agent uses it. ``agent-core`` injects the service, so the store
starts before the agent and is disposed after it: the agent's final saves still land.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsh._version import __version__

from dsh_runtime.plugin import Capability, Manifest, Plugin, RuntimeContext
from dsh_runtime.sessions.sqlite_store import SqliteSessionStore

DB_NAME = "sessions.db"


class SessionsSqlite(Plugin):
    """Sessions, event logs and workspaces in SQLite; publishes service ``sessions``."""

    manifest = Manifest(
        id="sessions-sqlite",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="Persists sessions and their event logs in $DSH_HOME/sessions.db; "
                    "reference-counts workspaces. Publishes service 'sessions'.",
        config_schema={
            "type": "object",
            "properties": {
                "busy_timeout_ms": {
                    "type": "integer", "minimum": 0, "default": 5000,
                    "description": "How long a write waits for another runtime's lock.",
                },
            },
            "additionalProperties": False,
        },
        provides=("sessions",),
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self.store: SqliteSessionStore | None = None

    async def start(self, rt: RuntimeContext) -> None:
        """Open the database, reconcile leftovers of dead runtimes, publish the store."""
        self.store = SqliteSessionStore(Path(rt.home) / DB_NAME, profile=rt.profile,
                                        busy_timeout_ms=int(self.config.get(
                                            "busy_timeout_ms", 5000)))
        try:
            self.store.reconcile()
        except BaseException:
            self.store.close()
            self.store = None
            raise
        rt.publish("sessions", self.store)

    async def update(self, config: Mapping[str, Any]) -> bool:
        """Take a new busy timeout in place: replacing the store would pull it from under
        the agent holding it."""
        self.config = config
        if self.store is not None:
            self.store.set_busy_timeout(int(config.get("busy_timeout_ms", 5000)))
        return True

    async def dispose(self) -> None:
        """Mark this runtime's sessions closed and close the database."""
        if self.store is not None:
            self.store.close()
            self.store = None
