"""The session stores: the SQLite database's appends and resumes as it fills, what one
runtime per session costs (taking a session's lease), and the PostgreSQL store
(``sessions-postgres``) beside SQLite's: append, resume and lease at 10,000 and 100,000
events, and sessions started per second by 8 runtimes on one database. Then what people
and long-lived runtimes meet (issue 30): ``dsh sessions list`` of 10,000 sessions, ``dsh
sessions show`` of a 100,000-event session in bounded memory, one runtime's memory after
10,000 one-turn sessions, and the time to take an idle session's lease back."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchlib.procs import PythonPass, installed_environ, median_ms, wall
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
    from dsh.runtime.agent.session import SessionRecord
    from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

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
    from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

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


# -- the PostgreSQL store beside SQLite's ------------------------------------------------------
#
# Each benchmark starts its own throwaway PostgreSQL cluster (tests/fixtures/pgcluster.py:
# initdb + pg_ctl on a loopback port, fsync on, as a deployment runs it) and removes it
# after. Without PostgreSQL's binaries or psycopg every row is skipped with the reason:
# SQLite is never measured in its place. Both stores run in the same loop, in balanced
# order, the store's defaults on each side (PostgreSQL: synchronous_commit off; SQLite:
# WAL, synchronous=NORMAL: the same promise, the last commits may go on a crash of the
# database's machine).

PG_SIZES_QUICK = (10_000,)
PG_APPENDS = 200


def _pg_why_not() -> str | None:
    """Why PostgreSQL cannot be measured here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'dsh-harness[postgres]')"
    if _pgcluster().find_bindir() is None:
        return "PostgreSQL's initdb and pg_ctl are not installed (Debian: postgresql)"
    return None


def _pgcluster() -> Any:
    import sys

    from benchlib.procs import FIXTURES

    if str(FIXTURES) not in sys.path:
        sys.path.insert(0, str(FIXTURES))
    import pgcluster

    return pgcluster


