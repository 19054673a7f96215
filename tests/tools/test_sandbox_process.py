"""The sandbox through one real ``dsh --profile sdk`` process (dsh-base's shipped default,
``workspace-write`` without network), driven over JSON-RPC by a scripted model, on every
rung and every way a machine lands on it (``tests/fixtures/sandboxrungs.py``): the real
bubblewrap; Landlock with seccomp where ``bwrap`` fails as in Docker, where there is no
``bwrap`` at all, and where the runtime itself runs under a seccomp filter refusing
namespaces; and no rung at all. The host is the verdict: no file outside, no connection
accepted, the build's output on disk. ``dsh sandbox`` is checked against the model's own
command: same rung, same decisions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from sandboxrungs import WAYS, arrange, skip_reason

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = [
    pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
]


def bash(command: str, **more: Any) -> dict[str, Any]:
    return {"text": "Running.", "tool_calls": [{"name": "bash",
                                                 "arguments": {"command": command, **more}}]}


def usable(way: str) -> str:
    """The way after skipping it when it cannot be tested here."""
    if why := skip_reason(way):
        pytest.skip(why)
    return way


def tool_texts(proc: RuntimeProcess, prompt: str = "go") -> list[str]:
    """Prompt session s1 and return its tool results' texts, in order."""
    proc.call("session/prompt", {"sessionId": "s1", "contentBlocks": [
        {"type": "text", "text": prompt}]})
    frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                        timeout=90)
    events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
    return ["".join(b.get("text", "") for b in e["data"]["message"]["content"])
            for e in events if e["type"] == "tool/result"]


def start(tmp_path: Path, work: Path, steps: list[dict[str, Any]], way: str,
          rows: list[dict[str, Any]] = ()) -> RuntimeProcess:
    """A runtime in ``work`` whose scripted model takes ``steps``, started ``way``."""
    script = tmp_path / "script.yml"
    script.write_text(json.dumps([*steps, {"text": "Done."}]))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted",
                                  "merge": {"config": {"script": str(script)}}}, *rows]))
    arranged = arrange(way, tmp_path)
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work, env=arranged.env,
                          wrapper=arranged.wrapper)
    proc.initialize(work, provider="scripted", model="scripted")
    return proc


