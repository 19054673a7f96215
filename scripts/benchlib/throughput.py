"""How much one runtime carries: small pipelined requests, one very large frame, and
turns completed with many sessions at once."""

from __future__ import annotations

import statistics
import tempfile
import threading
import time

from benchlib.procs import PythonPass, installed_environ, ms
from benchlib.registry import Metric, Options, Result, benchmark
from benchlib.rpc import Rpc

REQUESTS = Metric(
    "sdk_throughput", "requests/s", ">=", 10000,
    about="Small requests (`runtime/status`) pipelined to one sdk-minimal runtime and "
          "answered, counted round trip per second; answers read while requests are "
          "still being written.",
    changes="The runtime's per-frame cost (JSON decode and encode, dispatch, the write "
            "buffer's backpressure), CPU speed and load. Target 10,000/s: issue 3.")


@benchmark("sdk_throughput", REQUESTS)
def sdk_throughput(opts: Options) -> Result:
    """Small pipelined requests (``runtime/status``) answered per second, round trip."""
    count = opts.reps(20000, 5000)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        rpc = Rpc("sdk-minimal", installed_environ(tmp), tmp)
        try:
            rpc.call("initialize", {"cwd": tmp})

            def drain() -> None:
                answered = 0
                while answered < count:
                    if "id" in rpc.read():
                        answered += 1

            # The runtime bounds its unsent output and stops reading when a peer does not
            # read (backpressure), hence a reader running while the requests are written.
            reader = threading.Thread(target=drain, daemon=True)
            t0 = time.perf_counter()
            reader.start()
            for _ in range(count):
                rpc.send("runtime/status")
            rpc.flush()
            reader.join()
            elapsed = time.perf_counter() - t0
        finally:
            rpc.close()
    return REQUESTS.measure(count / elapsed, requests=count)


BIG_FRAME = Metric(
    "big_frame", "ms", "<", 2000,
    about="A 10 MiB prompt sent to an sdk-minimal runtime until its receipt "
          "(agent/inbox/spliced, carrying the same text) is read back; compared byte for "
          "byte (a changed echo fails the row whatever the time).",
    changes="JSON encode/decode of large strings on both sides, pipe buffer sizes, the "
            "frame cap's checks, memory bandwidth. Target 2 s: issue 3.")


@benchmark("big_frame", BIG_FRAME)
def big_frame(opts: Options) -> Result:
    """A 10 MiB prompt in, its receipt (carrying the same text) out, compared byte for byte."""
    text = "x" * (10 * 1024 * 1024)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        baseline.sample(3)
        rpc = Rpc("sdk-minimal", environ, tmp)
        try:
            rpc.call("initialize", {"cwd": tmp})
            t0 = time.perf_counter()
            rpc.send("session/prompt", {"sessionId": "big", "contentBlocks": [
                {"type": "text", "text": text}]})
            rpc.flush()
            while True:
                frame = rpc.read()
                event = frame.get("params", {}).get("event", {})
                if event.get("type") == "agent/inbox/spliced":
                    echoed = event["data"]["inserted"][0]["content"][0]["text"]
                    break
            elapsed = time.perf_counter() - t0
        finally:
            rpc.close()
        baseline.sample(3)
    intact = echoed == text
    return BIG_FRAME.measure(ms(elapsed), python_pass_ms=baseline.median_ms, bytes=len(text),
                             intact=intact, **({} if intact else {"ok": False}))


SESSION_COUNTS = (1, 4, 16, 64)
SESSIONS = Metric(
    "sdk_sessions_throughput", "ratio", ">=", 0.8,
    about="Turns completed per second by one runtime (sdk profile, the offline script: "
          "three model calls and two tool calls a turn) with 1, 4, 16 and 64 sessions "
          "prompted at once; the rate at 64 over the rate at 1.",
    changes="Per-session work that grows with the number of sessions (listeners, the "
            "sessions database's writes), the event loop's scheduling; cores.")


def _turns(rpc: Rpc, sessions: int) -> float:
    """Prompt ``sessions`` fresh sessions at once and wait until every turn completed;
    the seconds from the first prompt sent to the last session idle."""
    blocks = [{"type": "text", "text": "where am I?"}]
    ids = [rpc.call("session/new")["result"]["sessionId"] for _ in range(sessions)]
    busy = set(ids)
    t0 = time.perf_counter()
    for session in ids:
        rpc.send("session/prompt", {"sessionId": session, "contentBlocks": blocks})
    rpc.flush()
    while busy:
        frame = rpc.read()
        params = frame.get("params") or {}
        event = params.get("event") or {}
        if event.get("type") == "turn/end" and event["data"]["reason"]["kind"] != "completed":
            raise RuntimeError(f"a turn ended {event['data']['reason']}")
        if frame.get("method") == "session.status" and params.get("status") == "idle":
            busy.discard(params.get("sessionId"))
    return time.perf_counter() - t0


@benchmark("sdk_sessions_throughput", SESSIONS, full_only=True)
def sdk_sessions_throughput(opts: Options) -> Result:
    """Turns per second with 1 to 64 sessions prompted at once; 64 over 1."""
    points = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        rpc = Rpc("sdk", installed_environ(tmp), tmp)
        try:
            if "result" not in rpc.call("initialize", {"cwd": tmp}):
                raise RuntimeError("initialize failed")
            _turns(rpc, 4)  # imports and first-use costs; not counted
            for sessions in SESSION_COUNTS:
                rounds = max(3, 64 // sessions)
                rates = [sessions / _turns(rpc, sessions) for _ in range(rounds)]
                points.append({"sessions": sessions, "turns_per_s": round(
                    statistics.median(rates), 1), "rounds": rounds})
        finally:
            rpc.close()
    rate = {p["sessions"]: p["turns_per_s"] for p in points}
    return SESSIONS.measure(rate[64] / rate[1], runs=points[-1]["rounds"], points=points)
