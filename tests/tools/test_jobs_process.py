"""Background jobs through a real ``dsh --profile sdk`` runtime driven by the scripted model.

The verdicts are real effects: files the jobs write, and whether their processes live. A
job's command runs in the profile's sandbox, whose pid namespace makes ``$$`` a pid the
host does not know; so each process names itself (``exec -a "$PWD/..."``, a path unique to
the test) and the test finds its host pid in ``/proc``, then checks it with
``os.kill(pid, 0)``. Each test runs with the shipped sandbox and with it switched off.

Two sessions share one script (answered separately per session), so the same ``job-1``
call is one session's own job and the other's foreign id.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import alive

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = [
    pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
    pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc"),
]
SANDBOX = pytest.mark.parametrize("sandbox", ["shipped", "off"])

START = 'pwd > where.txt; echo ready; exec -a "$PWD/dsh-job" sleep 300'
FOUR_TOOLS = [
    # Turn 1: start a job in workdir "sub"; a workdir outside the session is refused.
    {"tool_calls": [
        {"name": "bash", "arguments": {"command": START, "workdir": "sub",
                                       "run_in_background": True}},
        {"name": "bash", "arguments": {"command": "touch escaped", "workdir": ".."}}]},
    {"text": "Started."},
    # Turn 2: read, list, kill, read again.
    {"tool_calls": [
        {"name": "job_output", "arguments": {"job_id": "job-1", "wait": True,
                                             "timeout_ms": 10000}},
        {"name": "job_list", "arguments": {}},
        {"name": "job_kill", "arguments": {"job_id": "job-1", "reason": "done with it"}},
        {"name": "job_output", "arguments": {"job_id": "job-1"}}]},
    {"text": "Stopped."},
]
# Each job writes its (possibly sandboxed) pid and leaves a second process in its group.
# Unsandboxed, the shell exits at once: the process it leaves is nobody's child but init's,
# so only a kill of the job's whole group reaches it (the runtime's last-resort kill of
# its own children would not). Sandboxed, a shell's exit ends its pid namespace and all in
# it, so there the shell stays alive beside the second process.
LEAK = {
    "off": 'echo $$ > pids/{n}; (exec -a "$PWD/leak-{n}-orphan" sleep 300 &)',
    "shipped": ('echo $$ > pids/{n}; (exec -a "$PWD/leak-{n}-child" sleep 300) & '
                'exec -a "$PWD/leak-{n}-leader" sleep 300'),
}


def twenty_jobs(sandbox: str) -> list[dict[str, Any]]:
    calls = [{"name": "bash", "arguments": {"command": LEAK[sandbox].format(n=n),
                                            "run_in_background": True}} for n in range(20)]
    return [{"tool_calls": calls}, {"text": "Twenty jobs running."}]


def named(prefix: str) -> dict[str, int]:
    """Live processes whose argv[0] starts with ``prefix``: host pid by argv[0]."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if argv0.startswith(prefix) and alive(int(entry.name)):
            found[argv0] = int(entry.name)
    return found


def await_named(prefix: str, count: int, within: float = 15.0) -> dict[str, int]:
    """The ``count`` processes named ``prefix...``, once they have all exec'd."""
    deadline = time.monotonic() + within
    while len(found := named(prefix)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(found) == count, found
    return found


def survivors(pids: list[int], within: float = 5.0) -> list[int]:
    """The pids still alive after waiting up to ``within`` seconds for them to die."""
    deadline = time.monotonic() + within
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def reap(prefix: str) -> None:
    """Clean up after a failed test: no sleeper of it outlives it."""
    for pid in named(prefix).values():
        os.kill(pid, signal.SIGKILL)


def runtime(tmp_path: Path, script: list[dict[str, Any]], cwd: Path,
            sandbox: str) -> RuntimeProcess:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))  # JSON is YAML
    rows: list[dict[str, Any]] = [{"id": "llm-scripted",
                                   "merge": {"config": {"script": str(path)}}}]
    if sandbox == "off":
        rows.append({"id": "tools:shell", "merge": {"config": {"sandbox": {"mode": "off"}}}})
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps(rows))
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=cwd)
    proc.initialize(cwd, provider="scripted", model="scripted")
    return proc


