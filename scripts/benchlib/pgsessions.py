"""Session stores side by side: PostgreSQL (``sessions-postgres``) beside SQLite.

Each benchmark starts its own throwaway PostgreSQL cluster (``tests/fixtures/pgcluster.py``:
``initdb`` + ``pg_ctl`` on a loopback port, fsync on, as a deployment would run it) and
removes it after; without PostgreSQL's binaries or psycopg the rows are skipped, saying why.

* ``session_store_append``: the median time of one fenced ``append`` (its own committed
  transaction) into a session whose log already holds 100,000 events (10,000 in
  ``--quick``), on PostgreSQL with the store's default ``synchronous_commit = off``; the
  SQLite figure, the 10,000-event ones and the same append with ``synchronous_commit =
  on`` (waiting for the server's disk) are details. Target: under 5 ms, a fraction of a
  model step.
* ``session_store_resume``: the median time of ``load`` (the whole log read and replayed
  into a record, what ``session/resume`` does) of that session. Target: under 3,000 ms at
  100,000 events, a session far longer than any one conversation.
* ``pg_sessions_started``: 8 real ``dsh --profile sdk`` runtimes on one database, each
  sent 60 ``session/new`` requests at once (lease taken, session row written); sessions
  per second of wall time from the first request to the last answer. The same 8
  runtimes on one home's ``sessions.db`` are a detail. Target: at least 100 per second.

Registered with ``bench.py``'s ``benchmark`` decorator; to be fitted to the restructured
benchmark rules (issue 21: a ``python -c pass`` reference per run, ``ok: null`` for a
skipped row) when those land.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib.registry import Options, Result, benchmark, result

REPO = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = REPO / "examples" / "offline" / "patch.yml"
POSTGRES_PATCH = REPO / "examples" / "postgres" / "patch.yml"
APPEND_TARGET_MS = 5.0
RESUME_TARGET_MS = 3000.0
STARTED_TARGET = 100.0
RUNTIMES = 8
PER_RUNTIME = 60
SAMPLES = 200


def _cluster_module() -> Any:
    fixtures = str(REPO / "tests" / "fixtures")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    import pgcluster

    return pgcluster


def _why_not() -> str | None:
    """Why PostgreSQL cannot be measured here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'dsh[postgres]')"
    if _cluster_module().find_bindir() is None:
        return "PostgreSQL's initdb and pg_ctl are not installed (Debian: postgresql)"
    return None