@contextlib.contextmanager
def _cluster() -> Iterator[Any]:
    pgcluster = _pgcluster()
    cluster = pgcluster.Cluster(pgcluster.find_bindir(), durable=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


def _open_stores(tmp: str, dsn: str) -> dict[str, Any]:
    from dsh.runtime.sessions.postgres.link import Link
    from dsh.runtime.sessions.postgres.store import PostgresSessionStore
    from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

    link = Link(dsn)
    link.adopt(link.connect())
    return {"postgres": PostgresSessionStore(link, schema_name="bench",
                                             home=Path(tmp, "pg-home"), profile="bench"),
            "sqlite": SqliteSessionStore(Path(tmp, "sessions.db"), profile="bench")}


def _grow(store: Any, session: str, size: int, have: int) -> None:
    """Fill ``session``'s log from ``have`` to ``size`` events, 1,000 per transaction."""
    for start in range(have, size, 1000):
        store.append_many(session, [_bench_event(seq)
                                    for seq in range(start, min(size, start + 1000))])


def _store_rows(opts: Options, size: int, append_row: Metric, resume_row: Metric,
                lease_row: Metric | None) -> list[Result]:
    """Append, resume (and lease) at a log of ``size`` events, both stores interleaved."""
    from benchlib.procs import balanced
    from dsh.runtime.agent.session import SessionRecord

    appends = opts.reps(PG_APPENDS, 60)
    loads = opts.reps(7, 3)
    with _cluster() as cluster, tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        stores = _open_stores(tmp, cluster.dsn())
        times: dict[str, dict[str, list[float]]] = {
            kind: {"append": [], "resume": [], "lease": []} for kind in stores}
        try:
            for store in stores.values():
                store.acquire("log")
                store.save(SessionRecord("log", tmp))
                _grow(store, "log", size, 0)
            for turn in range(loads):
                baseline.sample()
                for kind in balanced(list(stores), turn):
                    t0 = time.perf_counter()
                    record = stores[kind].load("log")
                    times[kind]["resume"].append(time.perf_counter() - t0)
                    if record is None or len(record.events) != size:
                        raise RuntimeError(f"{kind}: the log did not resume whole")
            for n in range(appends):  # the logs grow past ``size`` by these
                if n % 20 == 0:
                    baseline.sample()
                for kind in balanced(list(stores), n):
                    t0 = time.perf_counter()
                    stores[kind].append("log", _bench_event(size + n))
                    times[kind]["append"].append(time.perf_counter() - t0)
                    if lease_row is not None:
                        t0 = time.perf_counter()
                        stores[kind].acquire(f"lease-{n}")
                        times[kind]["lease"].append(time.perf_counter() - t0)
        finally:
            for store in stores.values():
                store.close()

    def ms3(samples: list[float]) -> float:
        return round(statistics.median(samples) * 1000, 3)

    pg, lite = times["postgres"], times["sqlite"]
    rows = [append_row.measure(ms3(pg["append"]), runs=appends,
                               python_pass_ms=baseline.median_ms, events=size,
                               sqlite_ms=ms3(lite["append"])),
            resume_row.measure(median_ms(pg["resume"]), runs=loads,
                               python_pass_ms=baseline.median_ms, events=size,
                               sqlite_ms=median_ms(lite["resume"]))]
    if lease_row is not None:
        rows.append(lease_row.measure(ms3(pg["lease"]), runs=appends,
                                      python_pass_ms=baseline.median_ms,
                                      sqlite_ms=ms3(lite["lease"])))
    return rows


_PG_CHANGES = ("the server's commit cost (its WAL writer; synchronous_commit, off by "
               "default), the loopback round trip (a database on another machine adds the "
               "network's), the lease check each append carries, load")
PG_APPEND_10K = Metric(
    "pg_append_10k", "ms", "<", 5,
    about="sessions-postgres: one fenced append (INSERT ... WHERE the lease row, FOR SHARE; "
          "its own committed transaction) to a session of 10,000 events, on a local "
          "PostgreSQL cluster over loopback TCP; SQLite's figure, same loop, in sqlite_ms.",
    changes=_PG_CHANGES + ". Target 5 ms: a model streams a delta every ~20 ms, and each "
            "is stored before it is sent.")
PG_RESUME_10K = Metric(
    "pg_resume_10k", "ms", "<", 500,
    about="sessions-postgres: load (the whole log read and replayed into a record, what "
          "session/resume does) of a session of 10,000 events; SQLite's in sqlite_ms.",
    changes="Reading and parsing the log (JSON of every event), the replay into messages, "
            "the round trips; load. Target 500 ms: a resume of a long session is a pause "
            "a user notices beyond half a second.")
PG_LEASE = Metric(
    "pg_lease_acquire", "ms", "<", 5,
    about="sessions-postgres: taking a free session lease (one conditional UPSERT, "
          "committed), as the agent does when a session is created or restored; SQLite's "
          "in sqlite_ms.",
    changes=_PG_CHANGES + ". Target 5 ms, as for session_lease_acquire (SQLite).")
PG_APPEND_100K = Metric(
    "pg_append_100k", "ms", "<", 5,
    about="As pg_append_10k, into a session of 100,000 events.",
    changes=_PG_CHANGES + "; the events table's index depth. Target as pg_append_10k.")
PG_RESUME_100K = Metric(
    "pg_resume_100k", "ms", "<", 3000,
    about="As pg_resume_10k, for a session of 100,000 events (far longer than a "
          "conversation: a long-lived agent's log).",
    changes="As pg_resume_10k, ten times the data. Target 3 s: linear growth from the "
            "10,000-event target with room for the larger working set.")


@benchmark("session_store_pg", PG_APPEND_10K, PG_RESUME_10K, PG_LEASE)
def session_store_pg(opts: Options) -> list[Result]:
    """PostgreSQL's append, resume and lease at 10,000 events, beside SQLite's."""
    why = _pg_why_not()
    if why is not None:
        return [PG_APPEND_10K.skip(why), PG_RESUME_10K.skip(why), PG_LEASE.skip(why)]
    return _store_rows(opts, 10_000, PG_APPEND_10K, PG_RESUME_10K, PG_LEASE)


@benchmark("session_store_pg_100k", PG_APPEND_100K, PG_RESUME_100K, full_only=True)
def session_store_pg_100k(opts: Options) -> list[Result]:
    """PostgreSQL's append and resume at 100,000 events, beside SQLite's."""
    why = _pg_why_not()
    if why is not None:
        return [PG_APPEND_100K.skip(why), PG_RESUME_100K.skip(why)]
    return _store_rows(opts, 100_000, PG_APPEND_100K, PG_RESUME_100K, None)


PG_RUNTIMES = 8
PG_STARTED = Metric(
    "pg_sessions_started", "sessions/s", ">=", 100,
    about="8 real `dsh --profile sdk` runtimes (python carrier, the offline and PostgreSQL "
          "patches) on one database, each sent 60 session/new requests at once (a lease "
          "taken and the session row written for each); sessions per second of wall time "
          "from the first request to the last answer. The same 8 runtimes on one home's "
          "sessions.db, in the same loop, in sqlite_sessions_per_s.",
    changes="The store's commits and round trips per session, the runtimes' event loops "
            "(8 processes on this machine's cores), the database server's CPU. Target "
            "100/s: a fleet starting sessions faster than one host's people could.")


class _Runtime:
    """A real ``dsh --profile sdk`` on pipes, sent pipelined ``session/new`` requests."""

    def __init__(self, patches: list[Path], environ: dict[str, str], cwd: str) -> None:
        import subprocess
        import sys

        argv = [sys.executable, "-m", "dsh", "--profile", "sdk"]
        for patch in patches:
            argv += ["--patch", str(patch)]
        self.proc = subprocess.Popen(argv, env=environ, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any]) -> None:
        from dsh.core import jsonrpc

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
                raise RuntimeError("a runtime exited before answering")
            frame = json.loads(line)
            if "id" in frame and "method" not in frame:
                out.append(frame)
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _started_per_second(patches: list[Path], environ: dict[str, str], cwd: str,
                        per_runtime: int) -> float:
    import threading

    runtimes = [_Runtime(patches, environ, cwd) for _ in range(PG_RUNTIMES)]
    try:
        for rt in runtimes:
            rt.send("initialize", {"cwd": cwd, "provider": "scripted", "model": "scripted"})
            if "result" not in rt.answers(1)[0]:
                raise RuntimeError("a runtime did not initialize")
        errors: list[str] = []
        gate = threading.Barrier(PG_RUNTIMES + 1)

        def drive(rt: _Runtime) -> None:
            gate.wait()
            for _ in range(per_runtime):
                rt.send("session/new", {"cwd": cwd})
            errors.extend(json.dumps(a) for a in rt.answers(per_runtime) if "result" not in a)

        threads = [threading.Thread(target=drive, args=(rt,)) for rt in runtimes]
        for thread in threads:
            thread.start()
        gate.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        wall_s = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"session/new failed: {errors[0][:300]}")
        return PG_RUNTIMES * per_runtime / wall_s
    finally:
        for rt in runtimes:
            rt.close()


