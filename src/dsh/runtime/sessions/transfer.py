"""Moving sessions between stores: ``dsh sessions export`` and ``dsh sessions import``.

The format is JSON Lines (UTF-8, one JSON object per line, in this order):

* ``{"format": "dsh-sessions", "version": 1}``: the header, first;
* per session: ``{"type": "session", "id", "profile", "cwd", "title", "status",
  "createdAt", "updatedAt", "state"}``, then each of its events in seq order as
  ``{"type": "event", "session": ID, "event": {...}}`` (the event exactly as a client
  received it), then each of its goals as ``{"type": "goal", "session": ID, "goal":
  {goal_id, number, revision, status, objective, max_goal_rounds, rounds_used,
  blocked_reason}}``;
* ``{"type": "end", "sessions": N, "events": M}``: the trailer, last, so a cut file is
  refused instead of half read.

Exports joined end to end (``cat a.jsonl b.jsonl``) import as one: after a trailer, the
next line must be another export's header; anything else is refused, never dropped.

Both ends work through a store's lease: export reads (no lease needed), import takes
each session's lease, so a session a runtime is running is refused (busy), never
written under it. Import is idempotent: events already stored as they are are skipped,
and a session whose stored log differs from the file's is refused naming the seq.
Events are written in batches of :data:`BATCH` per transaction, each fenced by the lease.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO, Any, NamedTuple

from dsh.core.errors import ConfigError, DshError, DuplicateEventError
from dsh.core.wording import counted

FORMAT = "dsh-sessions"
VERSION = 1
BATCH = 500
PAGE = 1000


class SessionInfo(NamedTuple):
    """A stored session row, as stores exchange it."""

    session_id: str
    profile: str
    cwd: str
    title: str
    status: str
    created_at: int
    updated_at: int
    state: dict[str, Any]


class Counts(NamedTuple):
    """What an export or import moved (and, for import, what it refused)."""

    sessions: int
    events: int
    goals: int
    refused: tuple[str, ...] = ()


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n"


def export(store: Any, out: IO[str], session_ids: Iterable[str] | None = None) -> Counts:
    """Write the sessions of ``store`` (all, or ``session_ids``) to ``out``; an unknown id
    is :class:`ConfigError` before anything is written."""
    wanted = sorted(session_ids) if session_ids else [s["sessionId"]
                                                      for s in store.summaries()]
    infos = []
    for session_id in wanted:
        info = store.info(session_id)
        if info is None:
            raise ConfigError(f"no session '{session_id}' in this store")
        infos.append(info)
    out.write(_line({"format": FORMAT, "version": VERSION}))
    events = goals = 0
    table = store.goals()
    for info in infos:
        out.write(_line({"type": "session", "id": info.session_id, "profile": info.profile,
                         "cwd": info.cwd, "title": info.title, "status": info.status,
                         "createdAt": info.created_at, "updatedAt": info.updated_at,
                         "state": info.state}))
        seq: int | None = 0
        while seq is not None:
            page = store.history_page(info.session_id, start_seq=seq, limit=PAGE,
                                      max_bytes=1 << 62)
            if page is None:
                break
            for event in page.events:
                out.write(_line({"type": "event", "session": info.session_id,
                                 "event": event}))
                events += 1
            seq = page.next_seq
        for goal in table.history(info.session_id):
            view = goal.view()
            view["number"] = goal.number
            out.write(_line({"type": "goal", "session": info.session_id, "goal": view}))
            goals += 1
    out.write(_line({"type": "end", "sessions": len(infos), "events": events}))
    return Counts(len(infos), events, goals)


class _Reader:
    """The lines of an export, checked as they are read; errors name the line."""

    def __init__(self, lines: Iterable[str], source: str) -> None:
        self._lines = iter(lines)
        self.source = source
        self.number = 0

    def fail(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}:{max(1, self.number)}: {problem}")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for text in self._lines:
            self.number += 1
            if not text.strip():
                continue
            try:
                document = json.loads(text)
            except json.JSONDecodeError as exc:
                raise self.fail(f"not JSON ({exc.msg})") from None
            if not isinstance(document, dict):
                raise self.fail("each line must be a JSON object")
            yield document


def _goal(reader: _Reader, session_id: str, data: Any) -> Any:
    from dsh.runtime.planning.goalstore import Goal

    try:
        return Goal(session_id, str(data["goal_id"]), int(data["number"]),
                    int(data["revision"]), str(data["objective"]), str(data["status"]),
                    int(data["max_goal_rounds"]), int(data.get("rounds_used", 0)),
                    data.get("blocked_reason"))
    except (KeyError, TypeError, ValueError):
        raise reader.fail("a goal needs goal_id, number, revision, objective, status and "
                          "max_goal_rounds") from None


def _header(reader: _Reader, document: dict[str, Any] | None, where: str) -> None:
    """ConfigError unless ``document`` is an export's header of the version read here."""
    if document is None or document.get("format") != FORMAT:
        raise reader.fail(f"not a dsh sessions export ({where} must be "
                          f'{{"format": "{FORMAT}", "version": {VERSION}}})')
    if document.get("version") != VERSION:
        raise reader.fail(f"export format version {document.get('version')!r}; this dsh "
                          f"reads version {VERSION}")


