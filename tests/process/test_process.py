"""``dsh.core.process``: start, group, tie to the parent, stop ladder, reaping, Python children.

Real processes throughout; a process is found by a unique token in its command line
(``/proc``), so a test can tell that nothing it started is left.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from proctable import argv0, pids_with

from dsh.core import process

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")
LINUX = sys.platform.startswith("linux")


def eventually(check, what: str, bound: float = 5.0) -> None:
    deadline = time.monotonic() + bound
    while not check():
        assert time.monotonic() < deadline, f"not within {bound} s: {what}"
        time.sleep(0.02)


@pytest.fixture
def token() -> str:
    name = f"dsh-process-test-{os.getpid()}-{os.urandom(4).hex()}"
    yield name
    for pid in pids_with(name):
        os.kill(pid, signal.SIGKILL)


def test_run_captures_both_outputs_in_a_group_of_its_own() -> None:
    done = process.run(["sh", "-c", "echo out; echo err >&2; ps -o pgid= -p $$"], text=True)
    assert done.returncode == 0 and not done.timed_out
    lines = done.stdout.split()
    assert lines[0] == "out" and done.stderr == "err\n"
    assert int(lines[1]) != os.getpgid(0), "the child shares dsh's process group"


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_run_timeout_kills_the_whole_group(token: str) -> None:
    done = process.run(["bash", "-c", f"(exec -a {token}-a sleep 30) & exec -a {token}-b sleep 30"],
                       timeout=0.5)
    assert done.timed_out
    eventually(lambda: not pids_with(token), "no process of the group left")


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_finished_command_leaves_nothing_running(token: str) -> None:
    done = process.run(["bash", "-c", f"(exec -a {token} sleep 30) & echo started"], text=True)
    assert done.stdout == "started\n"
    eventually(lambda: not pids_with(token), "what the command left in its group is killed")


def test_stop_terminates_then_kills_after_the_grace() -> None:
    child = process.spawn(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"],
                          stderr=None)
    with child.popen:  # closes the pipe
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        started = time.monotonic()
        code = child.stop(0.3)
    assert code == -signal.SIGKILL, "a child ignoring SIGTERM is killed"
    assert time.monotonic() - started >= 0.3, "the grace was not given"


def test_stop_lets_a_polite_child_end_on_terminate() -> None:
    child = process.spawn(["sh", "-c", "trap 'exit 7' TERM; echo ready; "
                           "while :; do sleep 0.05; done"], stderr=None)
    with child.popen:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        assert child.stop(5) == 7


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_async_stop_reaches_the_whole_group_and_survives_cancellation(token: str) -> None:
    async def scenario() -> int | None:
        child = await process.spawn_async(
            ["bash", "-c", f"(exec -a {token} sleep 30) & echo up; exec sleep 30"],
            stderr=process.DEVNULL)
        assert child.stdout is not None and await child.stdout.readline() == b"up\n"
        stopping = asyncio.ensure_future(child.stop(0.2))
        await asyncio.sleep(0)
        stopping.cancel()  # the caller gives up: the stop still runs to its end
        with pytest.raises(asyncio.CancelledError):
            await stopping
        await child.stdout.read()  # EOF: nothing of the group holds the pipe
        return child.returncode

    assert asyncio.run(scenario()) is not None
    eventually(lambda: not pids_with(token), "the group is gone")


def test_async_exited_answers_while_a_grandchild_holds_the_pipe() -> None:
    async def scenario() -> tuple[bool, bool]:
        child = await process.spawn_async(["sh", "-c", "sleep 30 & exit 3"],
                                          stderr=process.DEVNULL)
        exited = await child.exited(10)
        await child.stop(0)
        assert child.stdout is not None
        await child.stdout.read()  # EOF: the grandchild died with its group
        return exited, child.returncode == 3

    assert asyncio.run(scenario()) == (True, True)


def test_a_missing_program_is_the_error_exec_gives(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        process.spawn(["no-such-program-anywhere"])
    with pytest.raises(FileNotFoundError):
        process.spawn([str(tmp_path / "missing")])
    with pytest.raises(PermissionError):
        process.spawn([str(tmp_path)])
    script = tmp_path / "script"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    with pytest.raises(FileNotFoundError):
        process.spawn([str(script)])
    plain = tmp_path / "plain"
    plain.write_text("echo plain\n")
    plain.chmod(0o644)
    with pytest.raises(PermissionError):
        process.spawn([str(plain)])


def test_the_child_gets_exactly_the_environment_given() -> None:
    done = process.run(["/usr/bin/env"], env={"PATH": os.defpath, "ONLY": "this"}, text=True)
    assert sorted(done.stdout.splitlines()) == ["ONLY=this", f"PATH={os.defpath}"]


@pytest.mark.skipif(not LINUX or shutil.which("setpriv") is None, reason="setpriv (Linux)")
def test_a_child_dies_with_a_killed_parent(tmp_path: Path, token: str) -> None:
    """The parent-death tie: a parent SIGKILLed (no cleanup runs) takes its child along."""
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from dsh.core import process
            child = process.spawn(["bash", "-c", "exec -a {token} sleep 60"], stdout=None)
            print(child.pid, flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        # Wait for the command itself (``exec -a`` makes the token its argv[0]): until
        # then the pid is setpriv or bash, whose command lines hold the token too, and a
        # parent killed before setpriv has armed the signal is the window docs/security.md
        # names, not the tie this test is about.
        eventually(lambda: argv0(pid) == token.encode(), "the child running")
        parent.kill()
        parent.wait()
        eventually(lambda: not pids_with(token), "the child killed with its parent")
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_kill_children_is_the_last_line(token: str) -> None:
    """A forced exit kills what this process started, through the module or not."""
    script = textwrap.dedent(f"""
        import subprocess
        from dsh.core import process
        mine = process.spawn(["bash", "-c", "exec -a {token}-mine sleep 60"], stdout=None)
        stray = subprocess.Popen(["bash", "-c", "exec -a {token}-stray sleep 60"],
                                 start_new_session=True)
        process.kill_children()
        print(mine.wait(5), stray.wait(5))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30)
    assert done.stdout.split() == [str(-signal.SIGKILL)] * 2, done.stderr
    assert not pids_with(token)


