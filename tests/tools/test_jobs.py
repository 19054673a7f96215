"""Background jobs and ``workdir``, in process: real shells, real pids, the row's own table.

Every scenario runs in one event loop (a job's output reader lives on it) and disposes the
row at the end, so a failing test leaves no process behind either.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import alive, make_plugin, tools_of
from sandboxrungs import skip_reason

from dsh.runtime.kernel.guardrails import Decision
from dsh.runtime.kernel.hooks import HookEvent
from dsh.runtime.tools import confine
from dsh.runtime.tools.base import ArgumentError, ToolCall, ToolContext, check_arguments
from dsh.runtime.tools.confine import Boundary
from dsh.runtime.tools.jobs import UnreadOutput
from dsh.runtime.tools.policy import decide
from dsh.runtime.tools.shell import ShellTools

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

Call = Callable[..., Awaitable[Any]]


async def gone(pid: int) -> bool:
    """Whether ``pid`` dies soon (signals are delivered asynchronously)."""
    for _ in range(300):
        if not alive(pid):
            return True
        await asyncio.sleep(0.01)
    return False


async def read_pid(path: Path) -> int:
    """The pid a job writes to ``path``, once it has."""
    for _ in range(500):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        await asyncio.sleep(0.01)
    raise AssertionError(f"no pid written to {path}")


def session(work: Path, session_id: str = "s1") -> ToolContext:
    return ToolContext(session_id, dict(os.environ), asyncio.Event(), lambda: str(work),
                       lambda p: p)


@contextlib.asynccontextmanager
async def shell_row(ctx: ToolContext, **config: Any) -> AsyncIterator[tuple[ShellTools, Call]]:
    """The row and ``call(name, ctx=..., **args)``; disposed (every job killed) at the end."""
    plugin = make_plugin(ShellTools, **config)
    tools = tools_of(plugin)

    async def call(name: str, on: ToolContext = ctx, **args: Any) -> Any:
        return await tools[name].call(check_arguments(tools[name], args), on)

    try:
        yield plugin, call  # type: ignore[misc]
    finally:
        await plugin.dispose()


def job_id(text: str) -> str:
    found = re.match(r"Started background job (job-\d+) \(pid \d+\) in ", text)
    assert found, text
    return found.group(1)


def test_unread_output_keeps_head_and_tail_and_whole_characters() -> None:
    out = UnreadOutput(6)
    for piece in (b"abc", b"defg", b"hij"):
        out.feed(piece)
    assert out.pending
    text = out.take()
    assert text.startswith("abc\n[... 4 characters of output dropped here: more than 6 "
                           "arrived between two reads ...]\n")
    assert text.endswith("hij")
    assert not out.pending and out.take() == ""
    euro = "€".encode()
    out.feed(euro[:1])
    assert out.take() == ""  # half a character is not handed out
    out.feed(euro[1:], final=True)
    assert out.take() == "€"
    assert out.total == 11


def test_job_outlives_the_call_then_reports_exit(work: Path) -> None:
    ctx = session(work)

    async def scenario() -> None:
        async with shell_row(ctx) as (_, call):
            started = await call("bash", run_in_background=True,
                                 command="echo $$ > pid; echo hello; sleep 0.3; exit 7")
            assert not started.is_error
            job = job_id(started.text)
            pid = await read_pid(work / "pid")
            assert alive(pid)  # the call has returned, the job runs on
            first = await call("job_output", job_id=job, wait=True, timeout_ms=5000)
            assert first.text.startswith("hello\n")
            assert not first.is_error
            text = ""
            while "exit code" not in text:
                text = (await call("job_output", job_id=job, wait=True, timeout_ms=5000)).text
            assert text.endswith(f"[{job} finished with exit code 7]")
            assert "hello" not in text  # already read: the cursor moved past it
            listed = (await call("job_list")).text
            assert listed == (f"{job}: finished with exit code 7; no unread output; in {work}: "
                              "echo $$ > pid; echo hello; sleep 0.3; exit 7")

    asyncio.run(scenario())


def test_wait_is_bounded_by_timeout_ms(work: Path) -> None:
    ctx = session(work)

    async def scenario() -> None:
        async with shell_row(ctx) as (_, call):
            job = job_id((await call("bash", command="sleep 300",
                                     run_in_background=True)).text)
            quiet = await call("job_output", job_id=job, wait=True, timeout_ms=100)
            assert quiet.text.startswith("(no new output)\n[")
            assert re.search(rf"\[{job} running \(pid \d+\)\]$", quiet.text), quiet.text

    asyncio.run(scenario())


def test_output_past_the_cap_is_cut_with_a_note(work: Path) -> None:
    ctx = session(work)

    async def scenario() -> None:
        async with shell_row(ctx, max_job_output_chars=100) as (_, call):
            job = job_id((await call("bash", run_in_background=True,
                                     command="for i in $(seq 1 2000); do echo line$i; done"
                                     )).text)
            listed = ""
            while "exit code" not in listed:
                await asyncio.sleep(0.02)
                listed = (await call("job_list")).text
            assert "; unread output;" in listed
            text = (await call("job_output", job_id=job)).text
            head, rest = text.split("\n[... ", 1)
            assert head.startswith("line1\nline2\n")
            dropped = int(rest.split(" ", 1)[0])
            total = sum(len(f"line{i}\n") for i in range(1, 2001))
            assert dropped == total - 100
            assert "characters of output dropped here: more than 100 arrived" in rest
            assert text.endswith(f"line2000\n[{job} finished with exit code 0]")
            again = (await call("job_output", job_id=job)).text
            assert again == f"(no new output)\n[{job} finished with exit code 0]"

    asyncio.run(scenario())


def test_another_sessions_job_answers_like_an_unknown_one(work: Path) -> None:
    mine, theirs = session(work, "s1"), session(work, "s2")

    async def scenario() -> None:
        async with shell_row(mine) as (_, call):
            job = job_id((await call("bash", run_in_background=True,
                                     command="echo $$ > pid; exec sleep 300")).text)
            pid = await read_pid(work / "pid")
            unknown = await call("job_output", on=theirs, job_id="job-999999")
            assert unknown.is_error
            assert unknown.text == ("no job 'job-999999' in this session (job_list shows "
                                    "this session's jobs)")
            for tool in ("job_output", "job_kill"):
                foreign = await call(tool, on=theirs, job_id=job)
                assert foreign.is_error
                assert foreign.text == unknown.text.replace("job-999999", job)
            assert (await call("job_list", on=theirs)).text == "No background jobs in this session."
            await asyncio.sleep(0.1)
            assert alive(pid)  # the foreign job_kill did nothing
            assert "running" in (await call("job_output", job_id=job)).text

    asyncio.run(scenario())


def test_job_kill_kills_the_whole_group_and_keeps_the_record(work: Path) -> None:
    ctx = session(work)

    async def scenario() -> None:
        async with shell_row(ctx) as (_, call):
            job = job_id((await call("bash", run_in_background=True, command=(
                "sleep 300 & echo $! > child; echo $$ > leader; echo up; wait"))).text)
            child, leader = await read_pid(work / "child"), await read_pid(work / "leader")
            assert alive(child) and alive(leader)
            killed = await call("job_kill", job_id=job, reason="no longer needed")
            expected = f"killed (no longer needed), exit code {128 + signal.SIGTERM}"
            assert killed.text == f"Killed {job}: {expected}."
            assert await gone(child) and await gone(leader)
            assert (await call("job_output", job_id=job)).text == f"up\n[{job} {expected}]"
            again = await call("job_kill", job_id=job)
            assert again.text.startswith(f"{job} had already {expected}")

    asyncio.run(scenario())


def test_a_group_ignoring_sigterm_gets_sigkill(work: Path) -> None:
    ctx = session(work)

    async def scenario() -> None:
        async with shell_row(ctx) as (_, call):
            job = job_id((await call("bash", run_in_background=True, command=(
                "trap '' TERM; echo $$ > pid; while :; do sleep 0.05; done"))).text)
            pid = await read_pid(work / "pid")
            killed = await call("job_kill", job_id=job)
            assert killed.text == f"Killed {job}: killed (job_kill), exit code {128 + 9}."
            assert await gone(pid)

    asyncio.run(scenario())


def test_job_count_is_bounded_per_session(work: Path) -> None:
    ctx = session(work)

    async def scenario() -> None:
        async with shell_row(ctx, max_jobs=2) as (_, call):
            first = job_id((await call("bash", command="sleep 300",
                                       run_in_background=True)).text)
            job_id((await call("bash", command="sleep 300", run_in_background=True)).text)
            refused = await call("bash", command="echo $$ > third", run_in_background=True)
            assert refused.is_error
            assert refused.text == ("too many background jobs in this session (2 running, "
                                    "the limit is 2); stop one with job_kill first")
            other = await call("bash", command="sleep 300", run_in_background=True,
                               on=session(work, "s2"))
            assert not other.is_error  # the cap is per session
            await call("job_kill", job_id=first)
            # The finished record makes room: it is dropped, the new job starts.
            third = await call("bash", command="echo $$ > third", run_in_background=True)
            assert not third.is_error, third.text
            assert await read_pid(work / "third")
            assert (await call("job_output", job_id=first)).is_error

    asyncio.run(scenario())


def test_session_end_kills_that_sessions_jobs_and_dispose_the_rest(work: Path) -> None:
    one, two = session(work, "s1"), session(work, "s2")

    async def scenario() -> None:
        async with shell_row(one) as (plugin, call):
            await call("bash", run_in_background=True, command="echo $$ > p1; exec sleep 300")
            await call("bash", run_in_background=True, command="echo $$ > p2; exec sleep 300",
                       on=two)
            p1, p2 = await read_pid(work / "p1"), await read_pid(work / "p2")
            await plugin._session_end(HookEvent("session_end", None, session_id="s1"))
            assert await gone(p1)
            assert alive(p2)
            assert (await call("job_list")).text == "No background jobs in this session."
            await plugin.dispose()
            assert await gone(p2)
            late = await call("bash", command="sleep 300", run_in_background=True)
            assert late.is_error and "shutting down" in late.text

    asyncio.run(scenario())


def test_workdir_relative_absolute_and_missing(work: Path, tmp_path: Path) -> None:
    ctx = session(work)
    (work / "sub").mkdir()
    (work / "file.txt").write_text("x")

    async def scenario() -> None:
        async with shell_row(ctx) as (_, call):
            here = await call("bash", command="pwd; echo made > out.txt", workdir="sub")
            assert here.text == f"{work / 'sub'}\n[Command finished with exit code 0]"
            assert (work / "sub" / "out.txt").read_text() == "made\n"
            refused = await call("bash", command="pwd", workdir=str(tmp_path))
            assert refused.is_error and "outside the workspace root" in refused.text
            # Approved for this call (what the agent does after an approval): it runs there.
            approved = ctx._replace(boundary=Boundary.at(str(work)).allowing(
                [os.path.realpath(tmp_path)]))
            there = await call("bash", on=approved, command="pwd", workdir=str(tmp_path))
            assert there.text.splitlines()[0] == str(tmp_path)
            for bad in ("missing", "file.txt"):
                refused = await call("bash", command="echo ran > ran.txt", workdir=bad)
                assert refused.is_error
                assert refused.text == (f"workdir is not a directory: {bad} (resolves to "
                                        f"{work / bad})")
            job = job_id((await call("bash", command="pwd > where.txt", workdir="sub",
                                     run_in_background=True)).text)
            while "exit code" not in (await call("job_output", job_id=job, wait=True)).text:
                pass
            assert (work / "sub" / "where.txt").read_text() == f"{work / 'sub'}\n"
            assert not list(work.rglob("ran.txt"))

    asyncio.run(scenario())


def test_the_policy_sees_workdir(work: Path) -> None:
    tool = tools_of(make_plugin(ShellTools))["bash"]

    def verdict(**args: Any) -> Decision:
        checked = check_arguments(tool, args)
        reached = confine.reach(Boundary.at(str(work)), str(work), tool, checked)
        call = ToolCall("s1", "c1", "bash", checked, str(work), tool, can_ask=True,
                        outside=reached.outside)
        return decide("workspace", call)[0]

    assert verdict(command="ls") is Decision.ALLOW
    assert verdict(command="ls", workdir="sub") is Decision.ALLOW
    assert verdict(command="ls", workdir="..") is Decision.ASK
    assert verdict(command="ls", workdir="/") is Decision.ASK


def test_job_tools_need_a_job_id() -> None:
    tools = tools_of(make_plugin(ShellTools))
    assert tools["job_output"].mutating is False and tools["job_list"].mutating is False
    assert tools["job_kill"].mutating is True and tools["job_kill"].path_arguments == ()
    for name in ("job_output", "job_kill"):
        with pytest.raises(ArgumentError, match="job_id"):
            check_arguments(tools[name], {})
    with pytest.raises(ArgumentError):
        check_arguments(tools["job_output"], {"job_id": "job-1", "wait": "yes"})


def test_a_background_job_goes_through_the_rows_sandbox(work: Path, tmp_path: Path) -> None:
    """With no bubblewrap, a job runs on the Landlock rung like a foreground command:
    confined to the workspace, its private TMPDIR removed when the job is stopped. (With
    no rung at all it would run unsandboxed, its answer saying so, or be refused when
    required: tests/tools/test_sandbox_process.py drives that through a real runtime.)"""
    if why := skip_reason("landlock-no-bwrap"):
        pytest.skip(why)
    ctx = session(work)
    missing = str(work / "no-bwrap-here")
    outside = tmp_path / "outside"
    outside.mkdir()

    async def scenario() -> None:
        async with shell_row(ctx, sandbox={"mode": "workspace-write", "bwrap": missing}) as (
                _, call):
            started = await call("bash", command=f"echo $$ > pid; echo $TMPDIR > tmpdir; "
                                                 f"touch {outside}/escaped; sleep 30",
                                 run_in_background=True)
            assert started.text.startswith("Started background job job-"), started.text
            assert await read_pid(work / "pid")
            for _ in range(200):
                if (work / "tmpdir").exists() and (work / "tmpdir").read_text():
                    break
                await asyncio.sleep(0.01)
            scratch = Path((work / "tmpdir").read_text().strip())
            assert scratch.is_dir() and scratch != Path("/tmp")
            job = job_id(started.text)
            killed = await call("job_kill", job_id=job)
            assert killed.text.startswith(f"Killed {job}"), killed.text
            assert not scratch.exists()
        assert not (outside / "escaped").exists()

    asyncio.run(scenario())