def turn(proc: RuntimeProcess, session: str) -> list[dict[str, Any]]:
    """Prompt ``session`` and return its tool results ``{error, text}`` once idle."""
    answer = proc.call("session/prompt", {"sessionId": session,
                                          "contentBlocks": [{"type": "text", "text": "go"}]})
    assert "messageId" in answer.get("result", {}), answer
    frames = proc.until("session.status", lambda f: f["params"]["sessionId"] == session
                        and f["params"]["status"] == "idle", timeout=30)
    events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"
              and f["params"]["sessionId"] == session]
    results = [e["data"]["message"] for e in events if e["type"] == "tool/result"]
    return [{"error": m["isError"], "text": "".join(b.get("text", "") for b in m["content"])}
            for m in results]


@SANDBOX
def test_each_job_tool_through_the_sdk_runtime(tmp_path: Path, sandbox: str) -> None:
    work = tmp_path / "work"
    subs = {name: work / name / "sub" for name in ("one", "two")}
    for path in subs.values():
        path.mkdir(parents=True)
    proc = runtime(tmp_path, FOUR_TOOLS, work, sandbox)
    try:
        one, two = (proc.call("session/new", {"cwd": str(subs[n].parent)})["result"]["sessionId"]
                    for n in ("one", "two"))

        # bash: run_in_background answers at once; the job runs on in its workdir.
        started, escaped = turn(proc, one)
        assert not started["error"], started
        head = started["text"].split("\n")[0]
        assert head.startswith("Started background job job-1 (pid ")
        assert head.endswith(f") in {subs['one']}.")
        group = int(head.split("(pid ")[1].split(")")[0])
        assert escaped["error"] and "outside the workspace root" in escaped["text"]
        assert not (work / "escaped").exists()
        job_one = await_named(f"{subs['one']}/dsh-job", 1)[f"{subs['one']}/dsh-job"]
        assert (subs["one"] / "where.txt").read_text() == f"{subs['one']}\n"

        # The same calls from another session: job-1 is not theirs to read, list or kill.
        turn(proc, two)
        job_two = await_named(f"{subs['two']}/dsh-job", 1)[f"{subs['two']}/dsh-job"]
        read, listed, kill, reread = turn(proc, two)
        foreign = "no job 'job-1' in this session (job_list shows this session's jobs)"
        assert (read, kill, reread) == ({"error": True, "text": foreign},) * 3
        assert listed["text"].startswith("job-2: running (pid ")
        assert survivors([job_one], 0.2) == [job_one]  # the foreign job_kill did nothing

        # job_output, job_list, job_kill in the owning session.
        read, listed, kill, reread = turn(proc, one)
        assert read == {"error": False, "text": f"ready\n[job-1 running (pid {group})]"}
        assert listed["text"] == (f"job-1: running (pid {group}); no unread output; in "
                                  f"{subs['one']}: {START}")
        ended = f"killed (done with it), exit code {128 + signal.SIGTERM}"
        assert kill == {"error": False, "text": f"Killed job-1: {ended}."}
        assert reread == {"error": False, "text": f"(no new output)\n[job-1 {ended}]"}
        assert survivors([job_one, group]) == []
        assert alive(job_two)

        # The runtime's end takes the other session's job with it.
        proc.close_stdin()
        assert proc.wait() == 0
        assert survivors([job_two]) == []
    finally:
        proc.finish()
        reap(str(work))


@SANDBOX
def test_twenty_jobs_leave_nothing_behind(tmp_path: Path, sandbox: str) -> None:
    work = tmp_path / "work"
    (work / "pids").mkdir(parents=True)
    proc = runtime(tmp_path, twenty_jobs(sandbox), work, sandbox)
    try:
        results = turn(proc, "leaky")
        assert [r["error"] for r in results] == [False] * 20, results
        assert [r["text"].split(" (pid")[0] for r in results] == [
            f"Started background job job-{n}" for n in range(1, 21)]
        kinds = ("orphan",) if sandbox == "off" else ("child", "leader")
        found = await_named(f"{work}/leak-", 20 * len(kinds))
        assert sorted(found) == sorted(f"{work}/leak-{n}-{kind}" for n in range(20)
                                       for kind in kinds)
        assert all((work / "pids" / str(n)).read_text().strip() for n in range(20))
        pids = list(found.values())
        assert survivors(pids, 0) == pids  # all of them really run before the session ends
        proc.close_stdin()  # ends the session, then the runtime
        assert proc.wait() == 0
        assert survivors(pids) == []
        assert named(str(work)) == {}
    finally:
        proc.finish()
        reap(str(work))
