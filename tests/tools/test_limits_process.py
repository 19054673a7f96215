"""Resource limits through the real runtime: a fork bomb and a memory bomb stay inside
their command, the runtime keeps answering, and the per-process rlimits hold.

A real ``dsh --profile sdk`` runs the scripted model's ``bash`` calls under tight limits
set by the test's patch (64 processes, 256 MiB). The fork bomb is only run where this
machine can bound it (a cgroup, or rlimits for a non-root user: ``dsh.core.process``'s own
answer), and a watchdog in the test kills it outright should it ever pass 400 processes,
so a broken limit fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.core.limits import Limits
from dsh.core.process import enforcement

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from proctable import pids_with
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux limits")

TIGHT = {"processes": 64, "memory_mb": 256, "cpu_seconds": 60, "file_size_mb": 64}
BOMB_CAP = 400
"""More processes of the bomb than this means its limit failed: the watchdog kills it."""


def bounded_here(limits: Limits) -> bool:
    """Whether a fork bomb under ``limits`` is bounded on this machine."""
    found = enforcement(limits)
    return found.how.startswith(("cgroup", "systemd")) or (
        found.how == "rlimits" and os.getuid() != 0)


class Watchdog:
    """Counts the bomb's processes every few milliseconds; kills them all past the cap."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.most = 0
        self.tripped = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.kill_all()

    def kill_all(self) -> None:
        for pid in pids_with(self.token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue

    def _run(self) -> None:
        while not self._stop.is_set():
            count = len(pids_with(self.token))
            self.most = max(self.most, count)
            if count > BOMB_CAP:
                self.tripped = True
                self.kill_all()
            time.sleep(0.02)


def start(tmp_path: Path, calls: list[dict[str, Any]], shell: dict[str, Any]) -> RuntimeProcess:
    script = [{"text": f"step {i}", "tool_calls": [call]} for i, call in enumerate(calls)]
    (tmp_path / "script.json").write_text(json.dumps([*script, {"text": "done"}]))
    patch = tmp_path / "patch.json"
    patch.write_text(json.dumps([
        {"id": "llm-scripted", "merge": {"config": {"script": str(tmp_path / "script.json")}}},
        {"id": "tools:shell", "merge": {"config": shell}}]))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work)
    proc.initialize(work, provider="scripted", model="scripted")
    return proc


def results(proc: RuntimeProcess) -> list[str]:
    history = proc.call("session/history", {"sessionId": "t1"})["result"]["events"]
    return ["".join(b.get("text", "") for b in e["data"]["message"]["content"])
            for e in history if e["type"] == "tool/result"]


@pytest.mark.parametrize("mode", ["off", "workspace-write"])
def test_a_fork_bomb_and_a_memory_bomb_stay_inside_their_command(tmp_path: Path,
                                                                  mode: str) -> None:
    limits = Limits.from_config(TIGHT)
    if not bounded_here(limits):
        pytest.skip(f"nothing bounds processes here ({enforcement(limits).detail})")
    token = f"dsh-bomb-{os.getpid()}-{os.urandom(3).hex()}"
    bomb = f"bash -c 'b() {{ b | b & }}; b; sleep 30' {token}"
    hog = ("python3 -c \"b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); "
           "print('allocated')\"")
    calls = [{"name": "bash", "arguments": {"command": bomb, "timeout": 4}},
             {"name": "bash", "arguments": {"command": hog, "timeout": 60}},
             {"name": "bash", "arguments": {"command": "echo still fine"}}]
    shell = {"limits": TIGHT, "sandbox": {"mode": mode}}
    with Watchdog(token) as watchdog:
        proc = start(tmp_path, calls, shell)
        try:
            proc.call("session/prompt", {"sessionId": "t1", "contentBlocks": [
                {"type": "text", "text": "go"}]})
            proc.until("session.event",
                       lambda f: f["params"]["event"]["type"] == "tool/call", timeout=30)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:  # the runtime answers all along the bomb
                status = proc.call("runtime/status", timeout=10)
                assert status["result"]["state"] == "ready", status
                assert subprocess.run(["true"]).returncode == 0  # so does the machine
                time.sleep(0.2)
            proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                       timeout=120)
            texts = results(proc)
            proc.close_stdin()
            assert proc.wait() == 0
        finally:
            proc.finish()
        assert not watchdog.tripped, f"the bomb grew past {BOMB_CAP} processes"
    assert 0 < watchdog.most <= TIGHT["processes"] + 8, watchdog.most
    assert "[Command timed out after 4 seconds" in texts[0], texts[0]
    assert "allocated" not in texts[1] and "exit code 0]" not in texts[1], texts[1]
    assert texts[2].endswith("still fine\n[Command finished with exit code 0]"), texts[2]
    assert not pids_with(token), "the bomb outlived its command"