@contextmanager
def _cluster() -> Iterator[Any]:
    pgcluster = _cluster_module()
    cluster = pgcluster.Cluster(pgcluster.find_bindir(), durable=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


def _event(seq: int) -> dict[str, Any]:
    """An event of realistic size (an assistant message with a tool call, ~400 bytes)."""
    message = {"role": "assistant", "id": f"m-{seq:08d}", "source": {"kind": "model"},
               "content": [{"type": "text", "text": "Checking the directory. " * 4},
                           {"type": "tool-call", "id": f"call_{seq}", "name": "bash",
                            "arguments": json.dumps({"command": "ls -la src"})}]}
    return {"type": "assistant/message", "seq": seq, "time": 1700000000000 + seq,
            "data": {"turn": 1, "step": seq, "message": message}, "surfaceOp": "append"}


def _stores(tmp: str, dsn: str) -> dict[str, Any]:
    from dsh_runtime.sessions.postgres.link import Link
    from dsh_runtime.sessions.postgres.store import PostgresSessionStore
    from dsh_runtime.sessions.sqlite_store import SqliteSessionStore

    def postgres(sync: str) -> PostgresSessionStore:
        link = Link(dsn, synchronous_commit=sync)
        link.adopt(link.connect())
        return PostgresSessionStore(link, schema_name="bench", home=Path(tmp) / f"pg-{sync}",
                                    profile="bench")

    return {"postgres": postgres("off"),
            "sqlite": SqliteSessionStore(Path(tmp) / "sessions.db", profile="bench"),
            "postgres-sync-on": postgres("on")}


def _grow(store: Any, session: str, size: int) -> None:
    """Fill ``session``'s log to ``size`` events (batches of 1,000, one transaction each)."""
    from dsh_runtime.agent.session import SessionRecord

    have = store._next(session)  # the first seq not yet stored
    if have == 0:
        store.save(SessionRecord(session, "/bench"))
    for start in range(have, size, 1000):
        store.append_many(session, [_event(seq) for seq in range(start, min(size, start + 1000))])


def _store_figures(opts: Options) -> dict[str, dict[str, dict[str, float]]]:
    """``{kind: {size: {append_ms, resume_ms}}}`` for both stores at each size."""
    sizes = (10_000,) if opts.quick else (10_000, 100_000)
    samples = opts.reps(SAMPLES, 50)
    figures: dict[str, dict[str, dict[str, float]]] = {"postgres": {}, "sqlite": {}}
    with _cluster() as cluster, tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        stores = _stores(tmp, cluster.dsn())
        sync_on = stores.pop("postgres-sync-on")
        try:
            for kind, store in stores.items():
                store.acquire("log")
                for size in sizes:
                    _grow(store, "log", size)
                    loads = []
                    for _ in range(opts.reps(5, 3)):
                        t0 = time.perf_counter()
                        record = store.load("log")
                        loads.append(time.perf_counter() - t0)
                        assert record is not None and len(record.events) == size
                    appends = []
                    for n in range(samples):  # the log grows past ``size`` by these
                        t0 = time.perf_counter()
                        store.append("log", _event(size + n))
                        appends.append(time.perf_counter() - t0)
                    figures[kind][f"{size}"] = {
                        "append_ms": round(statistics.median(appends) * 1000, 3),
                        "resume_ms": round(statistics.median(loads) * 1000, 1)}
            # The same append waiting for the server's disk (synchronous_commit on), into
            # the same table once it holds the largest log.
            sync_on.acquire("sync-on")
            _grow(sync_on, "sync-on", 1)
            waits = []
            for n in range(samples):
                t0 = time.perf_counter()
                sync_on.append("sync-on", _event(1 + n))
                waits.append(time.perf_counter() - t0)
            figures["postgres"]["synchronous_commit_on_append_ms"] = round(  # type: ignore[assignment]
                statistics.median(waits) * 1000, 3)
        finally:
            for store in [*stores.values(), sync_on]:
                store.close()
    return figures


_FIGURES: dict[bool, Any] = {}


def _shared(opts: Options) -> Any:
    """The store figures, measured once per run for both rows."""
    if opts.quick not in _FIGURES:
        _FIGURES[opts.quick] = _store_figures(opts)
    return _FIGURES[opts.quick]


@benchmark("session_store_append")
def session_store_append(opts: Options) -> Result:
    """Median ms of one fenced append to a 100,000-event session log on PostgreSQL
    (SQLite and 10,000 events beside it)."""
    why = _why_not()
    if why is not None:
        return result("session_store_append", 0, "ms", APPEND_TARGET_MS, skipped=why)
    figures = _shared(opts)
    size = max((k for k in figures["postgres"] if k.isdigit()), key=int)
    return result("session_store_append", figures["postgres"][size]["append_ms"], "ms",
                  APPEND_TARGET_MS, runs=opts.reps(SAMPLES, 50), events=int(size),
                  postgres=figures["postgres"], sqlite=figures["sqlite"],
                  measured="in-process store.append on a local PostgreSQL 'initdb' cluster "
                           "(fsync on, loopback TCP) and on a file sessions.db (WAL, "
                           "synchronous=NORMAL); each append its own committed transaction")


@benchmark("session_store_resume")
def session_store_resume(opts: Options) -> Result:
    """Median ms of loading (resuming) a 100,000-event session from PostgreSQL (SQLite and
    10,000 events beside it)."""
    why = _why_not()
    if why is not None:
        return result("session_store_resume", 0, "ms", RESUME_TARGET_MS, skipped=why)
    figures = _shared(opts)
    size = max((k for k in figures["postgres"] if k.isdigit()), key=int)
    return result("session_store_resume", figures["postgres"][size]["resume_ms"], "ms",
                  RESUME_TARGET_MS, runs=opts.reps(5, 3), events=int(size),
                  postgres=figures["postgres"], sqlite=figures["sqlite"],
                  measured="in-process store.load: the whole log read and replayed into a "
                           "record, as session/resume does")


class _Runtime:
    """A real ``dsh --profile sdk`` on pipes, for pipelined ``session/new`` requests."""

    def __init__(self, patches: list[Path], environ: dict[str, str], cwd: str) -> None:
        argv = [sys.executable, "-m", "dsh", "--profile", "sdk"]
        for patch in patches:
            argv += ["--patch", str(patch)]
        self.proc = subprocess.Popen(argv, env=environ, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any]) -> None:
        from dsh import jsonrpc

        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(jsonrpc.encode(jsonrpc.request(self.next_id, method, params)))

    def answers(self, count: int) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.flush()
        out = []
        while len(out) < count:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr \
                    else ""
                raise RuntimeError(f"the runtime exited: {err[-500:]}")
            frame = json.loads(line)
            if "id" in frame and "method" not in frame:
                out.append(frame)
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _sessions_per_second(patches: list[Path], environ: dict[str, str], tmp: str,
                         per_runtime: int) -> float:
    runtimes = [_Runtime(patches, environ, tmp) for _ in range(RUNTIMES)]
    try:
        for rt in runtimes:
            rt.send("initialize", {"cwd": tmp, "provider": "scripted", "model": "scripted"})
            answer = rt.answers(1)[0]
            if "result" not in answer:
                raise RuntimeError(f"initialize failed: {answer}")
        errors: list[str] = []
        gate = threading.Barrier(RUNTIMES + 1)

        def drive(rt: _Runtime) -> None:
            gate.wait()
            for _ in range(per_runtime):
                rt.send("session/new", {"cwd": tmp})
            bad = [a for a in rt.answers(per_runtime) if "result" not in a]
            if bad:
                errors.append(json.dumps(bad[0]))

        threads = [threading.Thread(target=drive, args=(rt,)) for rt in runtimes]
        for thread in threads:
            thread.start()
        gate.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"session/new failed: {errors[0]}")
        return RUNTIMES * per_runtime / wall
    finally:
        for rt in runtimes:
            rt.close()


