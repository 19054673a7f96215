"""The web server (``dsh web``): start to its first answer, what streaming over HTTP
adds to the first token beside the SDK's stdio, and how fast it answers while hundreds of
event streams replay a big session."""

from __future__ import annotations

import http.client
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from benchlib.procs import OFFLINE_PATCH, PythonPass, installed_environ, median_ms
from benchlib.registry import Metric, Options, Result, benchmark
from benchlib.rpc import Rpc


class _Web:
    """A spawned ``dsh web --port 0`` and stdlib HTTP to it (the announcement line on its
    stdout gives the port and token)."""

    def __init__(self, environ: dict[str, str], cwd: str, *patches: str) -> None:
        argv = [sys.executable, "-m", "dsh", "web", "--patch", str(OFFLINE_PATCH)]
        for patch in patches:
            argv += ["--patch", patch]
        argv += ["--port", "0"]
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=environ, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        info = json.loads(self.proc.stdout.readline())
        self.port, self.token = info["port"], info["token"]
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def call(self, conn: http.client.HTTPConnection, method: str, path: str,
             body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, body=data, headers=self.headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


START = Metric(
    "web_start_to_200", "ms", "<", 1000,
    about="`dsh web --port 0` (python carrier, offline patch) spawned to the first 200 "
          "on `GET /api/tools`.",
    changes="The web profile's boot (the HTTP server's imports, its plugins), the "
            "interpreter's start, CPU speed and load. Target 1 s.")


@benchmark("web_start_to_200", START)
def web_start_to_200(opts: Options) -> Result:
    """Spawn ``dsh web --port 0`` to the first 200 on ``GET /api/tools``."""
    runs = opts.reps(11, 2)
    figures = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        for run in range(runs + 1):  # the first round seeds the profile and bytecode
            if run:
                baseline.sample()
            web = _Web(environ, tmp)
            try:
                conn = web.connection()
                status, _ = web.call(conn, "GET", "/api/tools")
                figures.append(time.perf_counter() - web.t0)
                conn.close()
                if status != 200:
                    raise RuntimeError(f"GET /api/tools answered {status}")
            finally:
                web.close()
    return START.measure(median_ms(figures[1:]), runs=runs, python_pass_ms=baseline.median_ms)


def _sse_until_delta(response: Any) -> None:
    """Read SSE lines until the first ``assistant/delta`` event."""
    while True:
        line = response.readline()
        if not line:
            raise RuntimeError("the event stream ended before the first delta")
        if line.startswith(b"data:") and b'"type":"assistant/delta"' in line:
            return


FIRST_TOKEN = Metric(
    "web_first_token_overhead", "ms", "<", 20,
    about="First streamed assistant delta after a prompt: web (POST + SSE) minus SDK "
          "(stdio), same scripted provider and script, a fresh session per prompt.",
    changes="The HTTP stack's per-request cost and SSE flushing against a stdio frame; "
            "load. Target 20 ms.")


def _sdk_first_delta(environ: dict[str, str], tmp: str, rounds: int) -> list[float]:
    blocks = [{"type": "text", "text": "where am I?"}]
    times = []
    rpc = Rpc("sdk", environ, tmp)
    try:
        if "result" not in rpc.call("initialize", {"cwd": tmp}):
            raise RuntimeError("initialize failed")
        for _ in range(rounds):
            session = rpc.call("session/new")["result"]["sessionId"]
            t0 = time.perf_counter()
            rpc.send("session/prompt", {"sessionId": session, "contentBlocks": blocks})
            rpc.flush()
            first = None
            while True:
                frame = rpc.read()
                params = frame.get("params") or {}
                if params.get("sessionId") != session:
                    continue
                if first is None and frame.get("method") == "session.event" and \
                        params["event"]["type"] == "assistant/delta":
                    first = time.perf_counter() - t0
                if frame.get("method") == "session.status" and params["status"] == "idle":
                    break
            if first is None:
                raise RuntimeError("a turn ended without an assistant delta")
            times.append(first)
    finally:
        rpc.close()
    return times


def _web_first_delta(environ: dict[str, str], tmp: str, rounds: int) -> list[float]:
    blocks = [{"type": "text", "text": "where am I?"}]
    times = []
    web = _Web(environ, tmp)
    try:
        control = web.connection()
        for _ in range(rounds):
            _, created = web.call(control, "POST", "/api/sessions", {})
            session = created["sessionId"]
            stream = web.connection()
            stream.request("GET", f"/api/sessions/{session}/events", headers=web.headers)
            events = stream.getresponse()
            t0 = time.perf_counter()
            status, _ = web.call(control, "POST", f"/api/sessions/{session}/prompt",
                                 {"contentBlocks": blocks})
            _sse_until_delta(events)
            times.append(time.perf_counter() - t0)
            if status != 202:
                raise RuntimeError(f"POST prompt answered {status}")
            stream.close()
            # The rest of the turn is not timed: cancel whatever is left of it and wait
            # until the session is idle again.
            web.call(control, "POST", f"/api/sessions/{session}/cancel", {})
            deadline = time.monotonic() + 30
            while any(s["status"] != "idle"
                      for s in web.call(control, "GET", "/api/sessions")[1]["sessions"]):
                if time.monotonic() > deadline:
                    raise RuntimeError("a cancelled turn was not idle within 30 s")
                time.sleep(0.01)
        control.close()
    finally:
        web.close()
    return times


@benchmark("web_first_token_overhead", FIRST_TOKEN)
def web_first_token_overhead(opts: Options) -> Result:
    """First streamed delta: web (POST + SSE) minus SDK (stdio), same script."""
    runs = opts.reps(31, 5)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        baseline.sample(3)
        sdk_times = _sdk_first_delta(environ, tmp, runs + 1)
        baseline.sample(3)
        web_times = _web_first_delta(environ, tmp, runs + 1)
        baseline.sample(3)
    sdk_ms, web_ms = median_ms(sdk_times[1:]), median_ms(web_times[1:])
    return FIRST_TOKEN.measure(round(web_ms - sdk_ms, 2), runs=runs,
                               python_pass_ms=baseline.median_ms, web_first_delta_ms=web_ms,
                               sdk_first_delta_ms=sdk_ms)


STATUS_UNDER_STREAMS = Metric(
    "web_status_under_streams", "ms", "<", 100,
    about="`GET /api/status` while 300 event streams (raw sockets read by one thread) "
          "replay a session of about 40,000 events (one long scripted answer streamed a "
          "character at a time): the slowest of the answers taken every 20 ms from the "
          "moment every stream has its response headers until every stream has caught up "
          "(the median and the count are given beside it).",
    changes="How replaying streams share the work (one encoding of each history page for "
            "all streams, a few pages per pass of the event loop), the HTTP stack's cost "
            "per request, CPU speed and load. Target 100 ms (issue 34: 29 s before).")
_STREAMS = 300
_EVENTS = 40_000


def _stream_readers(web: _Web, session: str) -> tuple[threading.Thread, dict[str, Any]]:
    """``_STREAMS`` raw event streams of ``session`` read (and dropped) by one thread until
    each has sent its first ``session.status`` (what follows the history replay)."""
    selector = selectors.DefaultSelector()
    state: dict[str, Any] = {"headers": 0, "caught_up": 0, "error": None, "socks": []}
    request = (f"GET /api/sessions/{session}/events?token={web.token} HTTP/1.0\r\n"
               f"Host: 127.0.0.1:{web.port}\r\n\r\n").encode()
    tails: dict[int, bytes] = {}
    headed: set[int] = set()
    for index in range(_STREAMS):
        sock = socket.create_connection(("127.0.0.1", web.port))
        sock.sendall(request)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, index)
        state["socks"].append(sock)
        tails[index] = b""

    def run() -> None:
        try:
            while state["caught_up"] < _STREAMS:
                for key, _ in selector.select(30) or [(None, None)]:
                    if key is None:
                        raise RuntimeError("no stream sent anything for 30 s")
                    data = key.fileobj.recv(1 << 20)
                    if not data:
                        raise RuntimeError("an event stream closed before catching up")
                    tail = tails[key.data] + data
                    if key.data not in headed and b"\r\n\r\n" in tail:
                        headed.add(key.data)
                        state["headers"] += 1
                    if b"event: session.status" in tail:
                        state["caught_up"] += 1
                        selector.unregister(key.fileobj)
                    tails[key.data] = tail[-64:]
        except Exception as exc:  # reported by the benchmark
            state["error"] = exc
        finally:
            selector.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, state


