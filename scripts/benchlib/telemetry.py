"""What OpenTelemetry costs a turn: on (exporting to a collector), off, and with the
collector down.

Each row runs real Kernels in process with the dsh-base agent slice (agent-core on SQLite
sessions, the scripted model, ``working_directory``, the policy), as
:mod:`benchlib.agent` does, the time spent inside the model taken out. A turn is four
model requests and three tool calls. The sides compared run in one loop in balanced
order, a fresh kernel (and, on, a fresh exporter) per session:

* ``off``: the shipped ``telemetry`` row present, no endpoint set (it registers nothing);
* ``on``: the row exporting spans and metrics over OTLP/HTTP to a local collector (a
  small HTTP server in its own process answering every export with 200);
* ``down``: the row exporting to a port where nothing listens.

Without the OpenTelemetry packages (the ``otel`` extra) the rows that export are skipped,
saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchlib.agent import AGENT_STEPS, agent_rows, timed_model
from benchlib.procs import PythonPass, balanced, installed_environ, median_ms, ms
from benchlib.registry import Metric, Options, Result, benchmark

TURNS = 20
"""Turns in one measured session (the first one warms the exporter and is left out)."""
CALLS = 3
"""Tool calls in one turn (then the answer)."""
OFF_ROW = {"id": "telemetry", "name": "telemetry-otel", "config": {"enabled": "auto"}}

_COLLECTOR = """\
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


