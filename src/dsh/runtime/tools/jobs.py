"""Background shell jobs: the job table and the ``job_output``, ``job_list``, ``job_kill`` tools.

``bash`` with ``run_in_background`` hands its process to :class:`JobTable.start` and answers
the job id at once; the model then reads the job with these tools. The table's rules:

- **Ids** are ``job-N``, unique for the life of the runtime process (a module counter, so a
  row replaced by a reload never hands out an id the model already saw).
- **Sessions own their jobs.** A job id from another session answers exactly like an unknown
  one (``no job 'job-3' in this session``), so one session cannot probe another's.
- **Bounded count.** At most ``max_jobs`` records per session; starting one more drops the
  oldest finished record (killing whatever is left of its group), and is refused when every
  record is still running.
- **Bounded output.** A job keeps only the output nobody has read yet, at most
  ``max_job_output_chars`` characters of it: the first and last halves, with a note of what
  was dropped between them. ``job_output`` hands over what is kept and resets the window
  (the read cursor), so a chatty job costs memory only up to the cap.
- **The session stays here.** A running job holds its session in this runtime
  (``ToolContext.keep``): the session's lease is not given back, so no other runtime
  continues the session while the job's output can only be read here. The hold ends when
  the job's output ends (it exited, or was killed).
- **Lifetime.** A job runs in its own process group (its own session) with stdin closed and
  stdout and stderr merged. ``job_kill``, the end of its session (``session_end``) and the
  end of the runtime (the row's ``dispose``) send SIGTERM to the whole group, SIGKILL after a
  short grace, and wait for the shell to be reaped. A finished job stays readable until its
  session ends. Leftovers of a job whose shell already exited (``sleep 100 &``) live on
  until one of those moments too: the job is the group, not just its shell. Cancelling a
  turn does not stop its jobs: they belong to the session.

Processes start and stop through :mod:`dsh.core.process`, with the row's resource limits.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsh.core import process
from dsh.core.limits import Limits
from dsh.runtime.tools.base import ToolContext, ToolResult

_TERM_GRACE = 0.5
"""Seconds a group has between SIGTERM and SIGKILL; small, as session end is budgeted."""
_SETTLE_SECONDS = 0.5
"""How long a killed job's shell is awaited (reaped) and its output drained."""
_POLL_SECONDS = 0.05
"""How often a waiting ``job_output`` re-checks a job whose output is quiet."""
_EXIT_DRAIN_SECONDS = 0.2
"""How long a read of an exited job waits for the rest of its output (EOF) to arrive."""
_DEFAULT_WAIT_MS = 30000
"""How long ``job_output`` with ``wait`` waits when the call gives no ``timeout_ms``."""

_ids = itertools.count(1)
"""The runtime-wide job counter (see the module docstring)."""

RowConfig = Callable[[], Mapping[str, Any]]
"""Returns the shell row's current config (``max_jobs``, ``max_job_output_chars``, ...)."""


class UnreadOutput:
    """A job's output not yet read: the first and last halves of ``limit`` characters.

    Bytes are decoded incrementally, so a character split across two reads of the pipe (or
    two ``job_output`` calls) is never mangled.
    """

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._reset()

    def _reset(self) -> None:
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self._dropped = 0

    def feed(self, data: bytes, *, final: bool = False) -> None:
        """Take the next bytes of output (``final`` at EOF flushes a partial character)."""
        text = self._decoder.decode(data, final)
        self.total += len(text)
        room = self.head_limit - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if not text:
            return
        tail = self._tail + text
        cut = max(len(tail) - self.tail_limit, 0)
        self._dropped += cut
        self._tail = tail[cut:]

    @property
    def pending(self) -> bool:
        """Whether anything arrived since the last :meth:`take`."""
        return bool(self._head_len or self._tail or self._dropped)

    def take(self) -> str:
        """Everything kept since the last take (with a note where output was dropped)."""
        head = "".join(self._head)
        dropped, tail = self._dropped, self._tail
        self._reset()
        if not dropped:
            return head + tail
        return (f"{head}\n[... {dropped} characters of output dropped here: more than "
                f"{self.head_limit + self.tail_limit} arrived between two reads ...]\n{tail}")