@pytest.mark.parametrize("way", WAYS)
def test_the_shipped_sandbox_refuses_and_builds(tmp_path: Path, dsh_home: Path,
                                                way: str) -> None:
    usable(way)
    landlock = way != "bubblewrap"
    work = tmp_path / "project"
    work.mkdir()
    (work / "Makefile").write_text("out/stamp:\n\tmkdir -p out && echo built > out/stamp\n")
    (dsh_home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    with tempfile.TemporaryDirectory(prefix="dsh-sandbox-", dir="/var/tmp") as outside, \
            socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.settimeout(0)
        port = listener.getsockname()[1]
        proc = start(tmp_path, work, [
            bash(f"touch {outside}/escaped"),
            bash(f"cat {dsh_home}/.env; echo ${{SANDBOX_SECRET-unset}}"),
            bash(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
            bash("make -s && cat out/stamp"),
            bash(f"touch {outside}/escaped-job; echo job > job.txt", run_in_background=True),
            bash("sleep 0.5; cat job.txt"),
        ], way)
        try:
            tools = proc.call("tools/list")["result"]["tools"]
            described = next(t["description"] for t in tools if t["name"] == "bash")
            rung = "(Landlock ABI " if landlock else "(bubblewrap)"
            assert f"Commands run in a sandbox {rung}" in described, described
            texts = tool_texts(proc)
            assert len(texts) == 6, texts
            touch, cat, connect, build, started, job = texts
            denied = "Permission denied" if landlock else "Read-only file system"
            assert denied in touch and "exit code 1" in touch, touch
            assert not os.path.exists(os.path.join(outside, "escaped"))
            assert "hunter2" not in cat and ".env: " in cat and "\nunset\n" in cat, cat
            refused = "Permission denied" if landlock else "Connection refused"
            assert refused in connect and "connected" not in connect, connect
            with pytest.raises(BlockingIOError):
                listener.accept()
            assert build == "built\n[Command finished with exit code 0]", build
            assert (work / "out" / "stamp").read_text() == "built\n"
            assert started.startswith("Started background job job-"), started
            assert job.startswith("job\n"), job
            assert not os.path.exists(os.path.join(outside, "escaped-job"))
            proc.close_stdin()
            assert proc.wait() == 0
        finally:
            proc.finish()


def test_with_no_rung_commands_run_unsandboxed_or_are_refused(
        tmp_path: Path, dsh_home: Path) -> None:
    """bubblewrap failing as in Docker and Landlock's syscalls refused (a kernel without
    it): commands and jobs run and say so; with ``required``, both are refused."""
    usable("landlock-seccomp")
    work = tmp_path / "project"
    work.mkdir()
    steps = [bash("echo ran > ran.txt; echo out"),
             bash("echo job > job.txt", run_in_background=True),
             bash("for i in $(seq 200); do [ -s job.txt ] && break; sleep 0.05; done")]
    proc = start(tmp_path, work, steps, "none")
    try:
        ran, job, _ = tool_texts(proc)
        proc.close_stdin()
        assert proc.wait() == 0
        note = ran.splitlines()[0]
        assert note.startswith("[Not sandboxed: bwrap cannot create its sandbox here "
                               "(bwrap: Creating new namespace failed"), ran
        assert note.endswith("; this command ran without the workspace-write sandbox]")
        assert job.splitlines()[0] == note and "Started background job" in job, job
        assert (work / "ran.txt").read_text() == "ran\n"
    finally:
        proc.finish()
    (work / "ran.txt").unlink()
    (work / "job.txt").unlink()
    required = [{"id": "tools:shell", "merge": {"config": {"sandbox": {"required": True}}}}]
    proc = start(tmp_path, work, steps, "none", rows=required)
    try:
        for text in tool_texts(proc):
            assert text.startswith("Refused: this profile requires the workspace-write "
                                   "sandbox"), text
            assert "The command was not run." in text
        assert not (work / "ran.txt").exists() and not (work / "job.txt").exists()
    finally:
        proc.finish()


def doctor_sandbox(run_dsh: Any, tmp_path: Path, way: str,
                   *patches: Path) -> tuple[int, dict[str, Any]]:
    args = [a for p in patches for a in ("--patch", str(p))]
    arranged = arrange(way, tmp_path)
    env = {**os.environ, **arranged.env}
    proc = subprocess.run([*arranged.wrapper, sys.executable, "-m", "dsh", "doctor",
                           "--profile", "sdk", *args, "--json"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    document = json.loads(proc.stdout)
    checks = {c["id"]: c for c in document["data"]["checks"]}
    return proc.returncode, checks["sandbox.tools:shell"]


@pytest.mark.parametrize("way", [*WAYS, "none"])
def test_doctor_shows_the_rung_in_force(run_dsh: Any, tmp_path: Path, way: str) -> None:
    usable("landlock-seccomp" if way == "none" else way)
    code, check = doctor_sandbox(run_dsh, tmp_path, way)
    if way == "bubblewrap":
        assert (code, check["status"]) == (0, "ok"), check
        assert check["message"] == ("workspace-write, network off; bubblewrap works here "
                                    "(bash -c)")
    elif way == "none":
        assert (code, check["status"]) == (0, "warn"), check
        assert check["message"].startswith("workspace-write, network off, but bwrap cannot "
                                           "create its sandbox here (bwrap: Creating new "
                                           "namespace failed"), check
        assert "and Landlock cannot run here" in check["message"], check
        assert check["message"].endswith(": commands run unsandboxed"), check
    else:
        assert (code, check["status"]) == (0, "ok"), check
        message = check["message"]
        assert message.startswith("workspace-write, network off; Landlock ABI "), message
        assert " with seccomp (" in message and "unlike bubblewrap: no pid namespace" in message
        because = "was not found" if way == "landlock-no-bwrap" else \
            "Creating new namespace failed: Operation not permitted"
        assert because in message, message
    if way == "none":
        patch = tmp_path / "required.yml"
        patch.write_text(json.dumps([{"id": "tools:shell", "merge": {"config": {"sandbox": {
            "required": True}}}}]))
        code, check = doctor_sandbox(run_dsh, tmp_path, way, patch)
        assert (code, check["status"]) == (1, "fail"), check
        assert check["message"].endswith(": every command will be refused"), check


# -- dsh sandbox: the model's decisions, from a terminal ------------------------------------


PROBES = [
    "touch {outside}/escaped",
    "cat {home}/.env",
    "echo x > {home}/patch.yml",
    "exec 3<>/dev/tcp/127.0.0.1/{port}",
    "echo inside > made.txt && cat made.txt",
    "echo scratch > $(mktemp) && echo tmp-ok",
    "ls -A ~ >/dev/null && echo home-listed",
]


@pytest.mark.parametrize("way", WAYS)
def test_dsh_sandbox_makes_the_decisions_the_models_command_gets(
        tmp_path: Path, dsh_home: Path, way: str) -> None:
    usable(way)
    work = tmp_path / "project"
    work.mkdir()
    (dsh_home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    (dsh_home / "patch.yml").write_text("[]\n")
    with tempfile.TemporaryDirectory(prefix="dsh-sandbox-", dir="/var/tmp") as outside, \
            socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        commands = [p.format(outside=outside, home=dsh_home,
                             port=listener.getsockname()[1]) + "; echo rc=$?" for p in PROBES]
        proc = start(tmp_path, work, [bash(c) for c in commands], way)
        try:
            models = tool_texts(proc)
        finally:
            proc.finish()
        arranged = arrange(way, tmp_path)
        env = {**os.environ, **arranged.env}
        shell = shutil.which("bash", path=env["PATH"]) or "bash"  # as the shell row finds it
        for command, model in zip(commands, models, strict=True):
            (work / "made.txt").unlink(missing_ok=True)
            done = subprocess.run(
                [*arranged.wrapper, sys.executable, "-m", "dsh", "sandbox", "--quiet", "--",
                 shell, "-c", f"{{ {command}; }} 2>&1"], cwd=work, env=env,
                capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, done.stderr
            assert model.rsplit("[Command finished", 1)[0] == done.stdout, (command, model,
                                                                             done.stdout)
        assert not os.path.exists(os.path.join(outside, "escaped"))
    assert (dsh_home / "patch.yml").read_text() == "[]\n"


@pytest.mark.parametrize("way", WAYS)
def test_dsh_sandbox_says_which_rung_applied_and_exits_with_the_commands_status(
        tmp_path: Path, way: str) -> None:
    usable(way)
    arranged = arrange(way, tmp_path)
    env = {**os.environ, **arranged.env}
    work = tmp_path / "project"  # beside the dsh home, not around it
    work.mkdir()
    done = subprocess.run([*arranged.wrapper, sys.executable, "-m", "dsh", "sandbox", "--",
                           "sh", "-c", "echo out; echo err >&2; exit 7"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 7 and done.stdout == "out\n", done
    first, second, *rest = done.stderr.splitlines()
    expected = "bubblewrap (bubblewrap)" if way == "bubblewrap" else "landlock (Landlock ABI "
    assert first.startswith(f"dsh sandbox: rung {expected}"), done.stderr
    assert second.startswith("dsh sandbox: policy workspace-write, network off (row "
                             "'tools:shell'), workspace "), done.stderr
    assert rest == ["err"], done.stderr
    missing = subprocess.run([*arranged.wrapper, sys.executable, "-m", "dsh", "sandbox",
                              "--quiet", "--", "no-such-program-here"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 127, missing
    assert missing.stderr.endswith("no-such-program-here: command not found\n"), missing


def test_a_bad_allow_list_entry_stops_the_runtime_and_dsh_sandbox_with_one_line(
        tmp_path: Path, run_dsh: Any) -> None:
    patch = tmp_path / "bad.yml"
    patch.write_text(json.dumps([{"id": "tools:shell", "merge": {"config": {"sandbox": {
        "network": ["pypi.org", "https://files.pythonhosted.org/simple"]}}}}]))
    where = "row 'tools:shell' config.sandbox.network[1]: "
    for args in (["--profile", "sdk", "--patch", str(patch)],
                 ["sandbox", "--patch", str(patch), "--", "true"]):
        done = run_dsh(*args)
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and where in lines[0] and "a host, not a URL" in lines[0], \
            done.stderr


def _running(command: str) -> bool:
    """Whether a process whose whole command line is ``command`` runs on this host."""
    wanted = command.replace(" ", "\0").encode() + b"\0"
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read() == wanted:
                        return True
            except OSError:
                continue
    return False


@pytest.mark.parametrize("way", WAYS[:2])
def test_dsh_sandbox_stops_the_commands_whole_group_when_it_is_stopped(
        tmp_path: Path, way: str) -> None:
    usable(way)
    arranged = arrange(way, tmp_path)
    work = tmp_path / "project"
    work.mkdir()
    marker = f"{os.getpid() % 1000}.{len(way)}7"
    child = subprocess.Popen(
        [*arranged.wrapper, sys.executable, "-m", "dsh", "sandbox", "--", "sh", "-c",
         f"sleep 1{marker} & sleep 2{marker}"], cwd=work, env={**os.environ, **arranged.env},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert child.stderr is not None
        assert child.stderr.readline().startswith(b"dsh sandbox: rung ")
        for _ in range(500):
            if _running(f"sleep 1{marker}") and _running(f"sleep 2{marker}"):
                break
            time.sleep(0.02)
        else:
            pytest.fail("the command's processes never appeared")
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) == 128 + signal.SIGTERM
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    for _ in range(300):
        if not _running(f"sleep 1{marker}") and not _running(f"sleep 2{marker}"):
            break
        time.sleep(0.02)
    else:
        pytest.fail("what the command started outlived dsh sandbox")


@pytest.mark.parametrize("way", WAYS)
def test_dsh_sandbox_contains_the_command_as_a_runtime_does(tmp_path: Path, way: str) -> None:
    """The command gets its container's marker, as the model's does, and a ``setsid``
    grandchild (out of its group and its parent) is gone when ``dsh sandbox`` returns."""
    usable(way)
    arranged = arrange(way, tmp_path)
    work = tmp_path / "project"
    work.mkdir()
    name = f"dsh-sandbox-orphan-{os.getpid()}-{len(way)}"
    command = (f"setsid -f bash -c 'exec -a {name} sleep 120'; "
               f'until pgrep -f "^{name} " >/dev/null; do sleep 0.05; done; '
               'echo "marker=${DSH_CONTAINER:-none}"')
    done = subprocess.run(
        [*arranged.wrapper, sys.executable, "-m", "dsh", "sandbox", "--quiet", "--", "bash",
         "-c", command],
        cwd=work, env={**os.environ, **arranged.env}, capture_output=True, text=True,
        timeout=60, check=False)
    assert done.returncode == 0, done
    assert done.stdout.startswith("marker=") and "marker=none" not in done.stdout, done
    for _ in range(300):
        if not _running(f"{name} 120"):
            break
        time.sleep(0.02)
    else:
        pytest.fail("the command's setsid grandchild outlived dsh sandbox")