@contextmanager
def _collector() -> Iterator[str]:
    """A stand-in OTLP/HTTP collector in its own process; yields its base URL."""
    proc = subprocess.Popen([sys.executable, "-c", _COLLECTOR], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{proc.stdout.readline().strip()}"
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _row(endpoint: str) -> dict[str, Any]:
    return {"id": "telemetry", "name": "telemetry-otel",
            "config": {"enabled": True, "endpoint": endpoint}}


async def _turns(tmp: str, script: str, extra: list[dict[str, Any]],
                 cpu_figures: list[float]) -> list[float]:
    """Seconds of agent work (model time excluded) of each turn of one TURNS-turn session;
    ``cpu_figures`` gets each turn's CPU time on the loop's thread (the model's included,
    the same on every side: the scripted model answers at once)."""
    from dsh.runtime.kernel.kernel import Kernel

    rows = agent_rows(script, sessions=True, steps=CALLS + 1) + extra
    kernel = Kernel(rows, profile="bench", home=tmp, cwd=tmp, env={})
    kernel.load()
    await kernel.start()
    try:
        agent = kernel.context.service("agent")
        spent = timed_model(kernel.context.service("llm:scripted"))
        idle = asyncio.Event()
        agent.add_listener(lambda method, params: method == "session.status"
                           and params["status"] == "idle" and idle.set())
        session = f"bench-{time.monotonic_ns()}"
        figures = []
        for _ in range(TURNS):
            idle.clear()
            spent[0] = 0.0
            t0, cpu = time.perf_counter(), time.thread_time()
            await agent.prompt(session, [{"type": "text", "text": "go"}])
            await idle.wait()
            figures.append(time.perf_counter() - t0 - spent[0])
            cpu_figures.append(time.thread_time() - cpu)
        kinds = [e["data"]["reason"]["kind"] for e in agent.history(session)
                 if e["type"] == "turn/end"]
        if kinds != ["completed"] * TURNS:
            raise RuntimeError(f"a session's turns ended {kinds}")
        del cpu_figures[-TURNS]  # the first turn, as for the wall times
        return figures[1:]
    finally:
        await kernel.dispose()


def _exports() -> str | None:
    """Why the exporting rows cannot run here, or None."""
    import importlib.util

    try:
        found = all(importlib.util.find_spec(m) is not None for m in (
            "opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))
    except ImportError:
        found = False
    if not found:
        return "the OpenTelemetry packages are not installed (pip install 'dsh-harness[otel]')"
    return None


TURN = Metric(
    "telemetry_turn_overhead", "ms", "<", 1.0,
    about="What exporting telemetry adds to one agent turn (4 model requests, 3 tool calls; "
          "model time excluded): the median turn with the telemetry row exporting spans and "
          "metrics over OTLP/HTTP to a local collector, minus the median turn with the row "
          "off; real Kernels, SQLite sessions, in process, the sides interleaved.",
    changes="The hooks' work per event (span starts and ends, metric records, the payload "
            "copies the agent makes for hooks), the SDK's batch processor and its export "
            "thread, CPU speed and load. Target 1 ms a turn (issue 34).")
DOWN = Metric(
    "telemetry_collector_down", "ms", "<", 1.0,
    about="The slowest turns (95th percentile) with the telemetry row exporting to a port "
          "where no collector listens, minus the slowest turns (95th percentile) with the "
          "row off; the medians' difference and the slowest single turns are reported "
          "beside it; same sessions as telemetry_turn_overhead.",
    changes="Whether anything of exporting waits on the network in a turn (it must not: "
            "exports run on the SDK's threads, with a bounded queue), the export thread's "
            "retries competing for the CPU, load. Target 1 ms (issue 34: no turn slower than "
            "with telemetry off by more than the per-turn target).")
OFF = Metric(
    "telemetry_off_step_overhead", "ms/step", "<", 0.1,
    about="The agent's cost of one tool-calling step (as agent_step_overhead, 100-step "
          "sessions) with the shipped telemetry row present and off, minus the same without "
          "the row, interleaved.",
    changes="Anything telemetry does when no endpoint is set (it must register no hook and "
            "import nothing); noise. Target 0.1 ms/step: off is free.")


@benchmark("telemetry_turn", TURN, DOWN)
def telemetry_turn(opts: Options) -> list[Result]:
    """Per-turn cost of telemetry on, and with its collector down, beside off."""
    why = _exports()
    if why is not None:
        return [TURN.skip(why), DOWN.skip(why)]
    reps = opts.reps(8, 3)
    call = {"tool_calls": [{"name": "working_directory", "arguments": {}}]}
    samples: dict[str, list[float]] = {"off": [], "on": [], "down": []}
    cpu: dict[str, list[float]] = {"off": [], "on": [], "down": []}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp, _collector() as collector:
        baseline = PythonPass(installed_environ(tmp), tmp)
        script = os.path.join(tmp, "turns.jsonl")
        with open(script, "w", encoding="utf-8") as f:
            for item in ([call] * CALLS + [{"text": "done"}]) * TURNS:
                f.write(json.dumps(item) + "\n")
        sides = {"off": [OFF_ROW], "on": [_row(collector)], "down": [_row(_closed_port())]}
        for rep in range(reps + 1):
            for side in balanced(list(sides), rep):
                turn_cpu: list[float] = []
                figures = asyncio.run(_turns(tmp, script, sides[side], turn_cpu))
                if rep:  # the first round warms imports and caches
                    samples[side] += figures
                    cpu[side] += turn_cpu
            baseline.sample(3)
    off = median_ms(samples["off"])
    on = median_ms(samples["on"]) - off
    p95 = _p95(samples["down"]) - _p95(samples["off"])
    details = {"turns": len(samples["off"]), "off_turn_ms": round(off, 3),
               "on_turn_ms": round(median_ms(samples["on"]), 3),
               "down_turn_ms": round(median_ms(samples["down"]), 3),
               "cpu_on_over_off_ms": round(median_ms(cpu["on"]) - median_ms(cpu["off"]), 3),
               "cpu_down_over_off_ms": round(median_ms(cpu["down"]) - median_ms(cpu["off"]),
                                             3)}
    return [TURN.measure(on, runs=reps, python_pass_ms=baseline.median_ms, **details),
            DOWN.measure(p95, runs=reps, python_pass_ms=baseline.median_ms,
                         median_down_over_off_ms=round(median_ms(samples["down"]) - off, 3),
                         p95_on_over_off_ms=round(_p95(samples["on"]) - _p95(samples["off"]),
                                                  3),
                         slowest_down_ms=ms(max(samples["down"])),
                         slowest_off_ms=ms(max(samples["off"])),
                         stdev_off_ms=round(ms(statistics.stdev(samples["off"])), 3),
                         **details)]


def _p95(samples: list[float]) -> float:
    """The 95th percentile of ``samples`` (seconds), in milliseconds (nearest rank)."""
    ordered = sorted(samples)
    return ms(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))])


@benchmark("telemetry_off", OFF)
def telemetry_off(opts: Options) -> Result:
    """Step overhead with the telemetry row off beside no row at all."""
    from benchlib.agent import agent_session

    runs = opts.reps(11, 3)
    call = {"tool_calls": [{"name": "working_directory", "arguments": {}}]}
    figures: dict[str, list[float]] = {"without": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        script = os.path.join(tmp, "steps.jsonl")
        with open(script, "w", encoding="utf-8") as f:
            for item in [call] * AGENT_STEPS + [{"text": "done"}]:
                f.write(json.dumps(item) + "\n")
        for rep in range(runs + 1):
            for side in balanced(["without", "off"], rep):
                extra = [OFF_ROW] if side == "off" else []
                home = tempfile.mkdtemp(dir=tmp)  # its sessions are new ones
                per_step = asyncio.run(agent_session(home, script, True, 2, extra))
                if rep:
                    figures[side] += per_step[1:]
            baseline.sample(3)
    without, off = median_ms(figures["without"]), median_ms(figures["off"])
    return OFF.measure(off - without, runs=runs, python_pass_ms=baseline.median_ms,
                       without_row_ms=round(without, 4), row_off_ms=round(off, 4))
