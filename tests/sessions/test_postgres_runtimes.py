"""Real ``dsh --profile sdk`` runtimes on separate homes sharing one PostgreSQL database
(``examples/postgres/patch.yml``, the DSN from ``DSH_POSTGRES_DSN``): what one starts the
other lists, refuses while the first runs, and resumes once it exits; twenty SIGKILLs
mid-turn leave the log contiguous; the database stopping mid-turn ends the turn with an
error, keeps every event a client received on the host, and stores them once it is back;
bad setup (unreachable, no password) stops the launch with one line and no password.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pgcluster
import pytest
from runtimeproc import OFFLINE_PATCH, REPO, RuntimeProcess

psycopg = pytest.importorskip("psycopg")

pytestmark = [pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
              pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")]

POSTGRES_PATCH = REPO / "examples" / "postgres" / "patch.yml"
BUSY = -32001


class Deployment:
    """Homes on one database: each runtime gets its home, the DSN and the test's schema."""

    def __init__(self, tmp: Path, dsn: str, schema: str) -> None:
        self.tmp = tmp
        self.dsn = dsn
        self.schema = schema
        self.schema_patch = tmp / "schema.yml"
        # Sessions stay with the runtime that ran them (idle_release_s): these tests are
        # about runtimes that hold them; test_an_idle_session_moves... about moving.
        self.schema_patch.write_text(json.dumps([{"id": "sessions", "merge": {"config": {
            "schema": schema, "lease_heartbeat_s": 0.2, "lease_expiry_s": 2,
            "idle_release_s": 600}}}]))

    def home(self, name: str) -> Path:
        home = self.tmp / name
        home.mkdir(mode=0o700, exist_ok=True)
        return home

    def start(self, home: Path, script: list[dict[str, Any]] | None = None,
              wrapper: tuple[str, ...] = ()) -> RuntimeProcess:
        patches = [OFFLINE_PATCH, POSTGRES_PATCH, self.schema_patch]
        if script is not None:
            path = self.tmp / f"script-{len(list(self.tmp.glob('script-*')))}.jsonl"
            path.write_text("".join(json.dumps(step) + "\n" for step in script))
            patch = path.with_suffix(".yml")
            patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {
                "script": str(path)}}}]))
            patches.append(patch)
        proc = RuntimeProcess("sdk", patches, cwd=Path.cwd(), wrapper=wrapper,
                              env={"DSH_HOME": str(home), "DSH_POSTGRES_DSN": self.dsn})
        proc.initialize(Path.cwd(), provider="scripted", model="scripted")
        return proc

    def log(self, session_id: str) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(f"SELECT seq, body FROM {self.schema}.events WHERE "
                                "session_id = %s ORDER BY seq", (session_id,)).fetchall()
        assert [seq for seq, _ in rows] == list(range(len(rows))), "a seq is skipped"
        return [json.loads(body) for _, body in rows]


@pytest.fixture
def deployment(pg_cluster: pgcluster.Cluster, pg_schema: str, tmp_path: Path) -> Deployment:
    return Deployment(tmp_path, pg_cluster.dsn(), pg_schema)


def blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def received(frames: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"
            and f["params"]["sessionId"] == session_id]


def until_idle(proc: RuntimeProcess, timeout: float = 30) -> list[dict[str, Any]]:
    return proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                      timeout=timeout)


def assert_busy(answer: dict[str, Any], pid: int) -> None:
    error = answer.get("error")
    assert error is not None and error["code"] == BUSY, answer
    assert error["data"]["holder"] == {"host": socket.gethostname(), "pid": pid}


def test_a_session_of_one_host_is_listed_refused_then_resumed_on_another(
        deployment: Deployment) -> None:
    first = deployment.start(deployment.home("a"))
    second = None
    try:
        first.request("session/prompt", {"sessionId": "shared",
                                                "contentBlocks": blocks("hello")})
        sent = received(until_idle(first), "shared")
        assert sent[-1]["type"] == "turn/end"
        second = deployment.start(deployment.home("b"))
        listed = second.call("session/list")["result"]["sessions"]
        assert [s["sessionId"] for s in listed] == ["shared"]
        assert_busy(second.call("session/resume", {"sessionId": "shared"}), first.proc.pid)
        assert_busy(second.call("session/prompt", {"sessionId": "shared",
                                                   "contentBlocks": blocks("me too")}),
                    first.proc.pid)
        history = second.call("session/history", {"sessionId": "shared"})["result"]
        assert history == {"events": sent, "nextCursor": None}  # reading needs no lease
        first.close_stdin()
        assert first.wait() == 0, first.stderr()
        assert second.call("session/resume", {"sessionId": "shared"})["result"] == {}
        second.request("session/prompt", {"sessionId": "shared",
                                          "contentBlocks": blocks("again")})
        more = received(until_idle(second), "shared")
        assert more[-1]["data"]["reason"]["kind"] == "completed"
        assert deployment.log("shared") == sent + more
        second.close_stdin()
        assert second.wait() == 0, second.stderr()
    finally:
        first.finish()
        if second is not None:
            second.finish()
    with psycopg.connect(deployment.dsn) as conn:  # clean exits release what they held
        assert conn.execute(f"SELECT count(*) FROM {deployment.schema}.session_leases"
                            ).fetchone()[0] == 0
        assert conn.execute(f"SELECT status FROM {deployment.schema}.sessions").fetchall() \
            == [("closed",)]