@benchmark("pg_sessions_started", PG_STARTED)
def pg_sessions_started(opts: Options) -> Result:
    """Sessions started per second by 8 runtimes on one PostgreSQL database."""
    from benchlib.procs import OFFLINE_PATCH, ROOT, balanced

    why = _pg_why_not()
    if why is not None:
        return PG_STARTED.skip(why)
    postgres_patch = ROOT / "examples" / "postgres" / "patch.yml"
    per_runtime = opts.reps(60, 20)
    runs = opts.reps(3, 1)
    rates: dict[str, list[float]] = {"postgres": [], "sqlite": []}
    patches = {"postgres": [OFFLINE_PATCH, postgres_patch], "sqlite": [OFFLINE_PATCH]}
    with _cluster() as cluster, tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        environ["DSH_POSTGRES_DSN"] = cluster.dsn()
        for turn in range(runs):
            for kind in balanced(["postgres", "sqlite"], turn):
                rates[kind].append(_started_per_second(patches[kind], environ, tmp,
                                                       per_runtime))
    return PG_STARTED.measure(statistics.median(rates["postgres"]), runs=runs,
                              runtimes=PG_RUNTIMES, sessions_per_runtime=per_runtime,
                              sqlite_sessions_per_s=round(statistics.median(rates["sqlite"]),
                                                          1))


