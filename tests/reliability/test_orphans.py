"""Nothing a runtime started is left running: ``setsid`` grandchildren, killed runtimes,
reused pids, zombies, escapes in a loop. Real runtimes, real processes, read from ``/proc``.

Each orphan is what a daemon makes: ``setsid -f`` forks, the child starts a session of its
own and execs ``sleep`` (renamed to a token the test finds it by), the forking parent
exits at once, so the process has left both its process group and its parent. It is left
by a shell command, a background job and an MCP server, and must be gone when what
started it stops, after a clean exit, and, after the runtime is SIGKILLed, after the next
start on the same home. Each runs under every containment this machine offers
(``DSH_CONTAINMENT``: a cgroup v2, a cgroup v1, the runtime as subreaper; an unavailable
one is skipped with the reason, the subreaper is available on every Linux).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from faultkit import OFFLINE_PATCH, SETTLE, Figure, eventually
from proctable import argv0
from sandboxrungs import LANDLOCK_WAYS, Arranged, arrange, skip_reason

from dsh.core import containers, process

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import RuntimeProcess

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1)")]

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_test_server.py"
MECHANISMS = {"cgroup-v2": "cgroup v2", "cgroup-v1": "cgroup v1",
              "subreaper": "the runtime as child subreaper"}
_tokens = itertools.count(1)


@functools.cache
def _how(mechanism: str) -> str:
    """What ``dsh.core.process`` chooses here when asked for ``mechanism`` (in a process of
    its own, with the environment a runtime would have)."""
    proc = subprocess.run([sys.executable, "-c", "from dsh.core.process import containment;"
                           "print(containment())"], capture_output=True, text=True,
                          env={**os.environ, process.CONTAINMENT_ENV: mechanism}, check=True)
    return proc.stdout.strip()


def _usable(mechanism: str) -> str:
    """``mechanism``, or the test skipped when this machine does not offer it."""
    how = _how(mechanism)
    if not how.startswith(MECHANISMS[mechanism]):
        pytest.skip(f"{mechanism} is not available here: {how}")
    return mechanism


@pytest.fixture(params=list(MECHANISMS))
def mechanism(request: pytest.FixtureRequest) -> str:
    return _usable(str(request.param))


def token() -> str:
    return f"dsh-orphan-{os.getpid()}-{next(_tokens)}"


def orphans(name: str) -> list[int]:
    """Live processes named ``name`` (the orphan's ``argv[0]``)."""
    return [pid for pid in containers.all_pids() if argv0(pid) == name.encode()
            and (s := containers.stat(pid)) is not None and s.state != "Z"]


def leave(name: str) -> str:
    """The shell words that leave an orphan named ``name`` behind."""
    return f"setsid -f bash -c 'exec -a {name} sleep 120'"


def count_in_runtime(name: str) -> str:
    """A command that prints how many processes named ``name`` run (its own command line
    never holds the name whole)."""
    half = len(name) // 2
    return (f"t={name[:half]}; t=${{t}}{name[half:]}; n=0; for p in /proc/[0-9]*; do "
            "c=$( { tr '\\0' ' ' < $p/cmdline; } 2>/dev/null ); [[ $c == \"$t \"* ]] && "
            "n=$((n+1)); "
            "done; echo \"alive: $n\"")


class Runtime:
    """A real ``dsh --profile sdk`` on ``home`` with the scripted model and ``steps``."""

    def __init__(self, tmp: Path, home: Path, mechanism: str, steps: list[dict[str, Any]],
                 name: str, rows: list[dict[str, Any]] = (),  # type: ignore[assignment]
                 env: dict[str, str] | None = None, wrapper: list[str] | None = None) -> None:
        work = tmp / "work"
        work.mkdir(exist_ok=True)
        script = tmp / f"{name}.json"
        script.write_text(json.dumps(steps))
        patch = tmp / f"{name}.yml"
        patch.write_text(json.dumps([
            {"id": "llm-scripted", "merge": {"config": {"script": str(script)}}},
            {"id": "tools:shell", "merge": {"config": {"sandbox": {"mode": "off"}}}}, *rows]))
        self.work = work
        self.kept: list[dict[str, Any]] = []
        self.proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work, env={
            "DSH_HOME": str(home), process.CONTAINMENT_ENV: mechanism, **(env or {})},
            wrapper=wrapper or [])
        self.proc.initialize(work, provider="scripted", model="scripted")

    def prompt(self, **params: Any) -> None:
        answer = self.proc.call("session/prompt", {
            "sessionId": "s1", "contentBlocks": [{"type": "text", "text": "go"}], **params})
        assert "result" in answer, answer

    def status(self) -> dict[str, Any]:
        """``runtime/status`` mid-turn, keeping the turn's notifications for :meth:`idle`."""
        rid = self.proc.request("runtime/status")
        while True:
            frame = self.proc.recv(SETTLE)
            if "method" not in frame and frame.get("id") == rid:
                return frame
            self.kept.append(frame)

    def idle(self) -> list[dict[str, Any]]:
        def done(frame: dict[str, Any]) -> bool:
            return frame.get("method") == "session.status" \
                and frame["params"]["status"] == "idle"

        frames = self.kept if any(map(done, self.kept)) else [
            *self.kept, *self.proc.until("session.status", done, timeout=SETTLE * 3)]
        self.kept = []
        return [f["params"]["event"] for f in frames if f.get("method") == "session.event"]

    def exit_cleanly(self) -> None:
        self.proc.close_stdin()
        assert self.proc.wait(SETTLE) == 0, self.proc.stderr()
        self.proc.finish()

    def kill(self) -> None:
        os.kill(self.proc.proc.pid, signal.SIGKILL)
        self.proc.proc.wait(SETTLE)
        self.proc.finish()


