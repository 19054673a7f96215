"""MCP tools: a call through dsh's MCP client to a stdio server, beside a built-in tool
call in the same session."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from typing import Any

from benchlib.agent import agent_rows
from benchlib.procs import FIXTURES, PythonPass, installed_environ, median_ms, ms
from benchlib.registry import Metric, Options, Result, benchmark

MCP_CALLS = 50


async def _tool_call_times(tmp: str, script: str, calls: int) -> dict[str, list[float]]:
    """Seconds from each ``tool/call`` event to its ``tool/result``, by tool name."""
    from dsh.runtime.kernel.kernel import Kernel

    server = {"name": "bench", "command": sys.executable,
              "args": [str(FIXTURES / "mcp_test_server.py")]}
    rows = [*agent_rows(script, sessions=False, steps=2 * calls),
            {"id": "mcp", "name": "mcp-servers", "config": {"servers": [server]}}]
    kernel = Kernel(rows, profile="bench", home=tmp, cwd=tmp, env=dict(os.environ))
    kernel.load()
    await kernel.start()
    try:
        agent = kernel.context.service("agent")
        started: dict[str, tuple[str, float]] = {}
        times: dict[str, list[float]] = {}
        idle = asyncio.Event()

        def listen(method: str, params: dict[str, Any]) -> None:
            now = time.perf_counter()
            if method == "session.status" and params["status"] == "idle":
                idle.set()
            if method != "session.event":
                return
            event = params["event"]
            if event["type"] == "tool/call":
                started[event["data"]["callId"]] = (event["data"]["name"], now)
            elif event["type"] == "tool/result":
                name, t0 = started.pop(event["data"]["message"]["toolCallId"])
                times.setdefault(name, []).append(now - t0)

        agent.add_listener(listen)
        await agent.prompt("bench", [{"type": "text", "text": "go"}])
        await idle.wait()
        errors = [e for e in agent.history("bench") if e["type"] == "tool/result"
                  and e["data"]["message"]["isError"]]
        if errors:
            raise RuntimeError(f"a tool call failed: {errors[0]}")
        return times
    finally:
        await kernel.dispose()


OVERHEAD = Metric(
    "mcp_tool_overhead", "ms", "<", 10,
    about="An MCP tool call (tool/call to tool/result, stdio server "
          "tests/fixtures/mcp_test_server.py) minus a built-in tool call, alternating in "
          "one session of an in-process kernel; the first call of each kind left out.",
    changes="dsh's MCP client (framing, request matching), the server's own speed, "
            "pipe latency and load. Target 10 ms.")


@benchmark("mcp_tool_overhead", OVERHEAD)
def mcp_tool_overhead(opts: Options) -> Result:
    """An MCP tool call (stdio test server) beside a built-in tool call, in one session."""
    calls = opts.reps(MCP_CALLS, 10)
    builtin = {"tool_calls": [{"name": "working_directory", "arguments": {}}]}
    mcp = {"tool_calls": [{"name": "mcp__bench__add", "arguments": {"a": 2, "b": 3}}]}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        script = os.path.join(tmp, "calls.jsonl")
        with open(script, "w", encoding="utf-8") as f:
            for item in [builtin, mcp] * calls + [{"text": "done"}]:
                f.write(json.dumps(item) + "\n")
        baseline.sample(3)
        times = asyncio.run(_tool_call_times(tmp, script, calls))
        baseline.sample(3)
    # The first call of each kind pays one-time costs (imports, the server's first answer).
    plain, remote = (median_ms(times[n][1:]) for n in ("working_directory", "mcp__bench__add"))
    return OVERHEAD.measure(round(remote - plain, 2), runs=calls,
                            python_pass_ms=baseline.median_ms, mcp_call_ms=remote,
                            builtin_call_ms=plain,
                            first_mcp_call_ms=ms(times["mcp__bench__add"][0]))