def import_(store: Any, lines: Iterable[str], source: str) -> Counts:
    """Read an export from ``lines`` into ``store``; returns what was written.

    Each session is written under its lease (taken, then released): one held by a running
    runtime, or whose stored log disagrees with the file, is refused and listed in
    ``Counts.refused``; the others are written. A malformed or cut file is ConfigError
    naming the line; what was written before stays (a second import completes it).
    """
    reader = _Reader(lines, source)
    documents = iter(reader)
    _header(reader, next(documents, None), "the first line")
    done: list[str] = []
    refused: list[str] = []
    events = goals = 0
    before = 0  # sessions of the exports joined before this one
    current: _Incoming | None = None

    def close() -> None:
        if current is not None:
            current.finish()
            if current.refusal is None:
                done.append(current.info.session_id)
            else:
                refused.append(current.refusal)

    for document in documents:
        kind = document.get("type")
        if kind == "end":
            close()
            current = None
            held = len(done) + len(refused) - before
            counts = document.get("sessions")
            if counts != held:
                raise reader.fail(f"the trailer counts {counted(counts, 'session')}, the "
                                  f"export before it holds {held}")
            following = next(documents, None)
            if following is None:
                return Counts(len(done), events, goals, tuple(refused))
            _header(reader, following, "a line after a trailer")
            before = len(done) + len(refused)
            continue
        if kind == "session":
            close()
            current = _Incoming(store, reader, document)
            continue
        if current is None or document.get("session") != current.info.session_id:
            raise reader.fail(f"a {kind!r} line outside its session's block")
        if kind == "event":
            events += current.event(document.get("event"))
        elif kind == "goal":
            goals += current.goal(_goal(reader, current.info.session_id, document.get("goal")))
        else:
            raise reader.fail(f"unknown line type {kind!r}")
    close()
    raise reader.fail("the file ends without its trailer line (cut short?); the sessions "
                      "before are imported: run the import again with the whole file")


class _Incoming:
    """One session being imported: its lease, its batch of events."""

    def __init__(self, store: Any, reader: _Reader, document: dict[str, Any]) -> None:
        self.store = store
        self.reader = reader
        try:
            self.info = SessionInfo(str(document["id"]), str(document.get("profile", "")),
                                    str(document["cwd"]), str(document.get("title", "")),
                                    str(document.get("status", "closed")),
                                    int(document.get("createdAt", 0)),
                                    int(document.get("updatedAt", 0)),
                                    dict(document.get("state") or {}))
        except (KeyError, TypeError, ValueError):
            raise reader.fail("a session line needs id and cwd") from None
        if self.info.status == "open":  # nobody holds it live in the new store
            self.info = self.info._replace(status="closed")
        self.batch: list[dict[str, Any]] = []
        self.next_seq = 0
        self.refusal: str | None = None
        try:
            store.acquire(self.info.session_id)
        except DshError as exc:
            self.refusal = f"{self.info.session_id}: {exc}"
            return
        store.put_info(self.info)

    def event(self, event: Any) -> int:
        if not isinstance(event, dict) or event.get("seq") != self.next_seq:
            raise self.reader.fail(f"session {self.info.session_id}: expected the event with "
                                   f"seq {self.next_seq}")
        self.next_seq += 1
        if self.refusal is not None:
            return 0
        self.batch.append(event)
        if len(self.batch) >= BATCH:
            self.flush()
        return 1

    def goal(self, goal: Any) -> int:
        if self.refusal is not None:
            return 0
        self.store.goals().put(goal)
        return 1

    def flush(self) -> None:
        if not self.batch or self.refusal is not None:
            self.batch.clear()
            return
        try:
            self.store.append_many(self.info.session_id, self.batch)
        except DuplicateEventError as exc:
            self.refusal = (f"{self.info.session_id}: the stored log differs from the file "
                            f"at seq {exc.seq}; nothing more of it was imported")
        self.batch.clear()

    def finish(self) -> None:
        """Write the last batch and give the lease back (only ever this holder's)."""
        self.flush()
        self.store.release(self.info.session_id)
