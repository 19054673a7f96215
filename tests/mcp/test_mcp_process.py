"""MCP servers as tools, through the real ``dsh`` with the scripted model.

Every test spawns the real launcher (``python -m dsh``); the MCP servers are the real test
server (tests/fixtures/mcp_test_server.py, built on the ``mcp`` package's server API),
spawned by dsh over stdio or run by the test as a streamable HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "fixtures" / "mcp_test_server.py"

Run = Callable[..., subprocess.CompletedProcess[str]]


def patches(tmp_path: Path, calls: list[dict[str, Any]],
            servers: list[dict[str, Any]]) -> list[str]:
    """``--patch`` args: the scripted model making ``calls`` in one step, then the servers."""
    script = tmp_path / "script.jsonl"
    steps = [{"tool_calls": calls}, {"text": "done"}] if calls else [{"text": "done"}]
    script.write_text("".join(json.dumps(step) + "\n" for step in steps))
    model = tmp_path / "model.yml"
    model.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: "
        + json.dumps(str(script)) + "}}\n"
        "- id: agent\n"
        "  merge: {config: {default_route: scripted}}\n")
    mcp = tmp_path / "mcp.yml"
    mcp.write_text("- id: tools:mcp\n  merge:\n    config:\n      servers: "
                   + json.dumps(servers) + "\n")
    return ["--patch", str(model), "--patch", str(mcp)]


def events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def results(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """callId → the tool message of its result."""
    return {e["data"]["message"]["toolCallId"]: e["data"]["message"]
            for e in found if e["type"] == "tool/result"}


def text(message: dict[str, Any]) -> str:
    return message["content"][0]["text"]


def live_with(marker: str) -> list[str]:
    """Processes whose command line mentions ``marker`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(f"{entry.name}: {cmdline}")
    return found


def test_stdio_tools_errors_caps_guardrail_and_bad_servers(run_dsh: Run, tmp_path: Path) -> None:
    server = tmp_path / "mcp_server_copy.py"  # a unique path, to find leftover processes
    shutil.copy(SERVER, server)
    py = sys.executable
    servers = [
        {"name": "test", "command": py, "args": [str(server), "--bad-schema"],
         "call_timeout_s": 1, "max_result_chars": 1000},
        {"name": "nocmd", "command": str(tmp_path / "no-such-server")},
        {"name": "garbage", "command": py, "args": [str(server), "--garbage"]},
        {"name": "hang", "command": py, "args": [str(server), "--hang"], "startup_timeout_s": 1},
    ]
    calls = [
        {"id": "add", "name": "mcp__test__add", "arguments": {"a": 2, "b": 3}},
        {"id": "echo", "name": "mcp__test__echo", "arguments": {"text": "hi"}},
        {"id": "fail", "name": "mcp__test__fail", "arguments": {}},
        {"id": "slow", "name": "mcp__test__slow", "arguments": {"seconds": 5}},
        {"id": "big", "name": "mcp__test__big", "arguments": {"n": 5000}},
        {"id": "typo", "name": "mcp__test__add", "arguments": {"a": "two", "b": 3}},
        {"id": "gone", "name": "mcp__nocmd__anything", "arguments": {}},
    ]
    found = events(run_dsh("--profile", "headless", *patches(tmp_path, calls, servers),
                           "--json", "use the tools"))
    answers = results(found)
    assert text(answers["add"]) == "5" and not answers["add"]["isError"]
    # Not read-only, no path arguments: the workspace policy asks, nobody can answer.
    assert answers["echo"]["isError"] and "denied" in text(answers["echo"])
    assert answers["fail"]["isError"] and "this tool always fails" in text(answers["fail"])
    assert answers["slow"]["isError"]
    assert "did not answer within 1.0 s (call_timeout_s)" in text(answers["slow"])
    big = text(answers["big"])
    assert len(big) <= 1000 and "result truncated" in big and "max_result_chars" in big
    assert answers["typo"]["isError"] and "a: expected integer" in text(answers["typo"])
    assert "unknown tool 'mcp__nocmd__anything'" in text(answers["gone"])
    errors = " ".join(e["data"]["message"] for e in found if e["type"] == "error")
    # One event per problem, naming its server (the bad schema is test's own tool).
    sources = sorted(e["data"]["source"]["server"] for e in found if e["type"] == "error")
    assert sources == ["garbage", "hang", "nocmd", "test"], sources
    assert f"MCP server 'nocmd' failed to start: command not found: {tmp_path}" in errors
    assert "MCP server 'garbage' failed to start: it wrote output that is not MCP" in errors
    assert "MCP server 'hang' failed to start: no answer to initialize and tools/list " \
           "within 1.0 s" in errors
    assert "MCP server 'test': tool 'bad_schema' skipped: " \
           "inputSchema.properties.a.type is not a JSON Schema type" in errors
    assert found[-1]["type"] == "turn/end" and found[-1]["data"]["reason"]["kind"] == "completed"
    # The runtime stopped every server it started, the hung one included.
    deadline = time.monotonic() + 5
    while live_with(str(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_with(str(server)) == []


class HttpServer:
    """The test server over streamable HTTP on 127.0.0.1, for the length of a ``with``."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--http", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)

    def __enter__(self) -> str:
        assert self.proc.stdout is not None
        return f"http://127.0.0.1:{int(self.proc.stdout.readline().split()[1])}/mcp"

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.mark.parametrize("answers", ["event-stream", "json"])
def test_streamable_http_server_on_localhost(run_dsh: Run, tmp_path: Path, answers: str) -> None:
    """Both answer forms of the spec; the header's value comes from the environment."""
    mode = ["--json-response"] if answers == "json" else []
    with HttpServer("--require", "X-Test-Token=secret", *mode) as url:
        servers = [{"name": "web", "url": url, "headers": {"X-Test-Token": "MCP_TEST_TOKEN"}}]
        calls = [{"id": "add", "name": "mcp__web__add", "arguments": {"a": 20, "b": 22}},
                 {"id": "fail", "name": "mcp__web__fail", "arguments": {}}]
        found = events(run_dsh("--profile", "headless", *patches(tmp_path, calls, servers),
                               "--json", "add", env={"MCP_TEST_TOKEN": "secret"}))
    assert text(results(found)["add"]) == "42"
    assert results(found)["fail"]["isError"]
    assert "this tool always fails" in text(results(found)["fail"])
    assert [e for e in found if e["type"] == "error"] == []


def test_http_server_refusing_the_client_is_reported(run_dsh: Run, tmp_path: Path) -> None:
    with HttpServer("--require", "X-Test-Token=secret") as url:
        servers = [{"name": "web", "url": url, "headers": {"X-Test-Token": "MCP_TEST_TOKEN"}}]
        found = events(run_dsh("--profile", "headless", *patches(tmp_path, [], servers),
                               "--json", "hi", env={"MCP_TEST_TOKEN": "wrong"}))
    errors = [e["data"]["message"] for e in found if e["type"] == "error"]
    assert errors == [f"MCP server 'web' failed to start: {url} answered HTTP 401 "
                      "(missing token) (code -32000); its tools are removed"]


def test_an_mcp_session_loads_no_mcp_sdk(run_dsh: Run, tmp_path: Path) -> None:
    """dsh's own client: neither the mcp package nor pydantic or cryptography is imported."""
    servers = [{"name": "test", "command": sys.executable, "args": [str(SERVER)]}]
    calls = [{"id": "add", "name": "mcp__test__add", "arguments": {"a": 1, "b": 2}}]
    proc = run_dsh("--profile", "headless", *patches(tmp_path, calls, servers), "--json",
                   "add", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert text(results(events(proc))["add"]) == "3"
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "dsh.runtime.mcp.stdio" in imported
    heavy = ("mcp", "mcp_types", "pydantic", "pydantic_core", "cryptography", "httpx2")
    assert sorted(m for m in imported if m.split(".")[0] in heavy) == []


def test_a_killed_runtime_leaves_no_server(tmp_path: Path) -> None:
    """The server is tied to the runtime: SIGKILL runs no cleanup, the kernel does it.

    The server is one that outlives its stdin's end (``--hang``), as a busy one may.
    """
    server = tmp_path / "mcp_server_orphan.py"
    shutil.copy(SERVER, server)
    mine = {"name": "mine", "command": sys.executable, "args": [str(server), "--hang"],
            "env": []}
    client = Sdk(tmp_path, [])
    try:
        assert "result" in client.request("initialize", {"cwd": os.getcwd()})
        assert "result" in client.request("session/new", {"mcpServers": [mine]})
        deadline = time.monotonic() + 10
        while not live_with(str(server)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live_with(str(server)), "the server never started"
    finally:
        client.proc.kill()
        client.proc.wait(timeout=10)
        for pipe in (client.proc.stdin, client.proc.stdout):
            if pipe is not None:
                pipe.close()
    deadline = time.monotonic() + 5
    while live_with(str(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_with(str(server)) == []


def test_header_from_unset_variable_is_reported(run_dsh: Run, tmp_path: Path) -> None:
    servers = [{"name": "web", "url": "http://127.0.0.1:9/mcp", "headers": {"X-T": "UNSET_T"}}]
    found = events(run_dsh("--profile", "headless", *patches(tmp_path, [], servers), "--json",
                           "hi", env={"UNSET_T": None}))
    errors = [e["data"]["message"] for e in found if e["type"] == "error"]
    assert len(errors) == 1
    assert "MCP server 'web' failed to start: header X-T (from UNSET_T): environment " \
           "variable UNSET_T is not set" in errors[0]


def test_bad_server_config_names_row_and_field(run_dsh: Run, tmp_path: Path) -> None:
    proc = run_dsh("--profile", "headless",
                   *patches(tmp_path, [], [{"name": "Bad Name", "command": "x"}]), "hi")
    assert proc.returncode == 2
    assert "row 'tools:mcp' config.servers[0].name" in proc.stderr


class Sdk:
    """``dsh --profile sdk`` over real pipes: ``request`` answers, notifications kept."""

    def __init__(self, tmp_path: Path, calls: list[dict[str, Any]]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dsh", "--profile", "sdk", *patches(tmp_path, calls, [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        self.notes: list[dict[str, Any]] = []
        self._id = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self._id, "method": method,
                                          "params": params}) + "\n")
        self.proc.stdin.flush()
        while True:
            message = json.loads(self.proc.stdout.readline())
            if message.get("id") == self._id:
                return message
            self.notes.append(message)

    def until_idle(self) -> None:
        assert self.proc.stdout is not None
        while not (self.notes and self.notes[-1].get("method") == "session.status"
                   and self.notes[-1]["params"]["status"] == "idle"):
            self.notes.append(json.loads(self.proc.stdout.readline()))

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=20)
        self.proc.stdout.close()
        return code


def test_sdk_session_new_adds_per_session_servers(tmp_path: Path) -> None:
    mine = {"name": "Mine", "command": sys.executable, "args": [str(SERVER)], "env": []}
    calls = [{"id": "add", "name": "mcp__mine__add", "arguments": {"a": 1, "b": 1}}]
    client = Sdk(tmp_path, calls)
    try:
        assert "result" in client.request("initialize", {"cwd": os.getcwd()})
        bad = client.request("session/new", {"mcpServers": [{"name": "x"}]})
        assert bad["error"]["code"] == -32602
        assert "mcpServers[0].command" in bad["error"]["message"]
        session = client.request("session/new", {"mcpServers": [mine]})["result"]["sessionId"]
        other = client.request("session/new", {})["result"]["sessionId"]
        for sid in (session, other):
            prompt = {"sessionId": sid, "contentBlocks": [{"type": "text", "text": "add"}]}
            assert "result" in client.request("session/prompt", prompt)
            client.until_idle()
    finally:
        assert client.close() == 0
    answers = {n["params"]["sessionId"]: text(n["params"]["event"]["data"]["message"])
               for n in client.notes if n.get("method") == "session.event"
               and n["params"]["event"]["type"] == "tool/result"}
    assert answers[session] == "2"
    assert answers[other].startswith("Error: unknown tool 'mcp__mine__add'")


def test_booting_with_an_empty_server_list_imports_no_mcp(run_dsh: Run) -> None:
    offline = ROOT / "examples" / "offline" / "patch.yml"
    frames = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"cwd": "/"}}]
    proc = run_dsh("--profile", "sdk", "--patch", str(offline),
                   input="".join(json.dumps(f) + "\n" for f in frames),
                   env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dsh.runtime.mcp.config" in proc.stderr  # the row is loaded ...
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert sorted(m for m in imported if m.split(".")[0] in ("mcp", "mcp_types")) == []


def test_doctor_live_reports_each_servers_reachability(run_dsh: Run, tmp_path: Path) -> None:
    py = sys.executable
    servers = [
        {"name": "test", "command": py, "args": [str(SERVER)]},
        {"name": "hang", "command": py, "args": [str(SERVER), "--hang"], "startup_timeout_s": 1},
        {"name": "nocmd", "command": str(tmp_path / "no-such-server")},
    ]
    args = patches(tmp_path, [], servers)
    proc = run_dsh("doctor", "--profile", "sdk", *args, "--live", "--json")
    checks = {c["id"]: c for c in json.loads(proc.stdout)["data"]["checks"]}
    assert checks["mcp.tools:mcp.test"]["status"] == "ok"
    assert checks["mcp.tools:mcp.test"]["message"].startswith("reachable over stdio: 5 tools")
    assert checks["mcp.tools:mcp.hang"]["status"] == "fail"
    assert "within 1.0 s" in checks["mcp.tools:mcp.hang"]["message"]
    assert checks["mcp.tools:mcp.nocmd"]["status"] == "fail"
    assert "command not found" in checks["mcp.tools:mcp.nocmd"]["message"]
    assert proc.returncode == 1  # a failed check
    # Without --live nothing is started, so nothing is reported about servers.
    quiet = run_dsh("doctor", "--profile", "sdk", *args, "--json")
    assert not any(c["id"].startswith("mcp.") for c in json.loads(quiet.stdout)["data"]["checks"])
