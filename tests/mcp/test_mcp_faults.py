"""MCP servers on a bad day, through the real ``dsh`` with the scripted model: a server
that dies mid-call, one that keeps failing, one that lists 20,000 tools, servers whose
tool names collide.

The servers are real processes (tests/fixtures/mcp_unruly_server.py, on the ``mcp``
package's server API); what the model was sent is read from the scripted provider's
``record`` file, and the events from what each client's run returned: dsh's own
``Session.run()`` and the published DeepSeek Harness client's.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.sdk import ClientConfig, DshClient

ROOT = Path(__file__).resolve().parents[2]
UNRULY = ROOT / "tests" / "fixtures" / "mcp_unruly_server.py"
SERVER = ROOT / "tests" / "fixtures" / "mcp_test_server.py"

Run = Callable[..., Any]


def unruly(name: str, *args: str, **limits: Any) -> dict[str, Any]:
    """A server row entry running the unruly server with ``args``."""
    return {"name": name, "command": sys.executable, "args": [str(UNRULY), *args], **limits}


def patch(tmp_path: Path, script: list[dict[str, Any]], servers: list[dict[str, Any]],
          **row: Any) -> Path:
    """One patch file: the scripted model (recording every request) and the servers.

    Turns wait for servers up to agent-core's ``hook_budget_s``: raised, so a loaded
    machine starting a large server is not what a test measures.
    """
    lines = tmp_path / "script.jsonl"
    lines.write_text("".join(json.dumps(step) + "\n" for step in script))
    config = {"servers": servers, **row}
    path = tmp_path / "patch.yml"
    path.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: "
        + json.dumps(str(lines)) + ", record: " + json.dumps(str(tmp_path / "requests.jsonl"))
        + "}}\n"
        "- id: agent\n"
        "  merge: {config: {default_route: scripted, hook_budget_s: 120}}\n"
        "- id: tools:mcp\n"
        "  merge:\n"
        "    config: " + json.dumps(config) + "\n")
    return path


def requests(tmp_path: Path) -> list[dict[str, Any]]:
    """Every model request, in order: ``{sessionId, model, messages, tools}``."""
    return [json.loads(line) for line in
            (tmp_path / "requests.jsonl").read_text().splitlines()]


def call(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


def mcp_events(events: list[dict[str, Any]], kind: str = "error") -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind
            and e["data"].get("source", {}).get("kind") == "mcp"]


def results(events: list[dict[str, Any]]) -> list[str]:
    """The text of each tool result, in order."""
    return [e["data"]["message"]["content"][0]["text"] for e in events
            if e["type"] == "tool/result"]


def starts(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# -- a server that dies mid-call ----------------------------------------------------------

CRASH_SCRIPT = [
    # run 1: the crash, then a call to the dead server and one to the other, then done
    call(("mcp__flaky__crash", {})),
    call(("mcp__flaky__add", {"a": 1, "b": 1}), ("mcp__steady__add", {"a": 2, "b": 2})),
    {"text": "first done"},
    # run 2: the flaky server was started again for this turn
    call(("mcp__flaky__add", {"a": 3, "b": 4})),
    {"text": "second done"},
]


def _dsh_sdk_runs(home: Path, patch_file: Path) -> list[list[dict[str, Any]]]:
    config = ClientConfig(profile="sdk", patches=[patch_file], dsh_home=home,
                          initialize_timeout=60.0)
    with DshClient(config) as client:
        session = client.new_session()
        runs = [session.run("crash it"), session.run("again")]
    return [[{"type": e.type, "data": dict(e.data)} for e in r.events] for r in runs]


def _published_runs(home: Path, patch_file: Path) -> list[list[dict[str, Any]]]:
    harness_api = pytest.importorskip(
        "deepseek_harness", reason="the published client is not installed: pip install "
        "--no-deps --pre 'deepseek-harness-sdk==0.2.1rc2' 'pydantic>=2.12,<3'")
    # The installed dsh console script beside the interpreter under test.
    dsh_bin = Path(sys.executable).parent / ("dsh.exe" if sys.platform == "win32" else "dsh")
    harness = harness_api.DeepSeekHarness(
        dsh_bin=str(dsh_bin), dsh_home=str(home), profile="sdk",
        patches=(str(patch_file),), provider="scripted", model="scripted", cwd=str(Path.cwd()),
        initialize_timeout_seconds=60, request_timeout_seconds=60,
        shutdown_timeout_seconds=10)
    with harness as client:
        session = client.start_session("crash-session")
        runs = [session.run("crash it"), session.run("again")]
    return [list(r.events) for r in runs]


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the published client's pipes
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("client", ["dsh.sdk", "deepseek_harness"])
def test_a_server_dying_mid_call_is_gone_from_the_next_request_and_said_in_the_run(
        client: str, tmp_path: Path, dsh_home: Path) -> None:
    count = tmp_path / "flaky.starts"
    servers = [unruly("flaky", "--count", str(count), restart="next-turn"),
               {"name": "steady", "command": sys.executable, "args": [str(SERVER)]}]
    patch_file = patch(tmp_path, CRASH_SCRIPT, servers)
    runs = (_dsh_sdk_runs if client == "dsh.sdk" else _published_runs)(dsh_home, patch_file)

    first, second = runs
    said = mcp_events(first)
    assert len(said) == 1, said
    stopped = said[0]
    assert stopped["data"]["source"] == {"kind": "mcp", "server": "flaky"}
    assert stopped["data"]["message"] == (
        "MCP server 'flaky' stopped: the connection closed (the server exited or dropped "
        "it); stderr: crashing on purpose; its tools are removed; it restarts when the next "
        "turn starts (restart 1 of 3)")
    # Said inside the turn, before the crashed call's result and the turn's end.
    kinds = [e["type"] for e in first]
    crash_result = kinds.index("tool/result")
    assert first.index(stopped) < crash_result < kinds.index("turn/end")
    crashed, dead, steady = results(first)
    assert crashed == ("Error: MCP server 'flaky' stopped during the call: the connection "
                       "closed (the server exited or dropped it); stderr: crashing on purpose")
    assert dead.startswith("Error: unknown tool 'mcp__flaky__add'")
    assert steady == "4"
    assert first[-1]["type"] == "turn/end"
    assert first[-1]["data"]["reason"]["kind"] == "completed"

    sent = requests(tmp_path)
    assert len(sent) == 5
    flaky = [sorted(t for t in r["tools"] if t.startswith("mcp__flaky__")) for r in sent]
    assert "mcp__flaky__crash" in flaky[0]
    # The very next request of the same turn, and the rest of it, offer none of them.
    assert flaky[1] == flaky[2] == []
    assert all("mcp__steady__add" in r["tools"] for r in sent)
    # restart: next-turn: the second turn has the server again.
    assert flaky[3] == flaky[0]
    assert results(second) == ["7"]
    assert mcp_events(second) == []
    assert starts(count) == 2


@pytest.mark.skipif(os.name != "posix", reason="kills the server with SIGKILL")
def test_a_server_dying_between_turns_is_said_in_the_next_run(tmp_path: Path,
                                                               dsh_home: Path) -> None:
    """No turn runs when it dies: the event waits for the next turn, whose run holds it,
    and whose first request already goes without the server's tools."""
    count = tmp_path / "idle.starts"
    servers = [unruly("idle", "--count", str(count))]
    script = [{"text": "one"}, {"text": "two"}]
    config = ClientConfig(profile="sdk", patches=[patch(tmp_path, script, servers)],
                          dsh_home=dsh_home, initialize_timeout=60.0)
    with DshClient(config) as client:
        session = client.new_session()
        first = session.run("one")
        pid = int(count.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _exists(pid) and time.monotonic() < deadline:  # until dsh has reaped it
            time.sleep(0.02)
        assert not _exists(pid)
        client.sessions()  # one round trip through the runtime's loop
        second = session.run("two")
        history = client.request("session/history", {"sessionId": session.id})["events"]
    assert [e for e in first.events if e.type == "error"] == []
    said = [e for e in second.events if e.type == "error"]
    assert [e.data["message"] for e in said] == [
        "MCP server 'idle' stopped: the connection closed (the server exited or dropped it); "
        "its tools are removed"]
    # In the log: after the second turn started, before its end.
    kinds = [e["type"] for e in history]
    where = next(i for i, e in enumerate(history) if e["type"] == "error")
    assert where > len(kinds) - 1 - kinds[::-1].index("turn/start")
    assert "turn/end" in kinds[where:]
    sent = requests(tmp_path)
    assert any(t.startswith("mcp__idle__") for t in sent[0]["tools"])
    assert not any(t.startswith("mcp__idle__") for t in sent[1]["tools"])


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- a server that keeps failing ----------------------------------------------------------

def test_a_server_failing_in_a_loop_is_backed_off_then_removed(tmp_path: Path,
                                                               dsh_home: Path) -> None:
    """Two servers that never start: ``slow`` backs off an hour after its second failure;
    ``done`` may restart at once but only twice, then is removed, which is said."""
    slow_count, done_count = tmp_path / "slow.starts", tmp_path / "done.starts"
    servers = [
        unruly("slow", "--fail-start", "--count", str(slow_count), restart="next-turn",
               max_restarts=3, restart_backoff_s=3600),
        unruly("done", "--fail-start", "--count", str(done_count), restart="next-turn",
               max_restarts=2, restart_backoff_s=0),
    ]
    patch_file = patch(tmp_path, [{"text": f"turn {n}"} for n in range(1, 6)], servers)
    config = ClientConfig(profile="sdk", patches=[patch_file], dsh_home=dsh_home,
                          initialize_timeout=60.0)
    said: list[dict[str, str]] = []
    counts: list[tuple[int, int]] = []
    with DshClient(config) as client:
        session = client.new_session()
        for n in range(1, 6):
            result = session.run(f"turn {n}")
            assert result.stop_reason == "completed" and result.final_text == f"turn {n}"
            events = [{"type": e.type, "data": e.data} for e in result.events]
            said.append({e["data"]["source"]["server"]: e["data"]["message"]
                         for e in mcp_events(events)})
            counts.append((starts(slow_count), starts(done_count)))
    failed = ("MCP server '{}' failed to start: it exited or closed the connection before "
              "answering; stderr: refusing to start; its tools are removed")
    assert said[0] == {
        "slow": failed.format("slow") + "; it restarts when the next turn starts "
                                        "(restart 1 of 3)",
        "done": failed.format("done") + "; it restarts when the next turn starts "
                                        "(restart 1 of 2)"}
    assert said[1] == {
        "slow": failed.format("slow") + "; backing off, it restarts when a turn starts "
                                        "3600 s from now or later (restart 2 of 3, "
                                        "restart_backoff_s = 3600)",
        "done": failed.format("done") + "; it restarts when the next turn starts "
                                        "(restart 2 of 2)"}
    assert said[2] == {
        "done": "MCP server 'done' failed to start: it exited or closed the connection "
                "before answering; stderr: refusing to start; its tools are removed for the "
                "rest of the session: it failed 3 times in a row and is not restarted again "
                "(max_restarts = 2)"}
    assert said[3] == said[4] == {}
    # slow: started, restarted once at once, then backing off; done: 1 + max_restarts.
    assert counts == [(1, 1), (2, 2), (2, 3), (2, 3), (2, 3)]


# -- budgets --------------------------------------------------------------------------------

def test_a_server_listing_20000_tools_is_cut_to_the_budget_and_the_session_works(
        run_dsh: Run, tmp_path: Path) -> None:
    """Each server within its own budget (count, bytes), all of them within the session's,
    in the order they are given; each cut one error event naming server and setting."""
    servers = [
        unruly("tiny", max_schema_bytes=1000),
        unruly("sprawl", "--many", "20000", startup_timeout_s=120),
        unruly("more", "--many", "200", max_tools=100),
    ]
    script = [call(("mcp__sprawl__add", {"a": 20, "b": 22}),
                   ("mcp__tiny__add", {"a": 1, "b": 2})),
              {"text": "done"}]
    patch_file = patch(tmp_path, script, servers, max_total_tools=200)
    proc = run_dsh("--profile", "headless", "--patch", str(patch_file), "--json", "go",
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = {(e["data"]["source"]["server"], e["data"]["setting"]): e["data"]["message"]
              for e in mcp_events(events)}
    tiny_offered = sum(t.startswith("mcp__tiny__") for t in requests(tmp_path)[0]["tools"])
    assert 0 < tiny_offered < 6  # not all of its six tools fit 1000 bytes
    assert errors == {
        ("tiny", "max_schema_bytes"):
            f"MCP server 'tiny': {6 - tiny_offered} of its 6 tools left out: the tools "
            "offered from one server may take at most 1000 bytes of names, descriptions and "
            f"schemas (max_schema_bytes = 1000); {tiny_offered} offered",
        ("sprawl", "max_tools"):
            "MCP server 'sprawl': 19878 of its 20006 tools left out: at most 128 tools are "
            "offered per server (max_tools = 128); 128 offered",
        ("more", "max_tools"):
            "MCP server 'more': 106 of its 206 tools left out: at most 100 tools are "
            "offered per server (max_tools = 100); 100 offered",
        ("more", "max_total_tools"):
            f"MCP server 'more': {28 + tiny_offered} of its 100 tools left out: the "
            "session's servers together may offer at most 200 tools (max_total_tools = 200);"
            f" {72 - tiny_offered} offered",
    }
    # The session works: the calls are answered, the turn completes.
    assert results(events) == ["42", "3"]
    assert events[-1]["data"]["reason"]["kind"] == "completed"
    for request in requests(tmp_path):
        tools = [t for t in request["tools"] if t.startswith("mcp__")]
        assert len(tools) == 200
        assert sum(t.startswith("mcp__sprawl__") for t in tools) == 128
        assert "mcp__sprawl__gen_19999" not in tools


# -- name collisions --------------------------------------------------------------------

def test_colliding_tool_names_are_both_offered_with_a_warning(run_dsh: Run,
                                                              tmp_path: Path) -> None:
    """``mcp__a__b__c`` is tool ``b__c`` of server ``a`` and tool ``c`` of server
    ``a__b``; ``x.y`` and ``x_y`` of one server are both ``x_y`` once model-safe."""
    def crc(name: str) -> str:
        return f"_{zlib.crc32(name.encode()):08x}"

    servers = [unruly("a", "--alias", "b__c", "--label", "A"),
               unruly("a__b", "--alias", "c", "--label", "AB"),
               unruly("s", "--alias", "x.y", "--alias", "x_y", "--label", "S")]
    second, twin = f"mcp__a__b__c{crc('c')}", f"mcp__s__x_y{crc('x_y')}"
    script = [call(("mcp__a__b__c", {}), (second, {}), ("mcp__s__x_y", {}), (twin, {})),
              {"text": "done"}]
    proc = run_dsh("--profile", "headless", "--patch",
                   str(patch(tmp_path, script, servers)), "--json", "go")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert results(events) == ["b__c from A", "c from AB", "x.y from S", "x_y from S"]
    warnings = sorted(e["data"]["message"] for e in mcp_events(events, "warning"))
    assert warnings == [
        f"MCP server 's': tools 'x.y' and 'x_y' are both 'mcp__s__x_y' as model-safe names; "
        f"'x_y' is offered as '{twin}'",
        f"MCP tool names collide: tool 'c' of server 'a__b' and tool 'b__c' of server 'a' "
        f"are both 'mcp__a__b__c'; both are offered, the one of server 'a__b' as "
        f"'{second}'"]
    assert mcp_events(events) == []
    tools = requests(tmp_path)[0]["tools"]
    assert {"mcp__a__b__c", second, "mcp__s__x_y", twin} <= set(tools)


# -- bad settings -------------------------------------------------------------------------

@pytest.mark.parametrize(("setting", "problem"), [
    ({"restart": "always"}, "servers[0].restart: expected one of never, next-turn"),
    ({"max_restarts": -1}, "servers[0].max_restarts: expected a whole number, 0 or more"),
    ({"restart_backoff_s": "soon"},
     "servers[0].restart_backoff_s: expected a number of seconds, 0 or more"),
    ({"max_tools": 0}, "servers[0].max_tools: expected a positive number"),
    ({"max_schema_bytes": True}, "servers[0].max_schema_bytes: expected a positive number"),
])
def test_bad_server_settings_name_row_and_field(run_dsh: Run, tmp_path: Path,
                                                setting: dict[str, Any], problem: str) -> None:
    proc = run_dsh("--profile", "headless", "--patch",
                   str(patch(tmp_path, [], [unruly("x", **setting)])), "hi")
    assert proc.returncode == 2
    assert f"row 'tools:mcp' config.{problem}" in proc.stderr


def test_bad_row_budget_is_refused(run_dsh: Run, tmp_path: Path) -> None:
    proc = run_dsh("--profile", "headless", "--patch",
                   str(patch(tmp_path, [], [], max_total_tools=0)), "hi")
    assert proc.returncode == 2
    assert "tools:mcp" in proc.stderr and "max_total_tools" in proc.stderr
