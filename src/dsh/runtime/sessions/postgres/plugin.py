"""The ``sessions-postgres`` plugin row: the ``sessions`` service on a shared database.

Swapped in for ``sessions-sqlite`` by one patch (``examples/postgres/patch.yml``: a
``replace`` operation keeps the row's id, so every row that injects ``sessions`` keeps
working). Start connects (bounded by ``connect_timeout_s``, in a worker thread), creates
or migrates the schema, writes spool files that dead runtimes of this home left, marks
sessions whose runtime is gone ``interrupted``, and publishes the store; an unreachable
database is exit 1, a DSN that cannot log in exit 2, both with the password scrubbed.

While the row runs, one background task heartbeats this runtime's leases every
``lease_heartbeat_s`` and, when the connection is lost, reconnects (backing off up to the
heartbeat interval) and writes the spool. The driver (``psycopg``) is imported only at
start: ``--dump-config`` and ``dsh doctor`` load this module without it, and the frozen
runtime, which does not carry it, refuses the row with one line naming the python carrier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsh._version import __version__
from dsh.core.distribution import POSTGRES_EXTRA, install_hint
from dsh.core.errors import ConfigError, DshError, PluginError, StoreUnavailableError
from dsh.runtime.kernel.plugin import (
    Capability,
    Checkup,
    Diagnosis,
    Manifest,
    Plugin,
    RuntimeContext,
)
from dsh.runtime.sessions.plugin import (
    EXPIRY_S,
    LEASE_PROPERTIES,
    idle_release,
    lease_timing,
)

logger = logging.getLogger("dsh.sessions")

DEFAULT_SCHEMA = "dsh"


class SessionsPostgres(Plugin):
    """Sessions, event logs, leases and goals in PostgreSQL; publishes ``sessions``."""

    manifest = Manifest(
        id="sessions-postgres",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="Persists sessions, their event logs, leases and goals in a PostgreSQL "
                    "database shared by every host; workspace counts stay in this home. "
                    "Publishes service 'sessions'.",
        config_schema={
            "type": "object",
            "properties": {
                "dsn": {
                    "type": ["string", "null"],
                    "description": "The connection string (a secret: give it as "
                                   "!env DSH_POSTGRES_DSN; unset, the row says so).",
                },
                "schema": {
                    "type": "string", "default": DEFAULT_SCHEMA,
                    "description": "The PostgreSQL schema holding dsh's tables.",
                },
                "connect_timeout_s": {
                    "type": "number", "minimum": 1, "maximum": 300, "default": 5,
                    "description": "How long connecting may take (also bounds a stalled "
                                   "network write: TCP user timeout twice this).",
                },
                "synchronous_commit": {
                    "type": "string", "default": "off",
                    "enum": ["off", "local", "remote_write", "on", "remote_apply"],
                    "description": "PostgreSQL's synchronous_commit for this store's "
                                   "writes: 'off' (default) risks the last commits on a "
                                   "server crash, as sessions.db does on a power cut; 'on' "
                                   "waits for the disk at every event.",
                },
                "statement_timeout_ms": {
                    "type": "integer", "minimum": 100, "default": 10000,
                    "description": "The server-side bound of each statement.",
                },
                **LEASE_PROPERTIES,
            },
            "additionalProperties": False,
        },
        provides=("sessions",),
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self.store: Any = None
        self._keeper: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    async def start(self, rt: RuntimeContext) -> None:
        """Connect, migrate, replay orphaned spools, reconcile, publish, keep alive."""
        heartbeat_s, expiry_s = lease_timing(self.config)
        link = _link(self.config)
        conn = await asyncio.to_thread(link.connect)
        link.adopt(conn)
        store = _open(link, self.config, home=rt.home, profile=rt.profile,
                      lease_expiry_ms=int(expiry_s * 1000))
        store.idle_release_s = idle_release(self.config)
        try:
            store.claim_orphans()
            store.reconcile()
        except BaseException:
            store.close()
            raise
        self.store = store
        rt.publish("sessions", store)
        self._wake = asyncio.Event()
        link.on_down = self._wake.set
        self._keeper = asyncio.get_running_loop().create_task(
            _keep(store, heartbeat_s, self._wake), name="dsh-session-leases")

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New lease timings in place; another database or schema replaces the row."""
        if any(config.get(k) != self.config.get(k) for k in (
                "dsn", "schema", "connect_timeout_s", "statement_timeout_ms",
                "synchronous_commit")):
            return False
        heartbeat_s, expiry_s = lease_timing(config)
        self.config = config
        if self.store is not None and self._wake is not None:
            self.store.lease_expiry_ms = int(expiry_s * 1000)
            self.store.idle_release_s = idle_release(config)
            if self._keeper is not None:
                self._keeper.cancel()
            self._keeper = asyncio.get_running_loop().create_task(
                _keep(self.store, heartbeat_s, self._wake), name="dsh-session-leases")
        return True

    async def dispose(self) -> None:
        """Stop the background task; close this runtime's sessions, release its leases."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        if self.store is not None:
            self.store.close()
            self.store = None

    @classmethod
    def open_store(cls, config: Mapping[str, Any], *, home: str, profile: str) -> Any:
        """A store on the row's database for a command outside a runtime (``dsh sessions
        export/import``); the caller closes it."""
        link = _link(config)
        link.adopt(link.connect())
        return _open(link, config, home=home, profile=profile,
                     lease_expiry_ms=int(float(config.get("lease_expiry_s", EXPIRY_S)) * 1000))

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``--live``: reachable (server version), schema version against this dsh's, lease
        table readable (leases held, how many stale): each a check ``plugin.<row id>.*``,
        nothing written."""
        if not checkup.live:
            return []
        from dsh.runtime.kernel.schema import validate
        from dsh.runtime.sessions.postgres import schema

        check = f"plugin.{row_id}"
        try:
            config = validate(cls.manifest.config_schema or {}, config, row_id=row_id)
        except DshError as exc:
            return [Diagnosis(f"{check}.config", "fail", str(exc))]
        try:
            link = _link(config)
            conn = link.connect()
        except DshError as exc:
            return [Diagnosis(f"{check}.reachable", "fail", str(exc))]
        name = str(config.get("schema", DEFAULT_SCHEMA))
        try:
            version = conn.execute("SHOW server_version").fetchone()[0]
            checks = [Diagnosis(f"{check}.reachable", "ok",
                                f"{link.where} answers (PostgreSQL {version.split()[0]})")]
            try:
                found = schema.check(conn, name, link.where)
            except PluginError as exc:
                checks.append(Diagnosis(f"{check}.schema", "fail", str(exc)))
                return checks
            if found == 0:
                checks.append(Diagnosis(f"{check}.schema", "warn", f"schema {name!r} not "
                                        "created yet (the first runtime creates it)"))
                return checks
            state = "current" if found == schema.VERSION else "migrated at the next start"
            checks.append(Diagnosis(f"{check}.schema", "ok", f"schema {name!r} at version {found} "
                                    f"(this dsh: {schema.VERSION}, {state})"))
            expiry_ms = int(float(config.get("lease_expiry_s", EXPIRY_S)) * 1000)
            held, old = conn.execute(
                f"SELECT count(*), count(*) FILTER (WHERE heartbeat_at < "
                f"(extract(epoch FROM clock_timestamp()) * 1000)::bigint - %s) FROM "
                f"{schema.quoted(name)}.session_leases", (expiry_ms,)).fetchone()
            checks.append(Diagnosis(f"{check}.leases", "ok", f"lease table readable: {held} held, "
                                    f"{old} expired (taken over at next use)"))
            return checks
        except Exception as exc:
            return [Diagnosis(f"{check}.reachable", "fail", str(link.error(exc)))]
        finally:
            conn.close()


