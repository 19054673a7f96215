"""The session store behind the ``sessions`` service: ``$DSH_HOME/sessions.db``.

It implements the agent's :class:`~dsh_runtime.agent.store.SessionStore` and, beyond
``save``/``load``, ``append``: the agent calls it for every event *before* a client sees
the event, each append its own transaction, so a crash loses at most the event being
written and every event a client received is on disk. ``save`` refreshes the session row
and writes any event an append missed (an append that failed, say on a full disk, is
retried there), so the log never has gaps once a save succeeds.

``load`` rebuilds the record from the log itself (the conversation is the message events
in order), not from a snapshot that a crash could leave stale. WAL mode with
``synchronous=NORMAL`` keeps a commit to a write of the log without an fsync: a power
cut may lose the last commits, but never corrupts the file.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from dsh.errors import EXIT_USAGE, PluginError

from dsh_runtime.agent import compaction, events
from dsh_runtime.agent.session import SessionRecord
from dsh_runtime.sessions import schema, workspaces

logger = logging.getLogger("dsh.sessions")

OPEN, CLOSED, INTERRUPTED = "open", "closed", "interrupted"
"""``sessions.status``: held by a live runtime, closed by it, or left by one that died."""

_MESSAGE_EVENTS = {events.SYSTEM_MESSAGE, events.USER_MESSAGE, events.ASSISTANT_MESSAGE,
                   events.TOOL_RESULT}
_CONTEXT_PREFIX = "Current working directory: "


def _now() -> int:
    return int(time.time() * 1000)


def _create_private(path: Path) -> None:
    """Create the database file 0600 (and its home 0700) before SQLite opens it."""
    if not path.parent.exists():
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


class SqliteSessionStore:
    """Sessions and their event logs in one SQLite file, used from the runtime's loop thread.

    ``profile`` is recorded on sessions this runtime creates; ``pid`` marks the ones it
    holds live, so a later runtime can tell a crashed holder from a running one.
    """

    def __init__(self, path: str | os.PathLike[str], *, profile: str,
                 pid: int | None = None, busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path)
        self.home = self.path.parent
        self.profile = profile
        self.pid = os.getpid() if pid is None else pid
        self._next_seq: dict[str, int] = {}
        try:
            _create_private(self.path)
            self._conn = sqlite3.connect(self.path, isolation_level=None,
                                         timeout=busy_timeout_ms / 1000)
        except (OSError, sqlite3.Error) as exc:
            # the home cannot hold the file (read-only, full, not ours): bad setup, exit 2
            raise PluginError(f"cannot open {self.path}: {exc}",
                              exit_code=EXIT_USAGE) from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            schema.migrate(self._conn, str(self.path))
        except sqlite3.Error as exc:
            self._conn.close()
            raise PluginError(f"cannot use {self.path}: {exc}", exit_code=EXIT_USAGE) from exc
        except BaseException:
            self._conn.close()
            raise

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection (for the workspace functions and tests)."""
        return self._conn

    def set_busy_timeout(self, busy_timeout_ms: int) -> None:
        """How long a write waits for another runtime's lock before failing."""
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")

    # -- the agent's store interface --------------------------------------------------------

    def save(self, record: SessionRecord) -> None:
        """Upsert the session row (held by this runtime) and write any missing events."""
        state = json.dumps({"turns": record.turns, "context_cwd": record.context_cwd,
                            "root": record.root, "granted": record.granted})
        now = _now()
        with workspaces.transaction(self._conn):
            self._conn.execute(
                "INSERT INTO sessions (id, profile, cwd, status, title, created_at, "
                "updated_at, owner_pid, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET cwd = excluded.cwd, status = excluded.status, "
                "title = excluded.title, updated_at = excluded.updated_at, "
                "owner_pid = excluded.owner_pid, state = excluded.state",
                (record.session_id, self.profile, record.cwd, OPEN, record.title, now, now,
                 self.pid, state))
            start = self._next(record.session_id)
            missing = record.events[start:]
            if missing:
                self._conn.executemany(
                    "INSERT OR IGNORE INTO events (session_id, seq, type, time, body) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [self._row(record.session_id, e) for e in missing])
        self._next_seq[record.session_id] = max(start, len(record.events))

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Write one event now, in its own transaction (autocommit: one INSERT).

        The first seq not yet stored moves past this event only when it *was* that seq:
        after a failed append (a full disk) later appends may succeed, and moving past
        them would make ``save`` skip the missed events for good, a gap in the log.
        """
        self._conn.execute("INSERT OR IGNORE INTO events (session_id, seq, type, time, body) "
                           "VALUES (?, ?, ?, ?, ?)", self._row(session_id, event))
        if self._next(session_id) == event["seq"]:
            self._next_seq[session_id] = event["seq"] + 1

    def load(self, session_id: str) -> SessionRecord | None:
        """Rebuild the record from the session row and its event log; None if unknown."""
        row = self._conn.execute("SELECT cwd, title, state FROM sessions WHERE id = ?",
                                 (session_id,)).fetchone()
        if row is None:
            return None
        cwd, title, state_text = row
        state = json.loads(state_text or "{}")
        log = [json.loads(body) for (body,) in self._conn.execute(
            "SELECT body FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
        self._next_seq[session_id] = len(log)
        # A session stored before roots were kept takes its stored cwd as its root.
        record = SessionRecord(session_id, cwd, title=title, events=log,
                               context_cwd=state.get("context_cwd"),
                               root=state.get("root") or os.path.realpath(cwd),
                               granted=list(state.get("granted") or ()))
        turns = 0
        for event in log:
            kind, data = event["type"], event.get("data", {})
            if kind == events.TURN_START:
                turns = max(turns, int(data.get("turn", 0)))
            elif kind == events.SESSION_TITLE and not record.title:
                record.title = data.get("title", "")
            elif kind == compaction.COMPACTED:
                compaction.replay(record.messages, data)
            if kind not in _MESSAGE_EVENTS:
                continue
            message = data if kind == events.USER_MESSAGE else data.get("message")
            if not isinstance(message, dict):
                continue
            if kind == events.SYSTEM_MESSAGE:
                record.system = message
                continue
            record.messages.append(message)
            told = _context_cwd(message)
            if told is not None:
                record.context_cwd = told
        record.turns = max(turns, int(state.get("turns", 0)))
        record.context_shown = events.shown_sections(record.messages)
        return record

    # -- listing, closing, workspaces ---------------------------------------------------------

    def summaries(self) -> list[dict[str, Any]]:
        """``{sessionId, cwd, title, status, profile, createdAt, updatedAt}`` of every stored
        session, sorted by id."""
        rows = self._conn.execute("SELECT id, cwd, title, status, profile, created_at, "
                                  "updated_at FROM sessions ORDER BY id")
        return [{"sessionId": r[0], "cwd": r[1], "title": r[2], "status": r[3],
                 "profile": r[4], "createdAt": r[5], "updatedAt": r[6]} for r in rows]

    def status(self, session_id: str) -> str | None:
        """The stored status of ``session_id`` (open, closed, interrupted), or None."""
        row = self._conn.execute("SELECT status FROM sessions WHERE id = ?",
                                 (session_id,)).fetchone()
        return None if row is None else str(row[0])

    def reconcile(self, *, alive: workspaces.PidAlive = workspaces.pid_alive) -> list[str]:
        """At start: sessions held by dead runtimes become ``interrupted``, their workspace
        holds are dropped, and workspaces left at zero are cleaned (ids returned)."""
        with workspaces.transaction(self._conn):
            owners = [r[0] for r in self._conn.execute(
                "SELECT DISTINCT owner_pid FROM sessions WHERE owner_pid IS NOT NULL")]
            for pid in owners:
                if pid != self.pid and not alive(pid):
                    self._conn.execute("UPDATE sessions SET status = ?, owner_pid = NULL "
                                       "WHERE owner_pid = ?", (INTERRUPTED, pid))
        return workspaces.reconcile(self._conn, self.home,
                                    alive=lambda pid: pid == self.pid or alive(pid))

    def acquire_workspace(self, session_id: str, workspace_id: str | None = None) -> Path:
        """Hold a workspace for ``session_id`` (its own id unless shared); returns the path."""
        return workspaces.acquire(self._conn, self.home, workspace_id or session_id,
                                  session_id, pid=self.pid)

    def release_workspace(self, session_id: str, workspace_id: str | None = None, *,
                          force: bool = False) -> bool:
        """Drop ``session_id``'s hold; True when the workspace was cleaned (count zero)."""
        return workspaces.release(self._conn, self.home, workspace_id or session_id,
                                  session_id, force=force)

    def close(self) -> None:
        """Mark this runtime's sessions closed, release its workspace holds, close the file.

        Idempotent. Workspaces this runtime's sessions held are released one by one, so
        ones still shared with another live runtime survive.
        """
        conn = self._conn
        if conn is None:
            return
        try:
            held = conn.execute("SELECT workspace_id, session_id FROM workspace_refs "
                                "WHERE pid = ?", (self.pid,)).fetchall()
            for workspace_id, session_id in held:
                workspaces.release(conn, self.home, workspace_id, session_id)
            conn.execute("UPDATE sessions SET status = ?, owner_pid = NULL, updated_at = ? "
                         "WHERE owner_pid = ?", (CLOSED, _now(), self.pid))
        except sqlite3.Error:
            logger.exception("closing %s", self.path)
        finally:
            conn.close()
            self._conn = None  # type: ignore[assignment]

    # -- internals ------------------------------------------------------------------------

    def _next(self, session_id: str) -> int:
        """The first seq not yet stored for ``session_id`` (asked of the file once)."""
        known = self._next_seq.get(session_id)
        if known is None:
            top = self._conn.execute("SELECT max(seq) FROM events WHERE session_id = ?",
                                     (session_id,)).fetchone()[0]
            known = 0 if top is None else int(top) + 1
            self._next_seq[session_id] = known
        return known

    @staticmethod
    def _row(session_id: str, event: dict[str, Any]) -> tuple[Any, ...]:
        return (session_id, int(event["seq"]), str(event["type"]), int(event.get("time", 0)),
                json.dumps(event, separators=(",", ":"), ensure_ascii=False))


def _context_cwd(message: dict[str, Any]) -> str | None:
    """The directory a runtime-context message told the model about, if it is one."""
    source = message.get("source")
    if not isinstance(source, dict) or source.get("kind") != "runtime-context":
        return None
    for section in source.get("sections", ()):
        text = section.get("text", "") if isinstance(section, dict) else ""
        if section.get("name") == events.CWD_SECTION and text.startswith(
                _CONTEXT_PREFIX):
            try:
                told = json.loads(text[len(_CONTEXT_PREFIX):].rstrip("."))
            except ValueError:
                return None
            return told if isinstance(told, str) else None
    return None
