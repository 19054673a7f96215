"""The store's connection to PostgreSQL: opening it, losing it, and what errors say.

One connection per runtime (autocommit; a transaction is opened where statements must go
together), used from the runtime's loop thread like the SQLite store's. :meth:`Link.run`
is the only way statements reach it: a driver error that leaves the connection closed or
broken (the server stopped, the network went away) marks the link *down* and becomes
:class:`~dsh.core.errors.StoreUnavailableError`; while down every call fails that way at once,
without touching the network, until :meth:`Link.adopt` hands it a new connection (the
plugin reconnects in a worker thread, so a slow connect never stalls the loop).

Errors leave as dsh errors with the DSN's password scrubbed (:mod:`.dsn`) and without the
driver's exception chained, since its text or a traceback could quote the DSN: a refused
password or unknown database is :class:`~dsh.core.errors.ConfigError` (exit 2, bad setup), an
unreachable server :class:`~dsh.core.errors.PluginError` (exit 1).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from dsh.core.distribution import POSTGRES_EXTRA, install_hint
from dsh.core.errors import ConfigError, DshError, PluginError, StoreUnavailableError
from dsh.runtime.sessions.postgres import dsn as dsn_mod

logger = logging.getLogger("dsh.sessions")
T = TypeVar("T")

SYNCHRONOUS_COMMIT = ("off", "local", "remote_write", "on", "remote_apply")
"""PostgreSQL's ``synchronous_commit`` levels. The store's default is ``off``: a commit
returns once the server has it, before its WAL reaches the disk, so a crash of the *server*
(not of dsh) may lose the last fraction of a second of events, and never corrupts the
database: the promise ``sessions.db`` makes with ``synchronous=NORMAL``. Each event is a
commit, and waiting for the server's disk on every one (0.3 to 3 ms on the benchmark
machine, more on network storage) slows streaming; ``on`` is there for who wants it."""


def driver() -> Any:
    """The ``psycopg`` module; a clear error when it is not installed."""
    try:
        import psycopg
    except ImportError:
        raise ConfigError("sessions-postgres needs the psycopg driver: "
                          f"{install_hint(POSTGRES_EXTRA)}") from None
    return psycopg


def _first_lines(text: str) -> str:
    return "; ".join(line.strip() for line in text.strip().splitlines() if line.strip())


class Link:
    """A connection to the database at ``dsn`` that knows when it is down.

    ``on_down`` is called (once per outage) when a statement finds the connection lost,
    so the owner can start reconnecting.
    """

    def __init__(self, dsn: str, *, connect_timeout_s: float = 5.0,
                 statement_timeout_ms: int = 10_000, synchronous_commit: str = "off",
                 on_down: Callable[[], None] | None = None) -> None:
        self.dsn = dsn
        self.where = dsn_mod.describe(dsn)
        self.connect_timeout_s = connect_timeout_s
        self.statement_timeout_ms = statement_timeout_ms
        if synchronous_commit not in SYNCHRONOUS_COMMIT:
            raise ConfigError(f"config.synchronous_commit: {synchronous_commit!r} is not one "
                              f"of {', '.join(SYNCHRONOUS_COMMIT)}")
        self.synchronous_commit = synchronous_commit
        self.on_down = on_down
        self._conn: Any = None
        self.down_since: float | None = None
        self.down_reason = "not connected yet"

    # -- connecting -----------------------------------------------------------------------

    def connect(self) -> Any:
        """Open a new connection (blocking, bounded by ``connect_timeout_s``); does not
        adopt it. Safe to call from a worker thread."""
        psycopg = driver()
        settings = dsn_mod.fields(self.dsn)
        extra: dict[str, Any] = {}
        defaults = {"connect_timeout": max(2, round(self.connect_timeout_s)),
                    "application_name": "dsh", "keepalives": 1, "keepalives_idle": 10,
                    "keepalives_interval": 5, "keepalives_count": 3,
                    "tcp_user_timeout": int(self.connect_timeout_s * 2000)}
        for key, value in defaults.items():
            if key not in settings:
                extra[key] = value
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, **extra)
        except psycopg.Error as exc:
            raise self.connect_error(exc) from None
        try:
            conn.execute(f"SET statement_timeout = {int(self.statement_timeout_ms)}")
            conn.execute(f"SET synchronous_commit = {self.synchronous_commit}")
        except psycopg.Error as exc:
            conn.close()
            raise self.connect_error(exc) from None
        return conn

    def connect_error(self, exc: Exception) -> DshError:
        """A failed connect as a dsh error: bad setup (exit 2) or unreachable (exit 1)."""
        text = dsn_mod.redact(_first_lines(str(exc)), self.dsn)
        lowered = text.lower()
        user = dsn_mod.fields(self.dsn).get("user", "")
        who = f"user {user!r}" if user else "the user"
        if "no password supplied" in lowered:
            return ConfigError(
                f"config.dsn: the PostgreSQL server asks {who} for a password, and the DSN "
                f"({self.where}) gives none: add it to the DSN (DSH_POSTGRES_DSN) or to a "
                "password file (~/.pgpass)")
        if "password authentication failed" in lowered or (
                "does not exist" in lowered and ("role" in lowered or "database" in lowered)):
            return ConfigError(f"config.dsn: PostgreSQL at {self.where} refused: {text}")
        if not dsn_mod.fields(self.dsn) or "invalid" in lowered or "missing \"=\"" in lowered:
            return ConfigError(f"config.dsn: not a usable PostgreSQL DSN ({text})")
        return PluginError(f"cannot reach PostgreSQL at {self.where}: {text}",
                           hint="is the database running and reachable from this host?")

    def adopt(self, conn: Any) -> None:
        """Use ``conn`` from now on (the link is up)."""
        old, self._conn = self._conn, conn
        if old is not None and old is not conn:
            _close_quietly(old)
        self.down_since = None

    @property
    def up(self) -> bool:
        """Whether a connection is in use (it may still turn out lost at the next call)."""
        return self._conn is not None

    # -- using ----------------------------------------------------------------------------

    def run(self, fn: Callable[[Any], T]) -> T:
        """``fn(connection)``; a lost connection is StoreUnavailableError (and the link
        goes down), other driver errors are raised as they are for the caller to map."""
        conn = self._conn
        if conn is None:
            raise self.unavailable()
        psycopg = driver()
        try:
            return fn(conn)
        except psycopg.Error as exc:
            if conn.closed or conn.broken or isinstance(exc, psycopg.InterfaceError):
                self.lost(exc)
                raise self.unavailable() from None
            raise

    def lost(self, exc: BaseException) -> None:
        """Mark the link down after ``exc`` (a lost connection)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn)
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.down_reason = dsn_mod.redact(_first_lines(str(exc)), self.dsn) or \
                type(exc).__name__
            logger.warning("lost the connection to PostgreSQL at %s: %s", self.where,
                           self.down_reason)
            if self.on_down is not None:
                self.on_down()

    def unavailable(self, *, spooled: bool = False) -> StoreUnavailableError:
        """The error for a call made while the link is down."""
        kept = ("; this session's events are kept in the home's spool and stored once it "
                "is back") if spooled else "; retry once it is back"
        return StoreUnavailableError(f"session store unavailable: PostgreSQL at {self.where} "
                                     f"cannot be reached ({self.down_reason}){kept}",
                                     spooled=spooled)

    def error(self, exc: Exception) -> PluginError:
        """Another driver error as a dsh error (redacted)."""
        return PluginError(f"PostgreSQL at {self.where}: "
                           f"{dsn_mod.redact(_first_lines(str(exc)), self.dsn)}")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn)


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        logger.debug("closing a PostgreSQL connection failed", exc_info=True)