def test_pid_alive() -> None:
    assert process.pid_alive(os.getpid())
    assert not process.pid_alive(0) and not process.pid_alive(-1)
    child = subprocess.Popen(["true"])
    child.wait()
    assert not process.pid_alive(child.pid)


def test_python_command_keeps_the_working_directory_off_the_import_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both forms: ``-P`` (3.11+) and the 3.10 ``-c`` runner, each run by this interpreter
    in a folder whose ``json.py`` would announce itself if imported."""
    (tmp_path / "json.py").write_text("open('IMPORTED', 'w').write('json.py')\n")
    forms = [process.python_command("json.tool")]
    with monkeypatch.context() as m:
        m.setattr(sys, "version_info", (3, 10, 13, "final", 0))
        forms.append(process.python_command("json.tool"))
    assert forms[-1][1] == "-c"
    if sys.version_info >= (3, 11):
        assert forms[0][1:3] == ["-P", "-m"]
    for argv in forms:
        done = process.run([*argv, "--compact"], cwd=str(tmp_path), input=b'{"a": [1]}')
        assert done.returncode == 0, done.stderr
        assert done.stdout == b'{"a":[1]}\n'
        assert not (tmp_path / "IMPORTED").exists(), argv


def test_the_310_runner_gives_the_module_the_arguments_minus_main(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """``sys.argv`` as ``-m`` makes it: the module's path, then the arguments."""
    package = tmp_path / "site" / "argvprobe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import sys; print(sys.argv[1:], __name__)\n")
    with monkeypatch.context() as m:
        m.setattr(sys, "version_info", (3, 10, 13, "final", 0))
        argv = process.python_command("argvprobe")
    done = process.run([*argv, "a", "--b"], env={**os.environ,
                                                  "PYTHONPATH": str(tmp_path / "site")},
                       text=True)
    assert done.stdout == "['a', '--b'] __main__\n", done.stderr


def _python310() -> str | None:
    """A Python 3.10 interpreter on this machine, if any (PATH, then pyenv's versions)."""
    candidates = [shutil.which("python3.10"), "/usr/bin/python3.10",
                  *sorted(str(p) for p in Path("~/.pyenv/versions").expanduser()
                          .glob("3.10*/bin/python3.10"))]
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if done.stdout.strip() == "(3, 10)":
            return candidate
    return None


def test_the_310_runner_on_a_real_310_interpreter(tmp_path: Path) -> None:
    """3.10 has no ``-P``: its ``-c`` puts ``''`` first on ``sys.path``, which the runner
    drops before the module (here the stdlib's ``json.tool``) imports anything."""
    python = _python310()
    if python is None:
        pytest.skip("no Python 3.10 interpreter on this machine")
    (tmp_path / "json.py").write_text("open('IMPORTED', 'w').write('json.py')\n")
    done = process.run([python, "-c", process._SAFE_MAIN, "json.tool", "--compact"],
                       cwd=str(tmp_path), input=b'{"a": [1]}')
    assert (done.returncode, done.stdout) == (0, b'{"a":[1]}\n'), done.stderr
    assert not (tmp_path / "IMPORTED").exists()
    process.run([python, "-m", "json.tool"], cwd=str(tmp_path), input=b"{}")
    assert (tmp_path / "IMPORTED").exists(), "the control (plain -m) did not import json.py"


@pytest.mark.skipif(not LINUX or shutil.which("setpriv") is None, reason="Linux, setpriv")
def test_a_child_cannot_read_a_protected_parents_environment(tmp_path: Path) -> None:
    """As an ordinary user (root reads everything): the parent's launch environment holds a
    canary the child's own environment lacks; ``/proc/$PPID/environ`` shows it only when
    the parent did not call :func:`dsh.core.process.protect_parent`."""
    canary = "canary-" + os.urandom(8).hex()
    script = textwrap.dedent("""
        import os, sys
        from dsh.core import process
        if sys.argv[1] == "protect":
            process.protect_parent()
        done = process.run(["sh", "-c", "cat /proc/$PPID/environ"], env={"PATH": os.defpath})
        sys.stdout.write(repr(done.stdout))
    """)
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] \
        if os.getuid() == 0 else []
    if drop and subprocess.run([*drop, sys.executable, "-c", "import dsh.core.process"],
                               cwd=tmp_path, capture_output=True).returncode != 0:
        pytest.skip("this interpreter cannot run as user nobody here (its files are private)")
    seen = {}
    for mode in ("plain", "protect"):
        done = subprocess.run([*drop, sys.executable, "-c", script, mode], cwd=tmp_path,
                              env={**os.environ, "PARENT_CANARY": canary},
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        seen[mode] = done.stdout
    assert canary in seen["plain"], "the control run could not read its parent at all"
    assert canary not in seen["protect"], seen["protect"]