CARRIER_HINT = ("sessions-postgres needs the python carrier (`dsh` from `"
                f"{install_hint(POSTGRES_EXTRA)}`; SDK: ClientConfig(carrier='python')): "
                "the frozen dsh-runtime does not carry the PostgreSQL driver")


def _link(config: Mapping[str, Any]) -> Any:
    """The row's connection settings; a missing DSN is ConfigError (exit 2), and the
    frozen runtime refuses here, before any of them is read. The freeze leaves out the
    driver and this package's other modules (never run there), so the refusal comes
    before they are imported."""
    if getattr(sys, "frozen", False):
        raise ConfigError(CARRIER_HINT)
    from dsh.runtime.sessions.postgres.link import Link, driver

    driver()
    dsn = config.get("dsn")
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigError("config.dsn: no PostgreSQL DSN (the shipped patch reads it from "
                          "DSH_POSTGRES_DSN: set it in the launch environment or the home's "
                          ".env)")
    return Link(dsn, connect_timeout_s=float(config.get("connect_timeout_s", 5)),
                statement_timeout_ms=int(config.get("statement_timeout_ms", 10000)),
                synchronous_commit=str(config.get("synchronous_commit", "off")))


def _open(link: Any, config: Mapping[str, Any], *, home: str, profile: str,
          lease_expiry_ms: int) -> Any:
    from dsh.runtime.sessions.postgres.store import PostgresSessionStore

    return PostgresSessionStore(link, schema_name=str(config.get("schema", DEFAULT_SCHEMA)),
                                home=Path(home), profile=profile,
                                lease_expiry_ms=lease_expiry_ms)


async def _keep(store: Any, interval: float, wake: asyncio.Event) -> None:
    """Heartbeat the leases every ``interval`` seconds; when the connection is lost,
    reconnect (in a worker thread, backing off from 0.25 s to ``interval``) and write
    the spool. Failures are logged, once per outage, and retried."""
    link = store.link
    backoff = 0.25
    told = False
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), interval if link.up else backoff)
        wake.clear()
        if not link.up:
            try:
                conn = await asyncio.to_thread(link.connect)
            except DshError as exc:
                if not told:
                    logger.warning("PostgreSQL is still away, retrying: %s", exc)
                    told = True
                backoff = min(interval, backoff * 2)
                continue
            backoff, told = 0.25, False
            try:
                store.recover(conn)
            except StoreUnavailableError:
                continue
            except Exception as exc:
                logger.warning("writing the spool after reconnecting failed: %s", exc)
            if link.up:
                logger.info("reconnected to PostgreSQL at %s", link.where)
        try:
            lost = store.heartbeat()
        except StoreUnavailableError:
            continue
        except Exception as exc:
            logger.warning("could not refresh session leases: %s", exc)
            continue
        for session_id in lost:
            logger.warning("session %s: another runtime took over its lease (this one "
                           "stalled past the %d ms expiry)", session_id,
                           store.lease_expiry_ms)