class Job:
    """One background command and what is known about it."""

    __slots__ = (
        "changed",
        "child",
        "command",
        "cwd",
        "eof",
        "id",
        "output",
        "reader",
        "reason",
        "release",
        "session_id",
        "started",
        "stopping",
    )

    def __init__(self, id: str, session_id: str, command: str, cwd: str,
                 child: process.AsyncChild, output: UnreadOutput) -> None:
        self.id = id
        self.session_id = session_id
        self.command = command
        self.cwd = cwd
        self.child = child
        self.output = output
        self.started = time.monotonic()
        self.eof = False
        self.reason: str | None = None
        self.changed = asyncio.Event()
        self.reader: asyncio.Task[None] | None = None
        self.stopping: asyncio.Task[None] | None = None
        self.release: Callable[[], None] = _nothing

    @property
    def exit_code(self) -> int | None:
        """The shell's exit code once it has exited; a signal ``N`` shows as ``128 + N``."""
        code = self.child.returncode
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def status(self) -> str:
        """``running`` or how the job ended, as the model reads it."""
        code = self.exit_code
        if code is None:
            return f"running (pid {self.child.pid})"
        if self.reason is not None:
            return f"killed ({self.reason}), exit code {code}"
        return f"finished with exit code {code}"


class JobTable:
    """Every background job of one shell row, by session; see the module docstring."""

    def __init__(self, config: RowConfig) -> None:
        self._config = config
        self._sessions: dict[str, dict[str, Job]] = {}
        self._starting: dict[str, int] = {}
        self._closed = False

    # -- starting ---------------------------------------------------------------------------

    async def start(self, ctx: ToolContext, argv: Sequence[str], cwd: str, command: str, *,
                    env: Mapping[str, str], note: str = "") -> ToolResult:
        """Spawn ``argv`` in ``cwd`` with ``env`` as a new job of ``ctx``'s session; answer
        its id.

        ``note`` (the shell's word that a command ran unsandboxed) leads the answer.
        """
        if self._closed:
            return ToolResult("cannot start a background job: the shell tools are shutting "
                              "down", is_error=True)
        session = ctx.session_id
        jobs = self._sessions.setdefault(session, {})
        refusal = await self._make_room(session, jobs)
        if refusal is not None:
            return refusal
        self._starting[session] = self._starting.get(session, 0) + 1
        try:
            child = await process.spawn_async(
                argv, cwd=cwd, env=env, stdout=process.PIPE, stderr=process.STDOUT,
                limits=Limits.from_config(self._config().get("limits")))
        except OSError as exc:
            return ToolResult(f"cannot start {argv[0]}: {exc.strerror or exc}", is_error=True)
        finally:
            self._starting[session] -= 1
            if not self._starting[session]:
                del self._starting[session]
        job = Job(f"job-{next(_ids)}", session, command, cwd, child,
                  UnreadOutput(self._config()["max_job_output_chars"]))
        job.release = ctx.keep()
        job.reader = asyncio.create_task(_pump(job), name=f"dsh-{job.id}-output")
        if self._closed:  # the runtime ended while the process was being set up
            await self._stop(job, "the runtime ended")
            return ToolResult("cannot start a background job: the shell tools are shutting "
                              "down", is_error=True)
        # Looked up again: the session may have ended while the process was being spawned.
        self._sessions.setdefault(session, {})[job.id] = job
        lead = f"{note}\n" if note else ""
        return ToolResult(
            f"{lead}Started background job {job.id} (pid {child.pid}) in {cwd}.\n"
            f"Read its output with job_output {{\"job_id\": \"{job.id}\"}}; stop it with "
            f"job_kill. It is killed when the session ends.")

    async def _make_room(self, session: str, jobs: dict[str, Job]) -> ToolResult | None:
        """Drop the oldest finished records until one more fits; refuse when none can go.

        Jobs still being spawned count, so concurrent calls cannot overshoot the cap.
        """
        cap = self._config()["max_jobs"]
        while len(jobs) + (starting := self._starting.get(session, 0)) >= cap:
            finished = [j for j in jobs.values() if j.exit_code is not None]
            if not finished:
                return ToolResult(
                    f"too many background jobs in this session ({len(jobs) + starting} "
                    f"running, the limit is {cap}); stop one with job_kill first",
                    is_error=True)
            oldest = min(finished, key=lambda j: j.started)
            del jobs[oldest.id]
            await self._stop(oldest, "dropped to make room for a new job")
        return None

    # -- reading ----------------------------------------------------------------------------

    def find(self, session_id: str, job_id: str) -> Job | None:
        """The session's job ``job_id``; None for unknown ids and other sessions' alike."""
        return self._sessions.get(session_id, {}).get(job_id)

    def jobs(self, session_id: str) -> list[Job]:
        """The session's jobs, oldest first."""
        return sorted(self._sessions.get(session_id, {}).values(), key=lambda j: j.started)

    async def read(self, job: Job, *, wait: bool, timeout: float) -> str:
        """New output since the last read, then the job's status.

        With ``wait``, first waits (at most ``timeout`` seconds) until there is new output
        or the shell has exited.
        """
        if wait:
            deadline = time.monotonic() + timeout
            while not job.output.pending and job.exit_code is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                job.changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(job.changed.wait(), min(remaining, _POLL_SECONDS))
        if job.exit_code is not None and not job.eof:
            # The status says "finished": hand over what the shell wrote before it exited.
            await _until(lambda: job.eof, _EXIT_DRAIN_SECONDS)
        text = job.output.take() or "(no new output)"
        if not text.endswith("\n"):
            text += "\n"
        return f"{text}[{job.id} {job.status()}]"

    # -- stopping ---------------------------------------------------------------------------

    async def kill(self, job: Job, reason: str) -> None:
        """Stop the job's whole group now (SIGTERM, then SIGKILL); its record stays."""
        await self._stop(job, reason)

    async def end_session(self, session_id: str) -> None:
        """Kill and forget every job of the session (its ``session_end``)."""
        jobs = self._sessions.pop(session_id, {})
        await asyncio.gather(*(self._stop(j, "the session ended") for j in jobs.values()))

    async def close(self) -> None:
        """Kill and forget every job of every session (the row's ``dispose``); refuse new ones."""
        self._closed = True
        for session_id in list(self._sessions):
            await self.end_session(session_id)

    async def _stop(self, job: Job, reason: str) -> None:
        """Stop ``job`` once, however many callers ask; each caller waits for the end."""
        if job.stopping is None:
            if job.exit_code is None:
                job.reason = reason
            job.stopping = asyncio.create_task(_terminate(job), name=f"dsh-{job.id}-kill")
        await asyncio.shield(job.stopping)


