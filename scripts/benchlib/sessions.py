"""Session-store benchmarks: what one runtime per session costs.

``session_lease_acquire`` times ``SqliteSessionStore.acquire`` on a real ``sessions.db``
already holding 1,000 leased sessions of other runtimes, as the agent calls it when a
session is created or restored: the figure is the median of taking a free lease (one
conditional UPSERT, committed), with the other paths as details: refreshing a lease this
runtime holds, being refused a live holder's (the UPSERT, one read, the pid probe), and
taking over a dead holder's (the same plus a compare-and-set). Target: under 5 ms.

Registered with ``bench.py``'s ``benchmark`` decorator; it is to be fitted to the
restructured benchmark rules (issue 21: a ``python -c pass`` reference per run) when
those land.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from benchlib.registry import Options, Result, benchmark, result

TARGET_MS = 5.0
OTHERS = 1000


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


@benchmark("session_lease_acquire")
def session_lease_acquire(opts: Options) -> Result:
    """Median ms of taking a free session lease in a store of 1,000 leased sessions."""
    from dsh.errors import SessionHeldError
    from dsh_runtime.sessions.sqlite_store import SqliteSessionStore

    runs = opts.reps(400, 80)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        path = os.path.join(tmp, "sessions.db")
        live = SqliteSessionStore(path, profile="bench", pid=os.getpid(), host="bench-live")
        dead = SqliteSessionStore(path, profile="bench", pid=2 ** 22 + 1, host="bench-host",
                                  alive=lambda pid: False)
        mine = SqliteSessionStore(path, profile="bench", host="bench-host",
                                  alive=lambda pid: pid != 2 ** 22 + 1)
        try:
            for n in range(OTHERS):
                live.acquire(f"other-{n}")
            for n in range(runs):
                dead.acquire(f"orphan-{n}")
            fresh, refresh, busy, takeover = [], [], [], []
            for n in range(runs):
                session = f"mine-{n}"
                t0 = time.perf_counter()
                mine.acquire(session)
                fresh.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                mine.acquire(session)
                refresh.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                try:
                    mine.acquire(f"other-{n % OTHERS}")
                except SessionHeldError:
                    busy.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                taken = mine.acquire(f"orphan-{n}")
                takeover.append(time.perf_counter() - t0)
                assert taken is not None
            assert len(busy) == runs
        finally:
            for store in (mine, dead, live):
                store.close()
    value = _ms(fresh)
    return result("session_lease_acquire", value, "ms", TARGET_MS, runs=runs,
                  leased_sessions=OTHERS, fresh_ms=value, refresh_ms=_ms(refresh),
                  busy_ms=_ms(busy), takeover_ms=_ms(takeover),
                  measured="SqliteSessionStore.acquire on a file-backed sessions.db "
                           "(WAL, synchronous=NORMAL), each call its own transaction")