def results(events: list[dict[str, Any]]) -> list[str]:
    return ["".join(b.get("text", "") for b in e["data"]["message"]["content"])
            for e in events if e["type"] == "tool/result"]


def bash(command: str, **args: Any) -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": "bash", "arguments": {"command": command,
                                                                      **args}}]}


# -- gone when what started it stops, and after a clean exit ---------------------------------


def test_a_shell_commands_setsid_grandchild_is_gone_when_it_ends(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    name = token()
    steps = [bash(f"{leave(name)}; sleep 0.3; {count_in_runtime(name)}"),
             bash(count_in_runtime(name)), {"text": "done"}]
    runtime = Runtime(tmp_path, dsh_home, mechanism, steps, "shell")
    try:
        runtime.prompt()
        during, after = results(runtime.idle())
        runtime.exit_cleanly()
    finally:
        runtime.proc.finish()
    assert "alive: 1" in during, during  # it ran, outside the command's group and parent
    assert "alive: 0" in after, after  # and was ended with the command
    assert orphans(name) == []
    figure("orphans left", 0)


def test_a_jobs_setsid_grandchild_is_gone_after_a_clean_exit(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    """A job's container lives as long as the job (its shell exits at once here): the
    orphan runs on until the runtime ends, then goes with it."""
    name = token()
    steps = [bash(leave(name), run_in_background=True),
             bash(f"until {count_in_runtime(name)} | grep -q 'alive: 1'; do sleep 0.05; done; "
                  "echo seen"), {"text": "done"}]
    runtime = Runtime(tmp_path, dsh_home, mechanism, steps, "job")
    try:
        runtime.prompt()
        assert "seen" in results(runtime.idle())[-1]
        assert len(orphans(name)) == 1
        runtime.exit_cleanly()
    finally:
        runtime.proc.finish()
    eventually(lambda: orphans(name) == [], "the job's orphan gone after the runtime's exit")
    figure("orphans left", 0)


def mcp_server(name: str) -> dict[str, Any]:
    return {"name": "orphaner", "command": sys.executable,
            "args": [str(SERVER), "--orphan", name], "env": []}


def test_an_mcp_servers_setsid_grandchild_is_gone_after_a_clean_exit(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    name = token()
    runtime = Runtime(tmp_path, dsh_home, mechanism, [{"text": "done"}], "mcp")
    try:
        created = runtime.proc.call("session/new", {"mcpServers": [mcp_server(name)]},
                                    timeout=SETTLE)
        assert "result" in created, created
        eventually(lambda: len(orphans(name)) == 1, "the server's orphan running")
        runtime.exit_cleanly()
    finally:
        runtime.proc.finish()
    eventually(lambda: orphans(name) == [], "the server's orphan gone after the exit")
    figure("orphans left", 0)


# -- after a SIGKILLed runtime, gone after the next start ------------------------------------


def _killed_then_restarted(tmp_path: Path, home: Path, mechanism: str, name: str,
                           runtime: Runtime) -> None:
    try:
        eventually(lambda: len(orphans(name)) == 1, "the orphan running")
        runtime.kill()
    finally:
        runtime.proc.finish()
    time.sleep(0.2)  # whatever the kernel's parent-death signal ends, it has ended
    assert len(orphans(name)) == 1, "the orphan outlived the SIGKILLed runtime"
    assert list((home / containers.RECORDS).glob("*.json")), "no record was left"
    again = Runtime(tmp_path, home, mechanism, [{"text": "done"}], "next")
    try:
        assert orphans(name) == []  # ended before the new runtime answered initialize
        assert not list((home / containers.RECORDS).glob("*.json"))
        again.exit_cleanly()
    finally:
        again.proc.finish()


def test_a_shell_commands_orphan_is_ended_by_the_next_start(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    name = token()
    runtime = Runtime(tmp_path, dsh_home, mechanism,
                      [bash(f"{leave(name)}; sleep 120"), {"text": "never"}], "shell")
    runtime.prompt()
    _killed_then_restarted(tmp_path, dsh_home, mechanism, name, runtime)
    figure("orphans left", 0)


def test_a_jobs_orphan_is_ended_by_the_next_start(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    name = token()
    runtime = Runtime(tmp_path, dsh_home, mechanism,
                      [bash(leave(name), run_in_background=True),
                       {"text": "waiting", "delay_ms": 120000}], "job")
    runtime.prompt()
    _killed_then_restarted(tmp_path, dsh_home, mechanism, name, runtime)
    figure("orphans left", 0)


def test_an_mcp_servers_orphan_is_ended_by_the_next_start(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    name = token()
    runtime = Runtime(tmp_path, dsh_home, mechanism, [{"text": "done"}], "mcp")
    created = runtime.proc.call("session/new", {"mcpServers": [mcp_server(name)]},
                                timeout=SETTLE)
    assert "result" in created, created
    _killed_then_restarted(tmp_path, dsh_home, mechanism, name, runtime)
    figure("orphans left", 0)


# -- a reused pid is never killed ------------------------------------------------------------


def _dead_identity() -> containers.Identity:
    """The identity of a runtime that has exited (a real process, gone)."""
    gone = subprocess.Popen(["sleep", "0"])
    start = containers.start_time(gone.pid) or 0
    gone.wait()
    return containers.Identity(gone.pid, start, containers.boot_id())


def test_a_pid_reused_by_another_process_is_never_killed(dsh_home: Path,
                                                         figure: Figure) -> None:
    """The record says a child ran as pid P since time T; a process now at P that started
    at another time is someone else's, and ``dsh doctor`` (like a start) leaves it be.
    The same record with the right start time ends it (so the check can fail)."""
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        real = containers.start_time(stranger.pid)
        assert real is not None
        path = containers.record_path(dsh_home, _dead_identity())
        for recorded, survives in ((real + 1, True), (real, False)):
            containers.write_record(path, containers.Record(
                _dead_identity(), children=((stranger.pid, recorded),)))
            doctor = subprocess.run([sys.executable, "-m", "dsh", "doctor", "--json"],
                                    capture_output=True, text=True, timeout=120,
                                    env={**os.environ, "DSH_HOME": str(dsh_home)})
            checks = {c["id"]: c for c in json.loads(doctor.stdout)["data"]["checks"]}
            message = checks["processes"]["message"]
            assert not path.exists()  # the dead runtime's record is gone either way
            if survives:
                time.sleep(0.2)
                assert stranger.poll() is None, "a reused pid was killed"
                assert "that killed runtimes of this home left" not in message, message
            else:
                assert stranger.wait(SETTLE) == -signal.SIGKILL
                assert message.endswith("; ended 1 processes that killed runtimes of this "
                                        "home left running"), message
    finally:
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait()
    figure("reused pids killed", 0)


def test_a_live_runtimes_record_and_marker_are_left_alone(dsh_home: Path) -> None:
    """A record whose runtime still runs (this test process) is not a leftover, nor is a
    process carrying that runtime's marker."""
    me = containers.identity()
    marked = subprocess.Popen(["sleep", "120"], env={
        **os.environ, containers.MARKER: f"{me.token}/1"})
    try:
        path = containers.record_path(dsh_home, me)
        containers.write_record(path, containers.Record(
            me, children=((marked.pid, containers.start_time(marked.pid) or 0),)))
        assert process.sweep(dsh_home) == 0
        assert path.exists() and marked.poll() is None
    finally:
        marked.kill()
        marked.wait()


# -- reaping: orphans, and only orphans ------------------------------------------------------


def _zombies_of(pid: int) -> int:
    return sum(1 for child in containers.children(pid)
               if (s := containers.stat(child)) is not None and s.state == "Z")


def test_escapes_in_a_loop_are_reaped_and_every_status_kept(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    """500 processes that leave their group and parent and exit at once (each a zombie the
    runtime inherits as subreaper) while a job runs: the zombies are reaped, the job's
    own exit status is still what the model reads, and ``runtime/status`` answers."""
    loops = 500
    steps = [bash("sleep 2; exit 7", run_in_background=True),
             bash(f"for i in $(seq {loops}); do setsid -f true; done; echo looped"),
             {"text": "", "tool_calls": [{"name": "job_output", "arguments": {
                 "job_id": "job-1", "wait": True, "timeout_ms": 30000}}]},
             {"text": "done"}]
    runtime = Runtime(tmp_path, dsh_home, mechanism, steps, "reap")
    try:
        runtime.prompt()
        status = runtime.status()
        assert "result" in status, status
        texts = results(runtime.idle())
        assert "looped" in texts[1], texts
        assert "exit code 7" in texts[2], texts[2]
        eventually(lambda: _zombies_of(runtime.proc.proc.pid) == 0,
                   "the inherited zombies reaped")
        figure("zombies left", _zombies_of(runtime.proc.proc.pid))
        runtime.exit_cleanly()
    finally:
        runtime.proc.finish()


def test_a_command_that_escapes_in_a_loop_is_contained(
        tmp_path: Path, dsh_home: Path, mechanism: str, figure: Figure) -> None:
    """A command that leaves orphans behind as fast as it can, until its timeout: when it
    is killed, every one of them goes too, and the runtime answers meanwhile."""
    name = token()
    steps = [bash(f"while :; do {leave(name)}; done", timeout=3), {"text": "done"}]
    runtime = Runtime(tmp_path, dsh_home, mechanism, steps, "loop")
    try:
        runtime.prompt()
        eventually(lambda: len(orphans(name)) >= 20, "the loop leaving orphans")
        status = runtime.status()
        assert "result" in status, status
        texts = results(runtime.idle())
        assert "timed out" in texts[0], texts
        left = orphans(name)
        assert left == [], f"{len(left)} orphans outlived their command"
        runtime.exit_cleanly()
    finally:
        runtime.proc.finish()
    figure("orphans left", 0)


# -- on the sandbox's Landlock rung ----------------------------------------------------------


CGROUPS = ("cgroup-v2", "cgroup-v1")
LANDLOCK_SHELL = [{"id": "tools:shell", "merge": {"config": {
    "sandbox": {"mode": "workspace-write"}, "limits": {"cgroup": False}}}}]
"""The shipped sandbox back on, and no limits cgroup: the command's one cgroup is its
container, which it must join by itself before it is confined."""


def _landlock(way: str, tmp: Path) -> Arranged:
    if why := skip_reason(way):
        pytest.skip(why)
    return arrange(way, tmp)


def _container_lines(text: str, runtime: int) -> list[str]:
    """The ``/proc/self/cgroup`` lines in ``text`` naming a container of ``runtime``."""
    return [line for line in text.splitlines()
            if re.fullmatch(rf"\d+:[\w,=]*:/(.*/)?dsh-{runtime}\.\d+-\d+", line)]


@pytest.mark.parametrize("way", LANDLOCK_WAYS)
@pytest.mark.parametrize("mechanism", CGROUPS)
def test_a_landlock_confined_command_starts_in_a_cgroup_of_its_own_and_goes_whole(
        tmp_path: Path, dsh_home: Path, mechanism: str, way: str, figure: Figure) -> None:
    """On the Landlock rung (each way there) with no limits cgroup, a command joins its
    container in its child, before it is confined (a join wrapper running after the
    confinement would need a ``cgroup.procs`` the rung does not grant, and the command
    would not start): it runs, it and a ``setsid`` grandchild are in the one cgroup named
    after the runtime, and the grandchild is gone when the command stops."""
    _usable(mechanism)
    arranged = _landlock(way, tmp_path)
    name = token()
    grandchild = (f"setsid -f bash -c 'cat /proc/self/cgroup > orphan.tmp && "
                  f"mv orphan.tmp orphan.txt; exec -a {name} sleep 120'")
    steps = [bash(f"ls /tmp >/dev/null 2>&1 || echo host-tmp-refused; cat /proc/self/cgroup; "
                  f"{grandchild}; until [ -s orphan.txt ]; do sleep 0.05; done; "
                  "echo started"), {"text": "done"}]
    runtime = Runtime(tmp_path, dsh_home, mechanism, steps, "landlock", rows=LANDLOCK_SHELL,
                      env=arranged.env, wrapper=arranged.wrapper)
    pid = runtime.proc.proc.pid
    try:
        runtime.prompt()
        (text,) = results(runtime.idle())
        left = orphans(name)  # the command has stopped: its container was emptied
        runtime.exit_cleanly()
    finally:
        runtime.proc.finish()
    assert "host-tmp-refused" in text and "started" in text, text  # Landlock, and it ran
    mine = _container_lines(text, pid)
    assert len(mine) == 1, text  # one container, in the hierarchy asked for
    assert mine[0].startswith("0::") == (mechanism == "cgroup-v2"), mine
    assert _container_lines((runtime.work / "orphan.txt").read_text(), pid) == mine
    assert left == [], f"{len(left)} grandchildren outlived the confined command"
    figure("orphans left", len(left))


@pytest.mark.parametrize("sandbox", ["workspace-write", "off"])
@pytest.mark.parametrize("mechanism", CGROUPS)
def test_a_landlock_confined_command_cannot_write_any_cgroup_procs(
        tmp_path: Path, dsh_home: Path, mechanism: str, sandbox: str) -> None:
    """A confined command tries to pull an outside process into its container (which its
    stop then kills), to make a cgroup, and to move itself to its runtime's cgroup and to
    another cgroup: each is refused, and nothing moved. ``off`` is the control: the same
    command unsandboxed, as root, does all four (so the refusals are the rung's)."""
    _usable(mechanism)
    arranged = _landlock("landlock-docker-bwrap", tmp_path)
    if sandbox == "off" and os.geteuid() != 0:
        pytest.skip("the control needs root (who may write any cgroup.procs)")
    parent = Path(containers.sites(mechanism)[0].parent)  # the runtime's own cgroup
    target = parent / f"escape-target-{os.getpid()}"
    made = parent / f"escape-made-{os.getpid()}"
    target.mkdir()
    stranger = subprocess.Popen(["sleep", "120"])
    before = Path(f"/proc/{stranger.pid}/cgroup").read_text()
    command = "; ".join([
        "own=$(grep -o 'dsh-[0-9.]*-[0-9]*' /proc/self/cgroup | head -1)",
        f'{{ echo {stranger.pid} > "{parent}/$own/cgroup.procs" && echo pulled-in; }}',
        f"{{ mkdir {made} && echo made; }}",
        f"{{ echo $$ > {parent}/cgroup.procs && echo moved-to-parent; }}",
        f"{{ echo $$ > {target}/cgroup.procs && echo moved-to-target; }}",
        "cat /proc/self/cgroup"])
    rows = [{"id": "tools:shell", "merge": {"config": {"sandbox": {"mode": sandbox},
                                                       "limits": {"cgroup": False}}}}]
    runtime = Runtime(tmp_path, dsh_home, mechanism, [bash(f"{command} 2>&1"),
                                                      {"text": "done"}],
                      "escape", rows=rows, env=arranged.env)
    pid = runtime.proc.proc.pid
    try:
        runtime.prompt()
        (text,) = results(runtime.idle())
        runtime.exit_cleanly()
        words = [w for w in ("pulled-in", "made", "moved-to-parent", "moved-to-target")
                 if re.search(rf"^{w}$", text, re.M)]
        if sandbox == "off":
            assert len(words) == 4, text
            assert stranger.wait(SETTLE) == -signal.SIGKILL  # pulled in, killed at the stop
            return
        assert words == [], text
        assert text.count("Permission denied") == 4, text
        assert len(_container_lines(text, pid)) == 1, text  # still in its container
        assert stranger.poll() is None, "an outside process was pulled in and killed"
        assert Path(f"/proc/{stranger.pid}/cgroup").read_text() == before
        assert (target / "cgroup.procs").read_text() == ""
        assert not made.exists()
    finally:
        runtime.proc.finish()
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait()
        for folder in (made, target):
            eventually(lambda f=folder: _removed(f), f"{folder} removed")


def _removed(folder: Path) -> bool:
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
