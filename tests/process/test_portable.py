"""The portable branches, run here: dsh with the POSIX-only names taken away.

Windows has no ``signal.SIGKILL``, ``SIGHUP``, ``SIGQUIT``, no ``os.killpg``, ``os.setsid``,
``os.getpgid`` and no ``fcntl``. Each test runs a program in a subprocess that deletes them
(and makes ``import fcntl`` fail) *before* importing dsh, so every branch dsh takes is the
one a platform without them takes (``dsh.core.process._POSIX`` is false: no process groups,
the leader is stopped through its handle), and then drives the real thing end to end:

* an SDK client (the client process stripped) through start, a scripted run and close;
* the same with the runtime stripped too (started as ``dsh_bin``: a stripped ``dsh``),
  whose ``bash`` starts a background job that ``job_output`` reads and ``job_kill`` stops;
* an MCP stdio server, started, called and stopped by a stripped runtime.

The standard library's own ``Popen.kill`` keeps working (it reads ``signal.SIGKILL`` at
call time on POSIX; on Windows it is ``TerminateProcess``): it is given the number. Only
dsh must do without the names.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from proctable import pids_with

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = ROOT / "examples" / "offline" / "patch.yml"
MCP_SERVER = ROOT / "tests" / "fixtures" / "mcp_test_server.py"

pytestmark = pytest.mark.skipif(sys.platform == "win32",
                                reason="takes POSIX names away: Windows has none to take")

STRIP = textwrap.dedent("""\
    import os, signal, subprocess, sys
    for _name in ("SIGKILL", "SIGHUP", "SIGQUIT"):
        delattr(signal, _name)
    for _name in ("killpg", "setsid", "getpgid"):
        delattr(os, _name)
    sys.modules["fcntl"] = None  # import fcntl: ImportError
    subprocess.Popen.kill = lambda self: self.send_signal(9)
    """)

DRIVER = STRIP + textwrap.dedent("""\
    import json
    from dsh.core import process
    from dsh.sdk import ClientConfig, DshClient
    assert not process._POSIX and not process._WINDOWS, "the portable branch must run"
    spec = json.loads(sys.argv[1])
    config = ClientConfig(profile="sdk", dsh_home=spec["home"], cwd=spec["cwd"],
                          patches=spec["patches"], dsh_bin=spec.get("dsh_bin"),
                          carrier=spec.get("carrier", "auto"))
    out = {}
    client = DshClient(config)
    client.start()
    out["runtime"] = {"carrier": client.runtime.carrier, "source": client.runtime.source}
    pid = client.pid
    result = client.new_session().run(spec["prompt"])
    out["stop_reason"] = result.stop_reason
    out["final_text"] = result.final_text
    out["results"] = {e.data["message"]["toolCallId"]:
                      "".join(b.get("text", "") for b in e.data["message"]["content"])
                      for e in result.events if e.type == "tool/result"}
    client.close()
    out["state"] = client.state.value
    out["exit_code"] = client.exit_code
    out["runtime_alive"] = process.pid_alive(pid)
    print(json.dumps(out))
    """)

RUNTIME = "#!{python}\n" + STRIP + textwrap.dedent("""\
    from dsh.cli.main import main
    main()
    """)


def scripted(tmp_path: Path, steps: list[dict[str, Any]], extra: str = "") -> Path:
    """A patch: the scripted model answering ``steps``, shell sandbox off (Windows has
    none), plus ``extra`` operations."""
    script = tmp_path / "script.yml"
    script.write_text(json.dumps(steps))
    patch = tmp_path / "patch.yml"
    row = {"id": "llm-scripted", "name": "llm-scripted", "config": {"script": str(script)}}
    patch.write_text(
        f"- insert: [{json.dumps(row)}]\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n"
        "- {id: 'tools:shell', merge: {config: {sandbox: {mode: 'off'}}}}\n" + extra)
    return patch


def stripped_runtime(tmp_path: Path) -> Path:
    """An executable ``dsh`` that takes the POSIX names away before running."""
    exe = tmp_path / "dsh-stripped"
    exe.write_text(RUNTIME.format(python=sys.executable))
    exe.chmod(0o755)
    return exe


def drive(tmp_path: Path, dsh_home: Path, patch: Path, prompt: str,
          **spec: Any) -> dict[str, Any]:
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    argv = json.dumps({"home": str(dsh_home), "cwd": str(cwd), "patches": [str(patch)],
                       "prompt": prompt, **spec})
    env = {k: v for k, v in os.environ.items() if k != "DSH_RUNTIME_BIN"}
    done = subprocess.run([sys.executable, "-c", DRIVER, argv], capture_output=True,
                          text=True, timeout=180, cwd=cwd, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def closed_cleanly(out: dict[str, Any]) -> None:
    assert out["state"] == "closed", out
    assert out["exit_code"] == 0, out  # ended by its own shutdown path, not killed
    assert out["runtime_alive"] is False, out


def test_sdk_client_starts_runs_and_closes_without_posix_names(
        tmp_path: Path, dsh_home: Path) -> None:
    out = drive(tmp_path, dsh_home, OFFLINE, "Where am I working?", carrier="python")
    assert out["runtime"] == {"carrier": "python", "source": "sys.executable"}
    assert out["stop_reason"] == "completed" and out["final_text"], out
    closed_cleanly(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc")
def test_jobs_tool_starts_reads_and_kills_a_job_without_posix_names(
        tmp_path: Path, dsh_home: Path) -> None:
    marker = f"{tmp_path}/portable-job"
    start = f'echo ready; exec -a "{marker}" sleep 300'
    steps = [
        {"tool_calls": [{"id": "start", "name": "bash",
                         "arguments": {"command": start, "run_in_background": True}}]},
        {"tool_calls": [{"id": "read", "name": "job_output",
                         "arguments": {"job_id": "job-1", "wait": True,
                                       "timeout_ms": 20000}}]},
        {"tool_calls": [{"id": "kill", "name": "job_kill",
                         "arguments": {"job_id": "job-1", "reason": "portable"}}]},
        {"tool_calls": [{"id": "after", "name": "job_list", "arguments": {}}]},
        {"text": "Done."},
    ]
    out = drive(tmp_path, dsh_home, scripted(tmp_path, steps), "Run a job.",
                dsh_bin=str(stripped_runtime(tmp_path)))
    results = out["results"]
    assert results["start"].startswith("Started background job job-1"), results
    assert "ready" in results["read"], results
    assert "killed" in results["kill"].lower(), results
    assert "job-1" in results["after"] and "killed" in results["after"], results
    assert out["stop_reason"] == "completed", out
    closed_cleanly(out)
    assert pids_with(marker) == []


@pytest.mark.skipif(importlib.util.find_spec("mcp") is None,
                    reason="the MCP test server needs the mcp package")
def test_mcp_stdio_server_is_started_called_and_stopped_without_posix_names(
        tmp_path: Path, dsh_home: Path) -> None:
    servers = [{"name": "t", "command": sys.executable, "args": [str(MCP_SERVER)]}]
    steps = [{"tool_calls": [{"id": "add", "name": "mcp__t__add",
                              "arguments": {"a": 2, "b": 3}}]},
             {"text": "Five."}]
    extra = ("- id: 'tools:mcp'\n  merge: {config: {servers: "
             + json.dumps(servers) + "}}\n")
    out = drive(tmp_path, dsh_home, scripted(tmp_path, steps, extra), "Add.",
                dsh_bin=str(stripped_runtime(tmp_path)))
    assert out["results"] == {"add": "5"}, out
    assert out["stop_reason"] == "completed", out
    closed_cleanly(out)
    if sys.platform.startswith("linux"):
        assert pids_with(str(MCP_SERVER)) == [], "the MCP server outlived the runtime"


def test_the_strip_really_takes_the_names_away() -> None:
    """The premise: after STRIP, dsh's old unguarded uses would fail."""
    probe = STRIP + textwrap.dedent("""\
        for name in ("SIGKILL", "SIGHUP", "SIGQUIT"):
            assert not hasattr(signal, name), name
        for name in ("killpg", "setsid", "getpgid"):
            assert not hasattr(os, name), name
        try:
            import fcntl
        except ImportError:
            pass
        else:
            raise AssertionError("fcntl imported")
        from dsh.core import process
        print(process._POSIX)
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
