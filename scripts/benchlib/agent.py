"""The agent loop's own cost per step, in process: a real kernel with the dsh-base agent
slice and the scripted provider, the time spent inside the provider taken out."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from typing import Any

from benchlib.procs import PythonPass, installed_environ, median_ms
from benchlib.registry import Metric, Options, Result, benchmark

AGENT_STEPS = 100


def agent_rows(script: str, sessions: bool, steps: int = AGENT_STEPS) -> list[dict[str, Any]]:
    """The dsh-base agent slice (agent, scripted model, a tool, the policy), optionally on
    the SQLite sessions service, as the shipped profiles run it."""
    tree: list[dict[str, Any]] = [
        {"id": "agent", "name": "agent-core",
         "config": {"default_route": "scripted", "max_steps": steps + 1},
         **({"inject": ["sessions"]} if sessions else {})},
        {"id": "llm-scripted", "name": "llm-scripted", "config": {"script": script}},
        {"id": "tools:working-directory", "name": "tool-working-directory"},
        {"id": "policy", "name": "guardrail-policy", "config": {"mode": "workspace"}},
    ]
    if sessions:
        tree.append({"id": "sessions", "name": "sessions-sqlite"})
    return tree


def timed_model(model: Any) -> list[float]:
    """Wrap ``model.stream`` (on the instance) to add the seconds spent inside it to the
    returned one-element list: what the model costs, subtracted from the step's time."""
    spent = [0.0]
    inner = model.stream

    async def stream(request: Any) -> Any:
        generator = inner(request)
        while True:
            t0 = time.perf_counter()
            try:
                chunk = await generator.__anext__()
            except StopAsyncIteration:
                spent[0] += time.perf_counter() - t0
                return
            spent[0] += time.perf_counter() - t0
            yield chunk

    model.stream = stream
    return spent


async def agent_session(tmp: str, script: str, sessions: bool, runs: int,
                        extra: list[dict[str, Any]] | None = None) -> list[float]:
    """Per-step overhead (seconds) of ``runs`` sessions of AGENT_STEPS tool-calling steps
    (``extra``: rows added to the slice, as :mod:`benchlib.telemetry` adds its own)."""
    from dsh.runtime.kernel.kernel import Kernel

    kernel = Kernel(agent_rows(script, sessions) + (extra or []), profile="bench", home=tmp,
                    cwd=tmp, env={})
    kernel.load()
    await kernel.start()
    try:
        agent = kernel.context.service("agent")
        spent = timed_model(kernel.context.service("llm:scripted"))
        idle: dict[str, asyncio.Event] = {}
        agent.add_listener(lambda method, params: method == "session.status"
                           and params["status"] == "idle"
                           and idle[params["sessionId"]].set())
        figures = []
        for run in range(runs):
            session = f"bench-{run}"
            idle[session] = asyncio.Event()
            spent[0] = 0.0
            t0 = time.perf_counter()
            await agent.prompt(session, [{"type": "text", "text": "go"}])
            await idle[session].wait()
            total = time.perf_counter() - t0
            kinds = [e["data"]["reason"]["kind"] for e in agent.history(session)
                     if e["type"] == "turn/end"]
            if kinds != ["completed"]:
                raise RuntimeError(f"a session ended {kinds}")
            figures.append((total - spent[0]) / AGENT_STEPS)
        return figures
    finally:
        await kernel.dispose()


STEP = Metric(
    "agent_step_overhead", "ms/step", "<", 2,
    about="The agent's cost of one tool-calling step (model time excluded) in 100-step "
          "sessions: real Kernel, agent-core, scripted provider, working_directory tool, "
          "policy, SQLite sessions (the in-memory store is a detail); in process.",
    changes="The loop's per-step work (events, hooks, guardrails, tool dispatch), the "
            "sessions store's writes per event (SQLite, fsync policy), CPU speed and "
            "load. Target 2 ms/step.")


@benchmark("agent_step_overhead", STEP)
def agent_step_overhead(opts: Options) -> Result:
    """Agent cost of one tool-calling step (model time excluded), in a 100-step session."""
    runs = opts.reps(11, 3)
    call = {"tool_calls": [{"name": "working_directory", "arguments": {}}]}
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        script = os.path.join(tmp, "steps.jsonl")
        with open(script, "w", encoding="utf-8") as f:
            for item in [call] * AGENT_STEPS + [{"text": "done"}]:
                f.write(json.dumps(item) + "\n")
        for sessions in (True, False):
            baseline.sample(3)
            per_step = asyncio.run(agent_session(tmp, script, sessions, runs + 1))
            figures["sqlite" if sessions else "memory"] = median_ms(per_step[1:])
        baseline.sample(3)
    return STEP.measure(figures["sqlite"], runs=runs, python_pass_ms=baseline.median_ms,
                        steps=AGENT_STEPS, memory_store_ms=figures["memory"])
