"""``tools-shell``: exit codes, cwd, timeouts and cancellation killing the whole group."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of

from dsh.runtime.tools.base import ToolContext, check_arguments
from dsh.runtime.tools.shell import CappedOutput, ShellTools

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")


def bash(**config: Any) -> Any:
    return tools_of(make_plugin(ShellTools, **config))["bash"]


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pid: int) -> bool:
    """Whether ``pid`` dies soon: SIGKILL is delivered asynchronously, so allow a moment."""
    for _ in range(500):
        if not alive(pid):
            return True
        time.sleep(0.01)
    return False


def test_exit_code_and_output(ctx: ToolContext) -> None:
    result = run(bash(), ctx, command="echo hi; echo err >&2; exit 3")
    assert not result.is_error
    assert result.text == "hi\nerr\n[Command finished with exit code 3]"
    assert run(bash(), ctx, command="true").text == "[Command finished with exit code 0]"


def test_runs_in_the_session_cwd(ctx: ToolContext, work: Path) -> None:
    result = run(bash(), ctx, command="pwd; echo x > made.txt")
    assert result.text.splitlines()[0] == str(work)
    assert (work / "made.txt").read_text() == "x\n"


def test_bash_is_mutating_with_workdir_its_only_path_argument() -> None:
    tool = bash()
    assert tool.mutating is True and tool.path_arguments == ("workdir",)
    assert tool.parameters["required"] == ["command"]


def test_timeout_kills_the_whole_group(ctx: ToolContext, work: Path) -> None:
    command = "sleep 100 & echo $! > pids; sleep 100 & echo $! >> pids; echo $$ >> pids; wait"
    result = run(bash(), ctx, command=command, timeout=1)
    assert result.is_error
    assert "[Command timed out after 1 seconds; its process group was killed]" in result.text
    pids = [int(p) for p in (work / "pids").read_text().split()]
    assert len(pids) == 3
    assert all(gone(pid) for pid in pids)


def test_default_timeout_comes_from_config(ctx: ToolContext) -> None:
    result = run(bash(timeout_seconds=0.5), ctx, command="sleep 100")
    assert result.is_error and "timed out after 0.5 seconds" in result.text


def test_background_jobs_do_not_outlive_the_call(ctx: ToolContext, work: Path) -> None:
    result = run(bash(), ctx, command="sleep 100 & echo $! > pid; echo done")
    assert result.text == "done\n[Command finished with exit code 0]"
    assert gone(int((work / "pid").read_text()))


def test_cancellation_kills_the_group(ctx: ToolContext, work: Path) -> None:
    tool = bash()
    args = check_arguments(tool, {"command": "sleep 100 & echo $! > pid; sleep 100"})

    async def scenario() -> None:
        task = asyncio.ensure_future(tool.call(args, ctx))
        while not (work / "pid").exists() or not (work / "pid").read_text().strip():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert gone(int((work / "pid").read_text()))


def test_output_cap_keeps_head_and_tail(ctx: ToolContext) -> None:
    result = run(bash(max_output_chars=40), ctx,
                 command="for i in $(seq 1 1000); do echo line$i; done")
    head, note, tail = result.text.split("\n[... ", 1)[0], result.text, result.text
    assert head.startswith("line1\nline2")
    assert "bytes of output omitted" in note
    assert tail.endswith("line1000\n[Command finished with exit code 0]")
    assert len(result.text) < 300


def test_capped_output_unit() -> None:
    out = CappedOutput(6)
    for piece in (b"abc", b"defg", b"hij"):
        out.feed(piece)
    assert out.total == 10
    assert out.text().startswith("abc\n[... 4 bytes of output omitted")
    assert out.text().endswith("hij")
    small = CappedOutput(100)
    small.feed(b"whole")
    assert small.text() == "whole"


def test_signal_exit_is_reported_like_a_shell(ctx: ToolContext) -> None:
    result = run(bash(), ctx, command=f"kill -{int(signal.SIGTERM)} $$")
    assert result.text.endswith(f"[Command finished with exit code {128 + signal.SIGTERM}]")


def test_env_is_the_session_env(ctx: ToolContext) -> None:
    """The session's environment, not the process's (the runtime's own ``DSH_*`` names
    are withheld with the secrets)."""
    ctx.env["PER_CALL_SETTING"] = "from-the-context"
    assert os.environ.get("DSH_HOME")
    result = run(bash(), ctx, command='echo "$PER_CALL_SETTING/${DSH_HOME:-withheld}"')
    assert result.text.splitlines()[0] == "from-the-context/withheld"
