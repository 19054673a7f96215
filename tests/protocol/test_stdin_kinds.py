"""The stdio applications with every kind of stdin a shell can hand them.

``sdk``, ``sdk-minimal`` and ``acp`` read their requests from stdin. Whatever stdin is (a
pipe, a regular file, ``/dev/null``, a closed descriptor, a terminal) the application
answers what it was sent and exits 0 at EOF, with no traceback and no hang. The loop's
pipe transports serve only pipes, sockets and terminals (epoll refuses ``/dev/null`` and
regular files), which is what these pin. At a terminal (a person, driven here through a
real pseudo-terminal with pexpect) they first say in one stderr line what they speak and
what to use instead, and serve all the same; anywhere else they say nothing.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from runtimeproc import assert_frame

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX descriptors and ptys")

GUARD = 60.0
REQUESTS = {
    "sdk": {"jsonrpc": "2.0", "id": 1, "method": "runtime/status"},
    "sdk-minimal": {"jsonrpc": "2.0", "id": 1, "method": "runtime/status"},
    "acp": {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": 1}},
}


def argv(profile: str) -> list[str]:
    return [sys.executable, "-m", "dsh", "--profile", profile]


def check_clean(done: subprocess.CompletedProcess[bytes]) -> None:
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr


def check_answer(profile: str, stdout: bytes) -> None:
    frames = [assert_frame(line + b"\n") for line in stdout.splitlines()]
    assert [f.get("id") for f in frames] == [1], frames
    assert "result" in frames[0], frames[0]
    if profile == "acp":
        assert frames[0]["result"]["protocolVersion"] == 1
    else:
        assert frames[0]["result"]["profile"] == profile


@pytest.mark.parametrize("profile", sorted(REQUESTS))
def test_dev_null_is_an_immediate_eof(profile: str) -> None:
    with open(os.devnull, "rb") as devnull:
        done = subprocess.run(argv(profile), stdin=devnull, capture_output=True,
                              timeout=GUARD)
    check_clean(done)
    assert done.stdout == b""


@pytest.mark.parametrize("profile", ["sdk", "acp"])
def test_a_closed_descriptor_reads_as_eof(profile: str) -> None:
    # exec with fd 0 closed, as `dsh --profile sdk <&-` in a shell does.
    script = 'exec "$0" -m dsh --profile "$1" 0<&-'
    done = subprocess.run(["sh", "-c", script, sys.executable, profile],
                          capture_output=True, timeout=GUARD)
    check_clean(done)
    assert done.stdout == b""


@pytest.mark.parametrize("profile", ["sdk", "acp"])
def test_a_regular_file_is_answered_then_eof(profile: str, tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(REQUESTS[profile]) + "\n")
    with requests.open("rb") as stdin:
        done = subprocess.run(argv(profile), stdin=stdin, capture_output=True, timeout=GUARD)
    check_clean(done)
    check_answer(profile, done.stdout)


@pytest.mark.parametrize("profile", ["sdk", "acp"])
def test_a_pipe_is_answered_then_eof(profile: str) -> None:
    done = subprocess.run(argv(profile), input=json.dumps(REQUESTS[profile]).encode() + b"\n",
                          capture_output=True, timeout=GUARD)
    check_clean(done)
    check_answer(profile, done.stdout)
    assert done.stderr == b""  # a program's pipe gets no word meant for a person


HINTS = {
    "sdk": "dsh --profile sdk speaks JSON-RPC on stdin, for programs (the Python SDK, "
           "dsh.sdk); ",
    "acp": "dsh --profile acp is an ACP agent speaking JSON-RPC on stdin, for editors "
           "(programs use the Python SDK, dsh.sdk); ",
}


@pytest.mark.parametrize("profile", ["sdk", "acp"])
def test_a_person_at_a_terminal_is_told_what_it_speaks_and_it_still_serves(
        profile: str) -> None:
    """It used to print nothing and wait. Now one stderr line, before anything is typed,
    says what it speaks and what a person wants instead; a request typed anyway is still
    answered, and Ctrl-D ends it with 0."""
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(sys.executable, ["-m", "dsh", "--profile", profile],
                          timeout=GUARD, env=dict(os.environ), dimensions=(24, 400))
    try:
        child.expect_exact(HINTS[profile] + 'to run a task type `dsh --profile headless '
                           '"TASK"`, for a page in the browser `dsh web`; Ctrl-D quits\r\n')
        assert child.before == b""  # the hint is the first thing on the terminal
        child.sendline(json.dumps(REQUESTS[profile]))
        child.expect(rb'\{"jsonrpc":\s*"2.0",\s*"id":\s*1,\s*"result"')
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)


@pytest.mark.parametrize("profile", ["sdk", "acp"])
def test_a_terminal_is_answered_until_end_of_file(profile: str) -> None:
    """A person typing: the request is one line, then Ctrl-D (EOF at a line start)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(argv(profile), stdin=secondary, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    os.close(secondary)
    try:
        os.write(primary, json.dumps(REQUESTS[profile]).encode() + b"\n")
        assert proc.stdout is not None
        check_answer(profile, proc.stdout.readline())
        os.write(primary, b"\x04")
        out, err = proc.communicate(timeout=GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(primary)
    check_clean(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert out == b""


def test_nothing_on_stdout_after_a_closed_stdout() -> None:
    """stdout closed as well (`>&-`): the answer has nowhere to go, the exit is still 0."""
    script = 'printf "%s\\n" "$2" | exec "$0" -m dsh --profile "$1" >&-'
    request = json.dumps(REQUESTS["sdk"])
    done = subprocess.run(["sh", "-c", script, sys.executable, "sdk", request],
                          capture_output=True, timeout=GUARD)
    check_clean(done)
