"""``dsh sessions list``, ``show`` and ``rm``: a profile's stored sessions, for people.

The store is the profile's ``sessions`` row, opened outside a runtime as ``export`` opens
it (:func:`dsh.cli.sessionio.profile_store`), so the same commands read a home's
``sessions.db`` or a shared PostgreSQL database. What they read:

* ``list``: the store's summaries (title, times, turns, workspace, usage, cost), newest
  first: no log is read, so 10,000 sessions list at once. A session a live runtime holds
  shows that runtime (``pid N``).
* ``show ID``: the log, a page at a time (:mod:`dsh.cli.transcript`), so a session of
  100,000 events is shown in the memory of one page. Reading needs no lease: a session
  another runtime is running can be shown as far as it is stored. A turn a dead runtime
  left open is closed first (``interrupted``), in the store, as any reader does
  (``close_abandoned``).
* ``rm ID...``: asks first (``--yes`` skips; without a terminal to ask on, ``--yes`` is
  needed), then removes each session under its lease: one a live runtime holds is
  refused naming it, and nothing of it is removed.

An id may be given whole or by its first characters (:mod:`dsh.core.idprefix`): a start
that begins several ids is refused naming how many, as is an id the store does not know
(one line, exit 2). With ``--json`` each prints one JSON document (``show`` streams its
events inside it), in ASCII with every control escaped, like every text shown here,
which passes through :func:`dsh.core.termtext.visible` on its way to a terminal.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from dsh.cli import transcript
from dsh.cli.machine import envelope
from dsh.cli.sessionio import profile_store
from dsh.core import idprefix
from dsh.core.errors import DshError, UsageError
from dsh.core.termtext import visible
from dsh.core.wording import counted

PAGE = 500
"""Events read from the store at a time by ``show``."""
PAGE_BYTES = 4 * 1024 * 1024


def _json(document: Mapping[str, Any]) -> str:
    """The document on one line: ASCII (every control escaped), keys sorted, and compact,
    which keeps json's C encoder (an indented one is Python, five times slower on 10,000
    sessions)."""
    return json.dumps(document, sort_keys=True, ensure_ascii=True,
                      separators=(",", ":")) + "\n"


def _unknown(session_id: str) -> UsageError:
    return UsageError(f"no session {visible(session_id, one_line=True)!r} in this store "
                      "(dsh sessions list shows them)")


def _live_holders(store: Any, ids: list[str]) -> dict[str, str]:
    """``{session_id: "pid N[ on HOST]"}`` of the sessions a live runtime holds now."""
    here = store.holder.host
    return {session_id: f"pid {lease.holder.pid}" + (
                "" if lease.holder.host == here else f" on {lease.holder.host}")
            for session_id, lease in store.live_leases(ids).items()}


def _shortener() -> Any:
    """A function showing a path under the user's home as ``~/...``, made visible."""
    home = os.path.expanduser("~")
    mine = home not in ("", "/")

    def shown(path: str) -> str:
        if mine and (path == home or path.startswith(home + os.sep)):
            path = "~" + path[len(home):]
        return visible(path, one_line=True)

    return shown


# -- list ------------------------------------------------------------------------------


def list_sessions(home: Path, profile: str, patches: list[str], cwd: Path, *,
                  limit: int | None, here: bool, as_json: bool, out: IO[str]) -> None:
    """Print the store's sessions, newest updated first."""
    with profile_store(home, profile, patches, cwd) as (store, _label):
        workspace = os.path.realpath(cwd) if here else None
        entries = store.summaries(workspace=workspace, newest_first=True, limit=limit)
        held = _live_holders(store, [e["sessionId"] for e in entries])
    for entry in entries:
        entry.pop("status", None)
        entry.pop("profile", None)
        runtime = held.get(entry["sessionId"])
        entry["heldBy"] = runtime
    if as_json:
        out.write(_json(envelope("sessions list", profile, data={"sessions": entries})))
        return
    out.write(_table(entries))


def _table(entries: list[dict[str, Any]]) -> str:
    """The listing as aligned columns (the title last, as long as it is)."""
    if not entries:
        return "no sessions\n"
    now = int(time.time() * 1000)
    workspace = _shortener()
    rows = [("ID", "UPDATED", "TURNS", "COST", "RUNTIME", "WORKSPACE", "TITLE")]
    rows += [(visible(e["sessionId"], one_line=True), transcript.age(e["updatedAt"], now),
              str(e["turns"]), transcript.money(e["costUsd"]), e["heldBy"] or "-",
              workspace(e["workspace"]), transcript.title_of(e)) for e in entries]
    w = [max(map(len, column)) for column in list(zip(*rows, strict=True))[:6]]
    return "".join(f"{i:<{w[0]}}  {u:<{w[1]}}  {t:>{w[2]}}  {c:<{w[3]}}  {r:<{w[4]}}  "
                   f"{p:<{w[5]}}  {title}".rstrip() + "\n"
                   for i, u, t, c, r, p, title in rows)