def test_per_process_rlimits_hold_without_a_cgroup(tmp_path: Path) -> None:
    """``cgroup: false``: memory is ``RLIMIT_DATA``, and file size and CPU time are rlimits
    in every case."""
    calls = [
        {"name": "bash", "arguments": {"command": "ulimit -t; ulimit -f; ulimit -d"}},
        {"name": "bash", "arguments": {"command": (
            "python3 -c \"b = bytearray(1 << 30); print('allocated')\"")}},
        {"name": "bash", "arguments": {"command": (
            "head -c 3145728 /dev/zero > big; echo written $?; wc -c < big")}},
        {"name": "bash", "arguments": {"command": "while :; do :; done"}},
    ]
    shell = {"sandbox": {"mode": "off"}, "limits": {
        "cgroup": False, "memory_mb": 256, "file_size_mb": 2, "cpu_seconds": 1}}
    proc = start(tmp_path, calls, shell)
    try:
        proc.call("session/prompt", {"sessionId": "t1", "contentBlocks": [
            {"type": "text", "text": "go"}]})
        proc.until("session.status", lambda f: f["params"]["status"] == "idle", timeout=120)
        texts = results(proc)
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    cpu, blocks, data = texts[0].splitlines()[:3]
    assert (cpu, data) == ("1", str(256 * 1024)), texts[0]
    assert int(blocks) * 1024 in (2 * 1024 * 1024, 4 * 1024 * 1024), texts[0]  # KiB or 512 B
    assert "MemoryError" in texts[1] and "allocated" not in texts[1], texts[1]
    assert "written 1" in texts[2] and "\n2097152\n" in texts[2], texts[2]
    assert texts[3].endswith(("exit code 152]", "exit code 137]")), texts[3]  # XCPU, KILL


def test_commands_run_in_a_cgroup_of_their_own_where_one_can_be_made(tmp_path: Path) -> None:
    limits = Limits.from_config(TIGHT)
    found = enforcement(limits)
    if not found.how.startswith("cgroup"):
        pytest.skip(f"no cgroup here: {found.detail}")
    calls = [{"name": "bash", "arguments": {"command": "cat /proc/self/cgroup"}}]
    proc = start(tmp_path, calls, {"sandbox": {"mode": "off"}, "limits": TIGHT})
    try:
        proc.call("session/prompt", {"sessionId": "t1", "contentBlocks": [
            {"type": "text", "text": "go"}]})
        proc.until("session.status", lambda f: f["params"]["status"] == "idle", timeout=60)
        text = results(proc)[0]
        pid = proc.proc.pid
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    assert f"/dsh-{pid}-" in text, text
    for line in text.splitlines():  # the runtime removed the cgroup after the command
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0].isdigit() and f"/dsh-{pid}-" in parts[2]:
            for mount in _cgroup_mounts(parts[1]):
                assert not (mount / parts[2].lstrip("/")).exists(), f"{line}: not removed"


def _cgroup_mounts(controllers: str) -> list[Path]:
    """Where the hierarchy of a /proc/self/cgroup line is mounted (mount roots of /)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if rest and rest[0] in ("cgroup", "cgroup2") and fields[3] == "/":
            options = set(rest[2].split(","))
            if (not controllers and rest[0] == "cgroup2") or \
                    set(controllers.split(",")) <= options:
                found.append(Path(fields[4]))
    return found


def test_doctor_shows_how_the_limits_are_enforced(run_dsh, tmp_path: Path) -> None:
    limits = Limits()
    found = enforcement(limits)
    checks = json.loads(run_dsh("doctor", "--json").stdout)["data"]["checks"]
    check = next(c for c in checks if c["id"] == "limits.tools:shell")
    assert check["message"] == f"{found.how}: {found.detail}" or \
        check["message"].startswith(f"{found.how}: {found.detail} (running as root")
    assert check["status"] == ("ok" if found.how.startswith(("cgroup", "systemd")) else "warn"
                               if os.getuid() == 0 or found.how == "none" else "ok")
    patch = tmp_path / "no-cgroup.yml"
    patch.write_text("- {id: 'tools:shell', merge: {config: {limits: {cgroup: false, "
                     "memory_mb: 512}}}}\n")
    checks = json.loads(run_dsh("doctor", "--json", "--patch", str(patch)).stdout)
    check = next(c for c in checks["data"]["checks"] if c["id"] == "limits.tools:shell")
    assert check["message"].startswith(
        "rlimits: memory 512 MiB, processes 4096, file size 16384 MiB, cpu 3600 s: cgroups "
        "off in config; rlimits for cpu, data, fsize"), check
    bad = tmp_path / "bad.yml"
    bad.write_text("- {id: 'tools:shell', merge: {config: {limits: {processes: -1}}}}\n")
    checks = json.loads(run_dsh("doctor", "--json", "--patch", str(bad)).stdout)
    # A config its schema refuses is the doctor's own check of every row (config.<row>),
    # the row's diagnose is not asked about a config the runtime would not start with.
    check = next(c for c in checks["data"]["checks"] if c["id"] == "config.tools:shell")
    assert check["status"] == "fail" and "config.limits.processes" in check["message"]