def test_twenty_sigkills_mid_turn_leave_every_log_contiguous(deployment: Deployment) -> None:
    """Runtimes on two homes take turns on two sessions; each is SIGKILLed after a random
    number of events. The next one takes the lease over (same host, the pid is gone),
    closes the interrupted turn, and goes on. Every event a client received is stored,
    exactly, and no seq is skipped or doubled."""
    script = [{"text": "Looking around.", "tool_calls": [{"name": "working_directory",
                                                          "arguments": {}}]},
              {"text": "A long answer that the test cuts off. " * 8, "delay_ms": 1500}]
    rng = random.Random(24)
    homes = [deployment.home("a"), deployment.home("b")]
    seen: dict[str, dict[int, dict[str, Any]]] = {"s1": {}, "s2": {}}
    for round_ in range(20):
        session = "s1" if round_ % 3 else "s2"
        proc = deployment.start(homes[round_ % 2], script)
        try:
            if seen[session]:
                assert "result" in proc.call("session/resume", {"sessionId": session},
                                             timeout=20), proc.stderr()
            proc.request("session/prompt", {"sessionId": session,
                                            "contentBlocks": blocks(f"round {round_}")})
            cut = rng.randint(1, 24)
            got: list[dict[str, Any]] = []
            deadline = time.monotonic() + 20
            while len(got) < cut and time.monotonic() < deadline:
                frame = proc.recv(max(0.01, deadline - time.monotonic()))
                got += received([frame], session)
                if got and got[-1]["type"] == "turn/end":
                    break
            proc.signal(signal.SIGKILL)
            proc.wait()
            got += [f["params"]["event"] for f in _drain(proc)
                    if f.get("method") == "session.event"
                    and f["params"]["sessionId"] == session]
        finally:
            proc.finish()
        for event in got:
            seen[session][event["seq"]] = event
        stored = deployment.log(session)
        for seq, event in seen[session].items():
            assert stored[seq] == event, (round_, seq)
    for session in seen:
        log = deployment.log(session)
        assert len(log) >= len(seen[session]) > 0
        assert sum(1 for e in log if e["type"] == "turn/start") >= 3


OTHER_HOST = "dsh-test-other-host"


def _other_host() -> tuple[str, ...] | None:
    """A wrapper running the runtime under another host name (its own UTS namespace), or
    None where this machine cannot make one (not root, no unshare)."""
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        return None
    wrapper = (unshare, "--uts", "sh", "-c", f'hostname {OTHER_HOST} && exec "$@"', "sh")
    probe = subprocess.run([*wrapper, "hostname"], capture_output=True, text=True)
    return wrapper if probe.stdout.strip() == OTHER_HOST else None


def test_another_host_waits_for_the_expiry_of_a_dead_holders_lease(
        deployment: Deployment) -> None:
    """The second runtime has a host name of its own, so a holder on "another host" is
    judged by its heartbeat alone: busy while the first runs, still busy right after the
    first is SIGKILLed (its pid cannot be probed from there), taken over once the lease
    expired (2 s here), with the log contiguous."""
    wrapper = _other_host()
    if wrapper is None:
        pytest.skip("cannot give a runtime another host name here (needs unshare --uts)")
    first = deployment.start(deployment.home("a"))
    second = None
    try:
        first.request("session/prompt", {"sessionId": "far", "contentBlocks": blocks("hi")})
        sent = received(until_idle(first), "far")
        second = deployment.start(deployment.home("b"), wrapper=wrapper)
        assert_busy(second.call("session/resume", {"sessionId": "far"}), first.proc.pid)
        first.signal(signal.SIGKILL)
        first.wait()
        assert_busy(second.call("session/resume", {"sessionId": "far"}), first.proc.pid)
        deadline = time.monotonic() + 30
        while "result" not in second.call("session/resume", {"sessionId": "far"}):
            assert time.monotonic() < deadline, second.stderr()
            time.sleep(0.2)
        with psycopg.connect(deployment.dsn) as conn:
            assert conn.execute(f"SELECT host FROM {deployment.schema}.session_leases WHERE "
                                "session_id = 'far'").fetchone() == (OTHER_HOST,)
        second.request("session/prompt", {"sessionId": "far", "contentBlocks": blocks("on")})
        more = received(until_idle(second), "far")
        assert deployment.log("far") == sent + more
    finally:
        first.finish()
        if second is not None:
            second.finish()