# -- show ------------------------------------------------------------------------------


def show_session(home: Path, profile: str, patches: list[str], cwd: Path, session_id: str,
                 *, form: str, out: IO[str]) -> None:
    """Print one session: ``form`` is ``json``, ``markdown``, ``plain`` or ``rich``."""
    with profile_store(home, profile, patches, cwd) as (store, _label):
        entry = _entry(store, session_id)
        session_id = entry["sessionId"]
        if store.close_abandoned(session_id):
            entry = _entry(store, session_id)
        held = _live_holders(store, [session_id]).get(session_id)
        log = _log(store, session_id)
        if form == "json":
            _json_document(profile, entry, held, log, out)
        elif form == "markdown":
            for piece in transcript.markdown(entry, held, transcript.blocks(log)):
                out.write(piece)
        elif form == "rich":
            transcript.RichView(out).write(entry, held, transcript.blocks(log))
        else:
            for piece in transcript.plain(entry, held, transcript.blocks(log)):
                out.write(piece)


def _entry(store: Any, session_id: str) -> dict[str, Any]:
    """The summary of the session ``session_id`` names, whole or by a unique prefix;
    UsageError (exit 2) when it names none, or several."""
    from dsh.runtime.agent.store import summaries_named

    found = summaries_named(store, session_id)
    if len(found) > 1:
        raise UsageError(visible(idprefix.ambiguous(session_id, [e["sessionId"] for e in found]),
                                 one_line=True))
    if not found:
        raise _unknown(session_id)
    return found[0]


def _log(store: Any, session_id: str) -> Iterator[dict[str, Any]]:
    """The stored events of ``session_id``, one page in memory at a time."""
    seq: int | None = 0
    while seq is not None:
        page = store.history_page(session_id, start_seq=seq, limit=PAGE,
                                  max_bytes=PAGE_BYTES)
        if page is None:
            return
        yield from page.events
        seq = page.next_seq


def _json_document(profile: str, entry: dict[str, Any], held: str | None,
                   log: Iterator[dict[str, Any]], out: IO[str]) -> None:
    """One JSON document, its events streamed one line each (bounded memory)."""
    entry = {**entry, "heldBy": held}
    entry.pop("status", None)
    entry.pop("profile", None)
    marker = "\u0000events\u0000"
    head, tail = _json(envelope("sessions show", profile, data={
        "session": entry, "events": marker})).rstrip("\n").split(json.dumps(marker))
    out.write(head + "[")
    first = True
    for line in transcript.json_lines(log):
        out.write(("\n" if first else ",\n") + line)
        first = False
    out.write("\n]" + tail + "\n")


# -- rm --------------------------------------------------------------------------------


def remove_sessions(home: Path, profile: str, patches: list[str], cwd: Path,
                    session_ids: list[str], *, yes: bool, as_json: bool,
                    ask: Any, out: IO[str]) -> list[str]:
    """Remove each session after ``ask(question) -> bool`` agreed (``yes``: no question);
    returns why each refused one was (the command exits 1 for any).

    Every id is checked first (an unknown one: exit 2, nothing removed); a session held by
    a live runtime is refused and the others are still removed.
    """
    if not yes and not sys.stdin.isatty():
        raise UsageError("dsh sessions rm asks before removing, and there is no terminal to "
                         "ask on: add --yes to remove without asking")
    removed: list[str] = []
    refused: list[str] = []
    with profile_store(home, profile, patches, cwd) as (store, _label):
        found = [_entry(store, session_id) for session_id in session_ids]
        entries = list({e["sessionId"]: e for e in found}.values())
        held = _live_holders(store, [e["sessionId"] for e in entries])
        for entry in entries:
            session_id = entry["sessionId"]
            shown = visible(session_id, one_line=True)
            if session_id in held:
                refused.append(f"{shown}: held by a running runtime ({held[session_id]}); "
                               "stop it, or wait for it to give the session back")
                continue
            question = (f"Remove session {shown} ({transcript.title_of(entry)}, "
                        f"{counted(entry['turns'], 'turn')}, updated "
                        f"{transcript.age(entry['updatedAt'])})? [y/N] ")
            if not yes and not ask(question):
                continue
            try:
                store.delete(session_id)
            except DshError as exc:
                refused.append(f"{shown}: {exc}")
                continue
            removed.append(session_id)
    if as_json:
        out.write(_json(envelope("sessions rm", profile, data={
            "removed": removed, "refused": refused})))
    else:
        out.write("".join(f"removed {visible(s, one_line=True)}\n" for s in removed))
    return refused