class JobOutputTool:
    """``job_output``: what a background job printed since the last read, and its status."""

    name = "job_output"
    description = (
        "Read a background job's new output (stdout and stderr together) since the last "
        "read, followed by its status: running, or its exit code once it has finished. With "
        "`wait`, first wait for new output or the job's exit (up to `timeout_ms`)."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "job_id": {"type": "string", "description": "The id bash returned, e.g. job-1."},
            "wait": {"type": "boolean", "default": False,
                     "description": "Wait for new output or the job's exit first."},
            "timeout_ms": {"type": "number", "minimum": 0,
                           "description": "Longest wait in milliseconds (default 30000; "
                                          "capped by the profile's longest timeout)."},
        },
        "required": ["job_id"],
        "additionalProperties": False,
    }
    mutating = False

    def __init__(self, table: JobTable, config: RowConfig) -> None:
        self._table = table
        self._config = config

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Hand over the job's unread output and status."""
        job = self._table.find(ctx.session_id, args["job_id"])
        if job is None:
            return _no_job(args["job_id"])
        wait_ms = args.get("timeout_ms")
        timeout = min(_DEFAULT_WAIT_MS / 1000 if wait_ms is None else float(wait_ms) / 1000,
                      float(self._config()["max_timeout_seconds"]))
        wait = bool(args.get("wait", False))
        return ToolResult(await self._table.read(job, wait=wait, timeout=timeout))


