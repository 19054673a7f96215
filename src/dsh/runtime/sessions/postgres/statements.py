"""Every SQL statement of the PostgreSQL session store, written once for a schema.

The store (:mod:`.store`) runs only these; they are built per schema (quoted by
:func:`~dsh.runtime.sessions.postgres.schema.quoted`) when the store opens, so no value
is ever formatted into SQL: everything else is a bound parameter. The fences the store's
docstring describes are here: ``append`` checks the lease in the same statement and
locks it ``FOR SHARE``; ``held`` does the same at the start of a transaction; ``take``
and ``takeover`` are the conditional UPSERT and the compare-and-set of a lease.
"""

from __future__ import annotations

from dsh.runtime.sessions import summaries


def statements(s: str) -> dict[str, str]:
    """Every statement the store runs, on schema ``s`` (quoted), written once."""
    fenced = (f"INSERT INTO {s}.events (session_id, seq, type, time, body) "
              f"SELECT %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM {s}.session_leases "
              "WHERE session_id = %s AND holder_id = %s FOR SHARE)")
    update = summaries.update_sql(f"{s}.sessions", greatest="GREATEST", mark="%s")
    after_insert = summaries.update_sql(f"{s}.sessions", greatest="GREATEST", mark="%s",
                                        also=" AND EXISTS (SELECT 1 FROM ins)")
    listed = f"SELECT {summaries.LISTED} FROM {s}.sessions"
    return {
        "append": fenced,
        # The event and its row's summary in one statement (one round trip): the UPDATE
        # runs only when the fenced INSERT stored the event; the count is the INSERT's.
        "append_summary": f"WITH ins AS ({fenced} RETURNING 1), upd AS ({after_insert}) "
                          "SELECT count(*) FROM ins",
        "update_summary": update,
        "insert_missing": f"INSERT INTO {s}.events (session_id, seq, type, time, body) VALUES "
                          "(%s, %s, %s, %s, %s) ON CONFLICT (session_id, seq) DO NOTHING",
        "event_body": f"SELECT body FROM {s}.events WHERE session_id = %s AND seq = %s",
        "top": f"SELECT max(seq) FROM {s}.events WHERE session_id = %s",
        "row": f"SELECT cwd, title, state FROM {s}.sessions WHERE id = %s",
        "log": f"SELECT body FROM {s}.events WHERE session_id = %s ORDER BY seq",
        "exists": f"SELECT 1 FROM {s}.sessions WHERE id = %s",
        "last_turn_mark": f"SELECT seq, type FROM {s}.events WHERE session_id = %s AND type "
                          "IN ('turn/start', 'turn/end') ORDER BY seq DESC LIMIT 1",
        "tail": f"SELECT body FROM {s}.events WHERE session_id = %s AND seq >= %s "
                "ORDER BY seq",
        "page": f"SELECT seq, body FROM {s}.events WHERE session_id = %s AND seq >= %s "
                "ORDER BY seq LIMIT %s",
        "summary": f"{listed} WHERE id = %s",
        "list_by_id": f"{listed} ORDER BY id LIMIT %s",
        "list_newest": f"{listed} ORDER BY updated_at DESC, id DESC LIMIT %s",
        "list_workspace_by_id": f"{listed} WHERE workspace = %s ORDER BY id LIMIT %s",
        "list_workspace_newest": f"{listed} WHERE workspace = %s ORDER BY updated_at DESC, "
                                 "id DESC LIMIT %s",
        "versions": f"SELECT id, revision, (SELECT max(seq) FROM {s}.events e WHERE "
                    f"e.session_id = {s}.sessions.id) FROM {s}.sessions WHERE id = ANY(%s)",
        "delete_session": f"DELETE FROM {s}.sessions WHERE id = %s",
        "delete_events": f"DELETE FROM {s}.events WHERE session_id = %s",
        "delete_goals": f"DELETE FROM {s}.goals WHERE session_id = %s",
        "status": f"SELECT status FROM {s}.sessions WHERE id = %s",
        "upsert": f"INSERT INTO {s}.sessions (id, profile, cwd, status, title, created_at, "
                  "updated_at, owner_holder, owner_host, owner_pid, state, workspace, "
                  "revision) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1) "
                  "ON CONFLICT (id) DO UPDATE "
                  "SET cwd = excluded.cwd, status = excluded.status, title = excluded.title, "
                  "updated_at = excluded.updated_at, owner_holder = excluded.owner_holder, "
                  "owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, "
                  f"state = excluded.state, revision = {s}.sessions.revision + 1",
        "put_info": f"INSERT INTO {s}.sessions (id, profile, cwd, status, title, created_at, "
                    "updated_at, state, workspace, revision) VALUES "
                    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, 1) "
                    "ON CONFLICT (id) DO UPDATE SET profile = excluded.profile, "
                    "cwd = excluded.cwd, status = excluded.status, title = excluded.title, "
                    "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                    "owner_holder = NULL, owner_host = NULL, owner_pid = NULL, "
                    "state = excluded.state, workspace = excluded.workspace, "
                    f"revision = {s}.sessions.revision + 1 WHERE {s}.sessions.updated_at <= "
                    "excluded.updated_at",
        "info": f"SELECT id, profile, cwd, title, status, created_at, updated_at, state FROM "
                f"{s}.sessions WHERE id = %s",
        "held": f"SELECT holder_id FROM {s}.session_leases WHERE session_id = %s FOR SHARE",
        "take": f"INSERT INTO {s}.session_leases (session_id, holder_id, host, pid, "
                "acquired_at, heartbeat_at) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (session_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at "
                f"WHERE {s}.session_leases.holder_id = excluded.holder_id",
        "takeover": f"UPDATE {s}.session_leases SET holder_id = %s, host = %s, pid = %s, "
                    "acquired_at = %s, heartbeat_at = %s WHERE session_id = %s AND "
                    "holder_id = %s AND heartbeat_at = %s",
        "release": f"DELETE FROM {s}.session_leases WHERE session_id = %s AND holder_id = %s",
        "release_all": f"DELETE FROM {s}.session_leases WHERE holder_id = %s",
        "heartbeat": f"UPDATE {s}.session_leases SET heartbeat_at = %s WHERE holder_id = %s "
                     "RETURNING session_id",
        "lease": f"SELECT holder_id, host, pid, acquired_at, heartbeat_at, session_id FROM "
                 f"{s}.session_leases WHERE session_id = %s",
        "leases": f"SELECT holder_id, host, pid, acquired_at, heartbeat_at, session_id FROM "
                  f"{s}.session_leases WHERE session_id = ANY(%s)",
        "close_all": f"UPDATE {s}.sessions SET status = %s, owner_holder = NULL, "
                     "owner_host = NULL, owner_pid = NULL, updated_at = %s "
                     "WHERE owner_holder = %s",
        "open_sessions": f"SELECT s.id, s.owner_holder, l.holder_id, l.host, l.pid, "
                         f"l.acquired_at, l.heartbeat_at FROM {s}.sessions s LEFT JOIN "
                         f"{s}.session_leases l ON l.session_id = s.id WHERE s.status = 'open'",
        "interrupt": f"UPDATE {s}.sessions SET status = %s, owner_holder = NULL, "
                     "owner_host = NULL, owner_pid = NULL WHERE id = ANY(%s)",
    }