# -- what people and long-lived runtimes meet (issue 30) --------------------------------------


def _turn_events(start: int, turn: int, text: str) -> list[dict[str, Any]]:
    """One realistic turn of ten events from seq ``start`` (a prompt, two streamed deltas, a
    tool call and its result, the answer with its usage), about 2.5 KB of JSON."""
    from dsh.runtime.agent import events

    usage = {"inputTokens": 1800, "outputTokens": 120, "totalTokens": 1920,
             "cacheHitTokens": 1500, "cacheMissTokens": 300, "costUsd": 0.00031}
    prompt = events.user_message([events.text_block(text)], f"m-{start}")
    call = {"turn": turn, "step": 1, "callId": f"call_{start}", "name": "read_file",
            "arguments": json.dumps({"path": "src/main.py"})}
    result = events.tool_message(f"call_{start}", "line of the file\n" * 40, is_error=False)
    answer = events.assistant_message([events.text_block("## Done\n\nI read it. **All** "
                                                         "good:\n\n- one\n- two\n")],
                                      provider="bench", model="bench")
    made = [(events.TURN_START, {"turn": turn}), (events.USER_MESSAGE, prompt),
            (events.STEP_START, {"turn": turn, "step": 1}),
            (events.ASSISTANT_DELTA, {"turn": turn, "step": 1, "index": 0, "text": "I read"}),
            (events.TOOL_CALL, call),
            (events.TOOL_RESULT, events.placed(turn, 1, result)),
            (events.ASSISTANT_DELTA, {"turn": turn, "step": 2, "index": 0, "text": " it."}),
            (events.ASSISTANT_MESSAGE, {**events.placed(turn, 2, answer), "usage": usage}),
            (events.STEP_END, {"turn": turn, "step": 2}),
            (events.TURN_END, {"turn": turn, "reason": {"kind": "completed"}})]
    return [events.event(kind, start + n, data, {}) for n, (kind, data) in enumerate(made)]