class JobListTool:
    """``job_list``: the session's background jobs and their status."""

    name = "job_list"
    description = ("List this session's background jobs: id, status, whether unread output "
                   "is waiting, working directory and command.")
    parameters: Mapping[str, Any] = {
        "type": "object", "properties": {}, "additionalProperties": False}
    mutating = False

    def __init__(self, table: JobTable) -> None:
        self._table = table

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """One line per job, oldest first."""
        jobs = self._table.jobs(ctx.session_id)
        if not jobs:
            return ToolResult("No background jobs in this session.")
        lines = []
        for job in jobs:
            unread = "unread output" if job.output.pending else "no unread output"
            lines.append(f"{job.id}: {job.status()}; {unread}; in {job.cwd}: "
                         f"{_one_line(job.command)}")
        return ToolResult("\n".join(lines))


class JobKillTool:
    """``job_kill``: stop a background job's whole process group."""

    name = "job_kill"
    description = ("Stop a background job: its whole process group gets SIGTERM, then "
                   "SIGKILL. Its output so far stays readable with job_output.")
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "job_id": {"type": "string", "description": "The id bash returned, e.g. job-1."},
            "reason": {"type": "string", "description": "A few words saying why."},
        },
        "required": ["job_id"],
        "additionalProperties": False,
    }
    mutating = True
    path_arguments: tuple[str, ...] = ()

    def __init__(self, table: JobTable) -> None:
        self._table = table

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Kill the job (a finished one's leftovers too) and report how it ended."""
        job = self._table.find(ctx.session_id, args["job_id"])
        if job is None:
            return _no_job(args["job_id"])
        was_running = job.exit_code is None
        await self._table.kill(job, args.get("reason") or "job_kill")
        if not was_running:
            return ToolResult(f"{job.id} had already {job.status()}; anything left of its "
                              "process group was killed.")
        return ToolResult(f"Killed {job.id}: {job.status()}.")


def _no_job(job_id: str) -> ToolResult:
    return ToolResult(f"no job '{job_id}' in this session (job_list shows this session's "
                      "jobs)", is_error=True)


def _one_line(command: str, limit: int = 200) -> str:
    flat = " ".join(command.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


async def _pump(job: Job) -> None:
    """Move the merged output into the job's window until EOF; then the job no longer
    holds its session here."""
    stdout = job.child.stdout
    assert stdout is not None
    try:
        while chunk := await stdout.read(65536):
            job.output.feed(chunk)
            job.changed.set()
        job.output.feed(b"", final=True)
        job.eof = True
        job.changed.set()
    finally:
        job.release()


def _nothing() -> None:
    """A job's ``release`` before it holds anything."""


async def _terminate(job: Job) -> None:
    """Stop the group (SIGTERM, SIGKILL after the grace, reaped), then drain its output.

    Every wait is bounded: a process that escaped the group and holds the pipe costs at
    most :data:`_SETTLE_SECONDS`, after which reading stops.
    """
    await job.child.stop(_TERM_GRACE)
    await _until(lambda: job.eof, _SETTLE_SECONDS)
    reader = job.reader
    if reader is not None and not reader.done():
        reader.cancel()
    if reader is not None:
        # Awaited so a failed read is not left for asyncio to log as never retrieved.
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await reader
    job.changed.set()


async def _until(done: Callable[[], bool], bound: float) -> None:
    deadline = time.monotonic() + bound
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