@benchmark("web_status_under_streams", STATUS_UNDER_STREAMS)
def web_status_under_streams(opts: Options) -> Result:
    """``/api/status`` while 300 streams replay a big session's history."""
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        baseline.sample(3)
        script = os.path.join(tmp, "long.json")
        with open(script, "w") as f:
            json.dump([{"text": "x" * _EVENTS}], f)
        patch = os.path.join(tmp, "long.yml")
        with open(patch, "w") as f:
            json.dump([{"id": "llm-scripted", "merge": {"config": {
                "script": script, "chunk_size": 1}}}], f)
        web = _Web(environ, tmp, patch)
        try:
            conn = web.connection()
            _, created = web.call(conn, "POST", "/api/sessions", {})
            session = created["sessionId"]
            web.call(conn, "POST", f"/api/sessions/{session}/prompt",
                     {"contentBlocks": [{"type": "text", "text": "go"}]})
            deadline = time.monotonic() + 300
            while web.call(conn, "GET", "/api/sessions")[1]["sessions"][0]["status"] != "idle":
                if time.monotonic() > deadline:
                    raise RuntimeError("the long turn did not end within 300 s")
                time.sleep(0.2)
            thread, state = _stream_readers(web, session)
            try:
                while state["headers"] < _STREAMS and thread.is_alive():
                    time.sleep(0.005)
                samples = []
                while thread.is_alive():
                    t0 = time.perf_counter()
                    status, _ = web.call(conn, "GET", "/api/status")
                    samples.append(time.perf_counter() - t0)
                    if status != 200:
                        raise RuntimeError(f"GET /api/status answered {status}")
                    time.sleep(0.02)
                if state["error"] is not None:
                    raise RuntimeError(f"event streams: {state['error']}")
            finally:
                thread.join(60)
                for sock in state["socks"]:
                    sock.close()
            conn.close()
        finally:
            web.close()
        baseline.sample(3)
    if not samples:
        return STATUS_UNDER_STREAMS.skip("the streams caught up before a status was asked")
    return STATUS_UNDER_STREAMS.measure(
        round(max(samples) * 1000, 2), runs=len(samples), python_pass_ms=baseline.median_ms,
        median_ms=median_ms(samples), streams=_STREAMS)