def _drain(proc: RuntimeProcess) -> list[dict[str, Any]]:
    """Frames still queued from a process that has exited."""
    out = []
    while True:
        try:
            out.append(proc.recv(0.2))
        except (EOFError, AssertionError):
            return out


def test_the_database_stopping_mid_turn_keeps_what_the_client_got(
        tmp_path: Path) -> None:
    bindir = pgcluster.find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl are not installed")
    cluster = pgcluster.Cluster(bindir)
    try:
        cluster.start()
        deployment = Deployment(tmp_path, cluster.dsn(), "outage")
        home = deployment.home("a")
        script = [{"text": "Looking.", "tool_calls": [{"name": "working_directory",
                                                       "arguments": {}}]},
                  {"text": "Answer written while the database is away.", "delay_ms": 2500},
                  {"text": "Back again."}]
        proc = deployment.start(home, script)
        try:
            proc.request("session/prompt", {"sessionId": "s", "contentBlocks": blocks("go")})
            frames = proc.until("session.event", lambda f: f["params"]["event"]["type"]
                                == "tool/result", timeout=30)
            cluster.stop("fast")  # every connection ends; nothing listens any more
            frames += until_idle(proc)
            got = received(frames, "s")
            end = got[-1]
            assert end["type"] == "turn/end", end
            assert end["data"]["reason"]["kind"] == "error"
            assert end["data"]["reason"]["error"]["code"] == "store-unavailable"
            assert "kept in the home's spool" in end["data"]["reason"]["error"]["message"]
            assert pgcluster.PASSWORD not in json.dumps(got)
            assert any(e["type"] == "assistant/delta" for e in got)
            spooled = list((home / "spool").glob("*.jsonl"))
            assert len(spooled) == 1
            kept = [json.loads(line)["event"]["seq"] for line in
                    spooled[0].read_text().splitlines() if '"event"' in line]
            assert kept and kept[-1] == end["seq"]
            answer = proc.call("session/list")
            assert answer["error"]["code"] == BUSY and "store-unavailable" in json.dumps(
                answer["error"]["data"])
            cluster.start()  # the same port: the runtime reconnects by itself
            deadline = time.monotonic() + 30
            while "result" not in proc.call("session/list"):
                assert time.monotonic() < deadline, proc.stderr()
                time.sleep(0.1)
            deadline = time.monotonic() + 30
            while list((home / "spool").glob("*.jsonl")):
                assert time.monotonic() < deadline, proc.stderr()
                time.sleep(0.1)
            assert deployment.log("s") == got
            proc.request("session/prompt", {"sessionId": "s", "contentBlocks": blocks(
                "and now?")})
            more = received(until_idle(proc), "s")
            assert more[-1]["data"]["reason"]["kind"] == "completed"
            assert deployment.log("s") == got + more
            assert pgcluster.PASSWORD not in proc.stderr()
            proc.close_stdin()
            assert proc.wait() == 0, proc.stderr()
        finally:
            proc.finish()
        other = deployment.start(deployment.home("b"))
        try:
            assert "result" in other.call("session/resume", {"sessionId": "s"})
            history = other.call("session/history", {"sessionId": "s"})["result"]
            assert history["events"] == got + more
        finally:
            other.finish()
    finally:
        cluster.destroy()


def test_bad_setup_stops_the_launch_with_one_line_and_no_password(
        run_dsh: Any, pg_cluster: pgcluster.Cluster) -> None:
    port = pg_cluster.port
    cases = [
        (f"postgresql://dsh:{pgcluster.PASSWORD}@127.0.0.1:1/dsh", 1,
         "cannot reach PostgreSQL at postgresql://127.0.0.1:1/dsh as dsh"),
        (f"postgresql://dsh@127.0.0.1:{port}/dsh", 2, "asks user 'dsh' for a password"),
        (None, 2, "config.dsn: no PostgreSQL DSN"),
    ]
    for dsn, code, words in cases:
        done = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch",
                       str(POSTGRES_PATCH), "hello", env={"DSH_POSTGRES_DSN": dsn})
        assert done.returncode == code, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], done.stderr
        assert pgcluster.PASSWORD not in done.stderr + done.stdout