@benchmark("pg_sessions_started")
def pg_sessions_started(opts: Options) -> Result:
    """Sessions started per second by 8 runtimes on one PostgreSQL database (each
    session/new takes a lease and writes the session row)."""
    why = _why_not()
    if why is not None:
        return result("pg_sessions_started", 0, "sessions/s", STARTED_TARGET,
                      higher_is_better=True, skipped=why)
    per_runtime = opts.reps(PER_RUNTIME, 20)
    runs = opts.reps(3, 1)
    figures: dict[str, list[float]] = {"postgres": [], "sqlite": []}
    with _cluster() as cluster, tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
        environ.update(DSH_HOME=str(Path(tmp) / "home"), DSH_POSTGRES_DSN=cluster.dsn())
        for _ in range(runs):
            figures["postgres"].append(_sessions_per_second(
                [OFFLINE_PATCH, POSTGRES_PATCH], environ, tmp, per_runtime))
            figures["sqlite"].append(_sessions_per_second(
                [OFFLINE_PATCH], environ, tmp, per_runtime))
    value = statistics.median(figures["postgres"])
    return result("pg_sessions_started", value, "sessions/s", STARTED_TARGET,
                  higher_is_better=True, runs=runs, runtimes=RUNTIMES,
                  sessions_per_runtime=per_runtime,
                  sqlite_sessions_per_s=round(statistics.median(figures["sqlite"]), 1),
                  measured="8 dsh --profile sdk processes, each sent its session/new "
                           "requests at once; wall time from the first to the last answer")
