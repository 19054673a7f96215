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


LISTING_TOOLS = 1000
LISTING_STEPS = 20


async def _listing_times(tmp: str, script: str, turns: int) -> dict[str, list[float]]:
    """Per model request (steps after the first of a turn): seconds from ``step/start`` to
    the provider holding the request, in a session offered LISTING_TOOLS MCP tools and in
    one offered none, turn by turn in turn; and, apart, the OpenAI wire form of the
    tools encoded (the provider's share)."""
    from dsh.runtime.kernel.kernel import Kernel
    from dsh.runtime.providers.openai_wire import chat_tools

    limits = {"max_tools": LISTING_TOOLS, "max_total_tools": LISTING_TOOLS,
              "max_schema_bytes": 16 * 1024 * 1024, "max_total_schema_bytes": 16 * 1024 * 1024,
              "startup_timeout_s": 60}
    rows = [*agent_rows(script, sessions=False, steps=LISTING_STEPS),
            {"id": "mcp", "name": "mcp-servers", "config": {"servers": [], **limits}}]
    rows[0]["config"]["hook_budget_s"] = 120
    kernel = Kernel(rows, profile="bench", home=tmp, cwd=tmp, env=dict(os.environ))
    kernel.load()
    await kernel.start()
    try:
        agent = kernel.context.service("agent")
        model = kernel.context.service("llm:scripted")
        mcp = kernel.context.service("mcp")
        sizes = LISTING_TOOLS - 6  # the unruly server's own six, then generated ones
        server = {"name": "many", "command": sys.executable, "env": [],
                  "args": [str(FIXTURES / "mcp_unruly_server.py"), "--many", str(sizes)]}
        mcp.add_session_servers("tools", mcp.client_servers([server]), tmp)
        times: dict[str, list[float]] = {"tools": [], "none": [], "encode": []}
        offered: list[int] = []
        stepped: dict[str, float] = {}
        idle: dict[str, asyncio.Event] = {}

        def listen(method: str, params: dict[str, Any]) -> None:
            if method == "session.status" and params["status"] == "idle":
                idle[params["sessionId"]].set()
            elif method == "session.event" and params["event"]["type"] == "step/start":
                step = params["event"]["data"]["step"]
                if step > 1:
                    stepped[params["sessionId"]] = time.perf_counter()

        inner = model.stream

        async def stream(request: Any) -> Any:
            t0 = stepped.pop(request.session_id, None)
            if t0 is not None:
                times[request.session_id].append(time.perf_counter() - t0)
                if request.session_id == "tools":
                    offered.append(sum(t.name.startswith("mcp__") for t in request.tools))
                    e0 = time.perf_counter()
                    json.dumps(chat_tools(request.tools)).encode()
                    times["encode"].append(time.perf_counter() - e0)
            async for chunk in inner(request):
                yield chunk

        model.stream = stream
        agent.add_listener(listen)
        for _ in range(turns):
            for session in ("tools", "none"):
                idle[session] = asyncio.Event()
                await agent.prompt(session, [{"type": "text", "text": "go"}])
                await idle[session].wait()
        for session in ("tools", "none"):
            ends = [e["data"]["reason"]["kind"] for e in agent.history(session)
                    if e["type"] == "turn/end"]
            if ends != ["completed"] * turns:
                raise RuntimeError(f"session {session} ended {ends}")
        if set(offered) != {LISTING_TOOLS}:
            raise RuntimeError(f"the requests offered {sorted(set(offered))} MCP tools, "
                               f"not {LISTING_TOOLS}")
        return times
    finally:
        await kernel.dispose()


LISTING = Metric(
    "mcp_tool_listing_1000", "ms", "<", 5,
    about=f"What listing {LISTING_TOOLS} MCP tools into a model request costs the agent "
          "(one stdio server, tests/fixtures/mcp_unruly_server.py --many): from step/start "
          "to the provider holding the ModelRequest (the session's offer, the turn's tool "
          "map, the ToolSpecs), median over the steps after the first of "
          f"{LISTING_STEPS}-step turns of an in-process kernel. Details: the same for a "
          "session without MCP tools, and encode_ms, the provider's share: those tools in "
          "the OpenAI wire form encoded as JSON (json.dumps of about 220 KB), which every "
          "request with them pays on top and which is not the listing's.",
    changes="The mcp-servers row's offer (made when a server's tools change, not per "
            "request), the agent's tool map per request, CPU speed and load. Target 5 ms "
            "(issue 33).")


@benchmark("mcp_tool_listing_1000", LISTING)
def mcp_tool_listing(opts: Options) -> Result:
    """1,000 MCP tools listed into a request, beside a session's requests without them."""
    turns = opts.reps(10, 3)
    call = {"tool_calls": [{"name": "working_directory", "arguments": {}}]}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        script = os.path.join(tmp, "steps.jsonl")
        with open(script, "w", encoding="utf-8") as f:
            for item in ([call] * (LISTING_STEPS - 1) + [{"text": "done"}]) * turns:
                f.write(json.dumps(item) + "\n")
        baseline.sample(3)
        times = asyncio.run(_listing_times(tmp, script, turns))
        baseline.sample(3)
    agent, encode = median_ms(times["tools"]), median_ms(times["encode"])
    return LISTING.measure(agent, runs=len(times["tools"]), python_pass_ms=baseline.median_ms,
                           without_mcp_tools_ms=median_ms(times["none"]), encode_ms=encode,
                           with_encode_ms=round(agent + encode, 3), tools=LISTING_TOOLS)