def _fill(store: Any, session_id: str, cwd: str, count: int) -> None:
    """A session of ``count`` events (whole turns), written 1,000 at a time, left free."""
    from dsh.runtime.agent.session import SessionRecord

    store.acquire(session_id)
    store.save(SessionRecord(session_id, cwd))
    batch: list[dict[str, Any]] = []
    for start in range(0, count, 10):
        batch += _turn_events(start, start // 10 + 1, f"Task {start // 10} of {session_id}")
        if len(batch) >= 1000:
            store.append_many(session_id, batch)
            batch = []
    if batch:
        store.append_many(session_id, batch)
    store.release(session_id)


def _dsh(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "dsh", *args]


_PEAK_RSS = """
import os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, time.perf_counter() - t0)
"""
"""Runs the measured command and reports ``exit code, peak KiB, wall seconds``. Linux
counts a process's peak from its fork, so a child of this (large) bench process would
start at the bench's own resident size, whatever it later uses; a child of this small
interpreter starts at its ~10 MB instead, below any figure measured here."""


def _peak_rss_mib(argv: list[str], environ: dict[str, str], cwd: str) -> tuple[float, float]:
    """``(peak resident MiB, wall seconds)`` of one process run to completion, its output
    discarded (it must succeed). Linux: the kernel's high-water mark of the child, read by
    wait4 in a small interpreter that starts it (:data:`_PEAK_RSS`)."""
    import subprocess
    import sys

    if not sys.platform.startswith("linux"):
        raise RuntimeError("peak memory is read from wait4's rusage, measured on Linux")
    done = subprocess.run([sys.executable, "-I", "-c", _PEAK_RSS, *argv], env=environ,
                          cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=600, check=False)
    figures = done.stdout.split()
    if done.returncode != 0 or len(figures) != 3 or figures[0] != "0":
        said = figures[0] if figures else f"its starter {done.returncode}"
        raise RuntimeError(f"{' '.join(argv[2:])} exited {said}: {done.stderr[-300:]}")
    _, peak_kib, wall_s = figures
    return int(peak_kib) / 1024, float(wall_s)


LIST_SESSIONS = 10_000
SESSIONS_LIST = Metric(
    "sessions_list_10k", "ms", "<", 300,
    about="`dsh sessions list` (the whole process: the launcher, the profile's sessions row "
          "opened outside a runtime, the summaries read, 10,001 lines printed) on a home of "
          "10,000 sessions of one turn each, the home's profile launched once before (its "
          "layer cache warm, as any used home's is); `--json`'s figure in json_ms.",
    changes="The listing's imports (click, the config resolver, the store and the agent's "
            "record types), one indexed query and a dict per row, the formatting; the "
            "machine's load. Target 300 ms: issue 30.")


@benchmark("sessions_list_10k", SESSIONS_LIST)
def sessions_list_10k(opts: Options) -> Result:
    """Whole-process `dsh sessions list` of 10,000 stored sessions."""
    import subprocess

    from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

    runs = opts.reps(9, 3)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        home = Path(environ["DSH_HOME"])
        home.mkdir()
        store = SqliteSessionStore(home / "sessions.db", profile="sdk")
        try:
            for n in range(LIST_SESSIONS):
                _fill(store, f"{n:08x}-list-session", tmp, 10)
        finally:
            store.close()
        subprocess.run(_dsh("--profile", "sdk", "--dump-config"), env=environ, cwd=tmp,
                       stdout=subprocess.DEVNULL, check=True)
        listed = subprocess.run(_dsh("sessions", "list"), env=environ, cwd=tmp,
                                capture_output=True, text=True, check=True).stdout
        if len(listed.splitlines()) != LIST_SESSIONS + 1:
            raise RuntimeError(f"listed {len(listed.splitlines()) - 1} sessions, not "
                               f"{LIST_SESSIONS}")
        baseline = PythonPass(environ, tmp)
        text, as_json = [], []
        for _ in range(runs):
            baseline.sample()
            text.append(wall(_dsh("sessions", "list"), environ, tmp))
            as_json.append(wall(_dsh("sessions", "list", "--json"), environ, tmp))
    return SESSIONS_LIST.measure(median_ms(text), runs=runs, python_pass_ms=baseline.median_ms,
                                 sessions=LIST_SESSIONS, json_ms=median_ms(as_json))


SHOW_EVENTS = 100_000
SESSIONS_SHOW = Metric(
    "sessions_show_100k_rss", "MB", "<", 64,
    about="Peak resident memory (MiB, the kernel's high-water mark) of `dsh sessions show` "
          "of a session of 100,000 events (10,000 turns, 65 MB of sessions.db) printed as text "
          "to /dev/null; --json's peak in json_mb, a 1,000-event session's in small_mb "
          "(bounded: the same), and the 100,000-event show's wall time in seconds.",
    changes="The page the transcript reads at a time (500 events, 4 MiB at most) and what "
            "the renderer keeps between events (a turn's usage), the CLI's imports; not "
            "the log's length. Target 64 MB: the listing's process plus a page.")


@benchmark("sessions_show_100k", SESSIONS_SHOW)
def sessions_show_100k(opts: Options) -> Result:
    """Peak RSS of `dsh sessions show` of a 100,000-event session, beside 1,000 events."""
    import subprocess

    from dsh.runtime.sessions.sqlite_store import SqliteSessionStore

    runs = opts.reps(3, 1)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        home = Path(environ["DSH_HOME"])
        home.mkdir()
        store = SqliteSessionStore(home / "sessions.db", profile="sdk")
        try:
            _fill(store, "long", tmp, SHOW_EVENTS)
            _fill(store, "short", tmp, 1000)
        finally:
            store.close()
        subprocess.run(_dsh("--profile", "sdk", "--dump-config"), env=environ, cwd=tmp,
                       stdout=subprocess.DEVNULL, check=True)
        long_mb, json_mb, short_mb, seconds = [], [], [], []
        for _ in range(runs):
            peak, took = _peak_rss_mib(_dsh("sessions", "show", "long"), environ, tmp)
            long_mb.append(peak)
            seconds.append(took)
            json_mb.append(_peak_rss_mib(_dsh("sessions", "show", "long", "--json"),
                                         environ, tmp)[0])
            short_mb.append(_peak_rss_mib(_dsh("sessions", "show", "short"), environ, tmp)[0])
    return SESSIONS_SHOW.measure(round(statistics.median(long_mb), 1), runs=runs,
                                 events=SHOW_EVENTS,
                                 json_mb=round(statistics.median(json_mb), 1),
                                 small_mb=round(statistics.median(short_mb), 1),
                                 show_s=round(statistics.median(seconds), 2))


RSS_SESSIONS = 10_000
RUNTIME_RSS = Metric(
    "runtime_rss_10k_sessions", "MB", "<", 56,
    about="Resident memory of one `dsh --profile sdk` runtime (python carrier, scripted "
          "model) after 10,000 one-turn sessions, each a new session id prompted once, 16 "
          "in flight; its figure after 1,000 sessions in at_1k_mb and the growth between "
          "in growth_mb (bounded: sessions whose work ended give their lease back and are "
          "unloaded past max_idle_sessions; what grows is the scripted model's position "
          "per session, about 100 bytes, and the allocator's fragmentation).",
    changes="What a session leaves in memory once unloaded (the agent's tables, the store's "
            "bookkeeping, plugins' per-session state), idle_release_s (2 s: at 80 sessions "
            "a second, 160 sessions are within their grace) and max_idle_sessions (32), "
            "SQLite's page cache (2 MiB); the interpreter. Target 56 MB: runtime_idle_rss's "
            "40 plus 16 for those sessions and caches (issue 30: bounded, where 600 "
            "sessions used to add 32 MB).")


@benchmark("runtime_rss_10k_sessions", RUNTIME_RSS, full_only=True)
def runtime_rss_10k_sessions(opts: Options) -> Result:
    """RSS of one runtime after 10,000 one-turn sessions, beside its RSS at 1,000."""
    from benchlib.procs import rss_mb
    from benchlib.rpc import Rpc

    window = 16
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        script = Path(tmp, "answers.jsonl")
        script.write_text(json.dumps({"text": "ok", "usage": {"inputTokens": 10,
                                                              "outputTokens": 1}}) + "\n")
        patch = Path(tmp, "answers.yml")
        patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {
            "script": str(script)}}}]))
        import sys

        rpc = Rpc("sdk", installed_environ(tmp), tmp,
                  [sys.executable, "-m", "dsh", "--patch", str(patch)])
        try:
            if "result" not in rpc.call("initialize", {"cwd": tmp, "provider": "scripted",
                                                       "model": "scripted"}):
                raise RuntimeError("the runtime did not initialize")
            at: dict[int, float] = {}
            sent = done = 0
            pending: set[str] = set()
            t0 = time.perf_counter()
            while done < RSS_SESSIONS:
                while sent < RSS_SESSIONS and len(pending) < window:
                    session_id = f"one-turn-{sent}"
                    rpc.send("session/prompt", {"sessionId": session_id, "contentBlocks": [
                        {"type": "text", "text": "hello"}]})
                    pending.add(session_id)
                    sent += 1
                rpc.flush()
                frame = rpc.read()
                if "error" in frame:
                    raise RuntimeError(f"a prompt failed: {json.dumps(frame)[:300]}")
                params = frame.get("params") or {}
                if (frame.get("method") == "session.status" and params.get("status") == "idle"
                        and params.get("sessionId") in pending):
                    pending.discard(params["sessionId"])
                    done += 1
                    if done in (1_000, RSS_SESSIONS):
                        at[done] = rss_mb(rpc.proc.pid)
            took = time.perf_counter() - t0
        finally:
            rpc.close()
    return RUNTIME_RSS.measure(round(at[RSS_SESSIONS], 1), sessions=RSS_SESSIONS,
                               at_1k_mb=round(at[1_000], 1),
                               growth_mb=round(at[RSS_SESSIONS] - at[1_000], 1),
                               sessions_per_s=round(RSS_SESSIONS / took, 1))


