"""The sessions database: appends and resumes as it fills."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

from benchlib.procs import median_ms
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
