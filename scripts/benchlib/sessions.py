"""The sessions database: appends and resumes as it fills, and what one runtime per
session costs (taking a session's lease)."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

from benchlib.procs import PythonPass, installed_environ, median_ms
from benchlib.registry import Metric, Options, Result, benchmark


def _bench_event(seq: int) -> dict[str, Any]:
    """An event of realistic size (an assistant message with a tool call, ~400 bytes)."""
    message = {"role": "assistant", "id": f"m-{seq:08d}", "source": {"kind": "model"},
               "content": [{"type": "text", "text": "Checking the directory. " * 4},
                           {"type": "tool-call", "id": f"call_{seq}", "name": "bash",
                            "arguments": json.dumps({"command": "ls -la src"})}]}
    return {"type": "assistant/message", "seq": seq, "time": 1700000000000 + seq,
            "data": {"turn": 1, "step": seq, "message": message}, "surfaceOp": "append"}


DB_SCALING = Metric(
    "sessions_db_scaling", "ratio", "<", 2,
    about="1,000 sessions x 100 events through SqliteSessionStore (200 in a quick run): "
          "append and resume times at each tenth of the fill; the worse of the two "
          "100%/10% ratios (flat is 1).",
    changes="Indexes and queries that scan more as the database grows, SQLite's page "
            "cache against the file size, the disk.")


@benchmark("sessions_db_scaling", DB_SCALING)
def sessions_db_scaling(opts: Options) -> Result:
    """Session appends and resumes as the database fills; growth from 10% to 100%."""
    from dsh_runtime.agent.session import SessionRecord
    from dsh_runtime.sessions.sqlite_store import SqliteSessionStore

    count = opts.reps(1000, 200)
    per_session = 100
    marks = {max(1, count * k // 10): f"{k * 10}%" for k in range(1, 11)}  # a plotted curve
    window = max(1, count // 30)  # sessions whose appends make one figure (a median)
    points: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        store = SqliteSessionStore(os.path.join(tmp, "sessions.db"), profile="bench")
        events = [_bench_event(seq) for seq in range(per_session)]
        recent: list[float] = []
        try:
            for n in range(1, count + 1):
                session = f"session-{n:06d}"
                store.acquire(session)
                store.save(SessionRecord(session, tmp))
                t0 = time.perf_counter()
                for event in events:
                    store.append(session, event)
                recent.append((time.perf_counter() - t0) / per_session)
                recent = recent[-window:]
                if n in marks:
                    loads = []
                    for k in range(1, 62):
                        target = f"session-{1 + (k * 7919) % n:06d}"
                        t0 = time.perf_counter()
                        record = store.load(target)
                        loads.append(time.perf_counter() - t0)
                        if record is None or len(record.events) != per_session:
                            raise RuntimeError(f"{target} did not resume whole")
                    points[marks[n]] = {
                        "append_us": round(statistics.median(recent) * 1e6, 1),
                        "resume_ms": median_ms(loads),
                        "events": n * per_session}
        finally:
            store.close()
    first, last = points["10%"], points["100%"]
    append_ratio = last["append_us"] / first["append_us"]
    resume_ratio = last["resume_ms"] / first["resume_ms"]
    return DB_SCALING.measure(max(append_ratio, resume_ratio), sessions=count,
                              events=count * per_session, points=points,
                              append_ratio=round(append_ratio, 2),
                              resume_ratio=round(resume_ratio, 2))


LEASE_OTHERS = 1000
LEASE = Metric(
    "session_lease_acquire", "ms", "<", 5,
    about="SqliteSessionStore.acquire on a file-backed sessions.db (WAL, synchronous=NORMAL) "
          "already holding 1,000 sessions leased by another runtime, as the agent calls it "
          "when a session is created or restored: taking a free lease (one conditional "
          "UPSERT, committed). Refreshing a held lease, being refused a live holder's (the "
          "UPSERT, a read, the pid probe) and taking over a dead holder's (the same plus a "
          "compare-and-set) are details; each call its own transaction.",
    changes="SQLite's commit cost (WAL and the synchronous level, the disk's fsync), the "
            "leases table's indexes as it grows, the pid probe; load. Target 5 ms: a lease "
            "must be invisible beside a session's start.")


@benchmark("session_lease_acquire", LEASE)
def session_lease_acquire(opts: Options) -> Result:
    """Median ms of taking a free session lease in a store of 1,000 leased sessions."""
    from dsh.core.errors import SessionHeldError
    from dsh_runtime.sessions.sqlite_store import SqliteSessionStore

    runs = opts.reps(400, 80)
    dead_pid = 2 ** 22 + 1  # above any pid this kernel hands out by default
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        path = os.path.join(tmp, "sessions.db")
        live = SqliteSessionStore(path, profile="bench", pid=os.getpid(), host="bench-live")
        dead = SqliteSessionStore(path, profile="bench", pid=dead_pid, host="bench-host",
                                  alive=lambda pid: False)
        mine = SqliteSessionStore(path, profile="bench", host="bench-host",
                                  alive=lambda pid: pid != dead_pid)
        try:
            for n in range(LEASE_OTHERS):
                live.acquire(f"other-{n}")
            for n in range(runs):
                dead.acquire(f"orphan-{n}")
            fresh, refresh, busy, takeover = [], [], [], []
            for n in range(runs):
                if n % 20 == 0:
                    baseline.sample()
                session = f"mine-{n}"
                t0 = time.perf_counter()
                mine.acquire(session)
                fresh.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                mine.acquire(session)
                refresh.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                try:
                    mine.acquire(f"other-{n % LEASE_OTHERS}")
                except SessionHeldError:
                    busy.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                taken = mine.acquire(f"orphan-{n}")
                takeover.append(time.perf_counter() - t0)
                if taken is None:
                    raise RuntimeError(f"orphan-{n}: a dead holder's lease was not taken over")
            if len(busy) != runs:
                raise RuntimeError("a live holder's lease was not refused every time")
        finally:
            for store in (mine, dead, live):
                store.close()

    def ms3(samples: list[float]) -> float:  # a lease takes a fraction of a millisecond
        return round(statistics.median(samples) * 1000, 3)

    return LEASE.measure(ms3(fresh), runs=runs, python_pass_ms=baseline.median_ms,
                         leased_sessions=LEASE_OTHERS, refresh_ms=ms3(refresh),
                         busy_ms=ms3(busy), takeover_ms=ms3(takeover))