def test_goals_are_kept_in_the_shared_database(deployment: Deployment) -> None:
    """tools-goals stores a goal through the PostgreSQL store, not in memory: a runtime on
    another home sees it once the session moves there."""
    script = [{"text": "Setting a goal.", "tool_calls": [{"name": "create_goal", "arguments": {
        "objective": "ship the postgres store", "max_goal_rounds": 3}}]},
        {"text": "Goal set."}]
    first = deployment.start(deployment.home("a"), script)
    try:
        first.request("session/prompt", {"sessionId": "g", "contentBlocks": blocks("plan")})
        got = received(until_idle(first), "g")
        result = next(e for e in got if e["type"] == "tool/result")
        text = result["data"]["message"]["content"][0]["text"]
        assert "in memory" not in text and '"goal_id": "g-1"' in text, text
        first.close_stdin()
        assert first.wait() == 0, first.stderr()
    finally:
        first.finish()
    with psycopg.connect(deployment.dsn) as conn:
        assert conn.execute(f"SELECT id, objective, status FROM {deployment.schema}.goals "
                            "WHERE session_id = 'g'").fetchall() == [
            ("g-1", "ship the postgres store", "active")]


def test_an_idle_session_moves_between_homes_and_comes_back(
        run_dsh: Any, deployment: Deployment) -> None:
    """Issue 30 across hosts: a session an SDK runtime on home a ran and left idle is
    continued by a headless run and an SDK runtime on home b; the first runtime is told
    ``session/moved`` and takes the session back with its next prompt."""
    deployment.schema_patch.write_text(json.dumps([{"id": "sessions", "merge": {"config": {
        "schema": deployment.schema, "lease_heartbeat_s": 0.1, "lease_expiry_s": 2,
        "idle_release_s": 0.2}}}]))
    script = [{"text": "ok"}] * 10

    def released(session_id: str) -> None:
        deadline = time.monotonic() + 20
        while True:
            with psycopg.connect(deployment.dsn) as conn:
                if conn.execute(f"SELECT 1 FROM {deployment.schema}.session_leases WHERE "
                                "session_id = %s", (session_id,)).fetchone() is None:
                    return
            assert time.monotonic() < deadline, "the lease was never given back"
            time.sleep(0.05)

    def turn(proc: RuntimeProcess, text: str) -> list[dict[str, Any]]:
        rid = proc.request("session/prompt", {"sessionId": "s", "contentBlocks": blocks(text)})
        frames = until_idle(proc)
        assert "result" in next(f for f in frames if f.get("id") == rid)
        return received(frames, "s")

    first = deployment.start(deployment.home("a"), script)
    second = None
    try:
        turn(first, "from home a")
        released("s")
        patch = deployment.tmp / "answers.yml"
        answers = deployment.tmp / "answers.jsonl"
        answers.write_text(json.dumps({"text": "answered on b"}) + "\n")
        patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {
            "script": str(answers)}}}]))
        done = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch",
                       str(POSTGRES_PATCH), "--patch", str(deployment.schema_patch),
                       "--patch", str(patch), "--session-id", "s", "from a terminal on b",
                       env={"DSH_HOME": str(deployment.home("b")),
                            "DSH_POSTGRES_DSN": deployment.dsn})
        assert done.returncode == 0, done.stderr
        assert done.stdout == "answered on b\n"
        moved = first.until("session.event", lambda f: f["params"]["event"]["type"]
                            == "session/moved", timeout=20)[-1]["params"]["event"]
        holder = moved["data"]["holder"]  # the terminal's run, or nobody once it exited
        assert holder is None or holder["pid"] != first.proc.pid, holder
        second = deployment.start(deployment.home("b"), script)
        turn(second, "from an SDK runtime on b")
        released("s")
        back = turn(first, "back on a")
        assert back[-1]["data"]["reason"]["kind"] == "completed"
        log = deployment.log("s")
        prompts = [e["data"]["content"][0]["text"] for e in log
                   if e["type"] == "user/message" and e["data"]["source"]["kind"] == "user"]
        assert prompts == ["from home a", "from a terminal on b", "from an SDK runtime on b",
                           "back on a"]
        [listed] = second.call("session/list")["result"]["sessions"]
        assert (listed["turns"], listed["title"]) == (4, "from home a")
    finally:
        first.finish()
        if second is not None:
            second.finish()