TAKE_BACK = Metric(
    "session_take_back", "ms", "<", 20,
    about="A real `dsh --profile sdk` runtime (sessions-sqlite, idle_release_s 0.05): the "
          "round trip of a session/prompt on a session it gave back after its last turn "
          "(its lease re-taken, its stored version compared with the copy in memory, the "
          "prompt queued) until the messageId answer; a runtime/status round trip in the "
          "same loop, the floor of any request, in status_ms.",
    changes="The lease UPSERT and the version read (a commit of sessions.db), the server's "
            "request path; the disk's commit cost, load. Target 20 ms: issue 30.")


@benchmark("session_take_back", TAKE_BACK)
def session_take_back(opts: Options) -> Result:
    """Round trip of a prompt that takes an idle session's lease back."""
    import sqlite3
    import sys

    from benchlib.rpc import Rpc

    runs = opts.reps(30, 8)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        script = Path(tmp, "answers.jsonl")
        script.write_text((json.dumps({"text": "ok"}) + "\n") * (runs + 2))
        patch = Path(tmp, "take-back.yml")
        patch.write_text(json.dumps([
            {"id": "llm-scripted", "merge": {"config": {"script": str(script)}}},
            {"id": "sessions", "merge": {"config": {"idle_release_s": 0.05}}}]))
        baseline = PythonPass(environ, tmp)
        rpc = Rpc("sdk", environ, tmp, [sys.executable, "-m", "dsh", "--patch", str(patch)])
        db = None
        try:
            rpc.call("initialize", {"cwd": tmp, "provider": "scripted", "model": "scripted"})
            db = sqlite3.connect(Path(environ["DSH_HOME"], "sessions.db"), timeout=10)

            def turn() -> float:
                """Prompt session "back"; the answer's round trip, then wait for idle."""
                t0 = time.perf_counter()
                wanted = rpc.send("session/prompt", {"sessionId": "back", "contentBlocks": [
                    {"type": "text", "text": "again"}]})
                rpc.flush()
                answered = None
                while True:
                    frame = rpc.read()
                    if frame.get("id") == wanted:
                        if "result" not in frame:
                            raise RuntimeError(f"the prompt failed: {frame}")
                        answered = time.perf_counter() - t0
                    params = frame.get("params") or {}
                    if answered is not None and frame.get("method") == "session.status" \
                            and params.get("status") == "idle":
                        return answered

            def given_back() -> None:
                deadline = time.monotonic() + 10
                while db.execute("SELECT 1 FROM session_leases WHERE session_id = 'back'"
                                 ).fetchone() is not None:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the idle session's lease was never given back")
                    time.sleep(0.01)

            turn()
            back, status = [], []
            for _ in range(runs):
                given_back()
                baseline.sample()
                back.append(turn())
                t0 = time.perf_counter()
                rpc.call("runtime/status")
                status.append(time.perf_counter() - t0)
        finally:
            if db is not None:
                db.close()
            rpc.close()
    return TAKE_BACK.measure(median_ms(back), runs=runs, python_pass_ms=baseline.median_ms,
                             status_ms=median_ms(status))
