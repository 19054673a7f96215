"""The runtime process: spawn, frames in and out, the stderr tail, the exit status.

One :class:`RuntimeProcess` per client, built on asyncio's subprocess protocol so bytes
reach :class:`dsh.core.jsonrpc.FrameDecoder` as the pipe delivers them, with no reader task
and no thread per pipe. It knows nothing of requests: decoded messages, fatal faults and
the process's end go to a :class:`Listener` (the router).

On POSIX the runtime is already running when it gets here (:class:`~._launch.HeadStart`
spawned it, before a blocking client had even made its loop): :class:`_AdoptedProcess`
connects its three pipes to the loop and reports its exit, the same events asyncio's own
subprocess transport gives. On Windows asyncio spawns it (``spawn_protocol``).

What it guarantees:

* The runtime starts through :mod:`dsh.core.process`: in its own session and process group,
  so signals to the group reach whatever it started there, and a terminal's Ctrl-C
  reaches only the caller, which then closes the client in order. A killed caller leaves
  no runtime behind: dsh's own runtime watches the caller through a pidfd
  (``LaunchSpec.watches_parent``, :mod:`dsh.runtime.kernel.parentwatch`), and any other runtime
  gets ``SIGTERM`` from the kernel when the thread that spawned it dies (Linux,
  ``setpriv --pdeathsig``; the runtime's own ``SIGTERM`` path is bounded and reaps its
  children, hence ``SIGTERM``).
* stderr is always drained, into a tail of the last :data:`STDERR_TAIL_LINES` lines (and
  the optional callback), so a chatty runtime can never block on a full pipe and every
  error can say what the runtime said last.
* stdout is frames only: anything else (garbage, a frame over the cap) breaks the
  connection with a typed :class:`~dsh.core.errors.ProtocolError`, because nothing can tell
  which request a lost line answered.
* When the process ends, the listener hears it once, as soon as both outputs are drained
  (or :data:`EXIT_GRACE` after the exit, if a grandchild holds a pipe open), never after
  any request timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from dsh.core.errors import InvalidMessageError, ProtocolError
from dsh.core.jsonrpc import FrameDecoder, FrameFault, Message, encode, parse_message
from dsh.core.process import Child, Group, spawn_protocol
from dsh.sdk._launch import LaunchSpec, spawn_error

STDERR_TAIL_LINES = 200
# One stderr line is cut beyond this many bytes: the tail is bounded in bytes, not only
# in lines.
STDERR_LINE_LIMIT = 8192
# Seconds the outputs may stay open after the process exited (a grandchild inheriting
# stderr), or the process may live on after closing stdout, before the end is declared.
EXIT_GRACE = 2.0
# Seconds to wait for the process to die after SIGKILL; only a process stuck in the
# kernel takes longer, and then nothing more can be done from here.
KILL_WAIT = 5.0

log = logging.getLogger("dsh.sdk")


class Listener(Protocol):
    """What the process reports to (the router), always on the event-loop thread."""

    def message_received(self, message: Message) -> None:
        """One well-formed JSON-RPC message from the runtime."""

    def transport_broken(self, error: ProtocolError, stderr_tail: Sequence[str]) -> None:
        """The frame stream is unusable (garbage, oversize frame, stdout closed early)."""

    def runtime_exited(self, exit_code: int, stderr_tail: Sequence[str]) -> None:
        """The process ended and its outputs are drained; reported once."""


class RuntimeProcess(asyncio.SubprocessProtocol):
    """One spawned runtime: the asyncio protocol of its three pipes and its exit."""

    def __init__(self, listener: Listener, *, max_frame_bytes: int,
                 stderr_callback: Callable[[str], None] | None) -> None:
        self._listener = listener
        self._max_frame_bytes = max_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes)
        self._stderr_callback = stderr_callback
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_partial = bytearray()
        self._stderr_cut = False
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._stdout_open = True
        self._stderr_open = True
        self._broken = False
        self._reported = False
        self._grace: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._exited = asyncio.Event()
        self._released = asyncio.Event()
        self._group: Group | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None

    @classmethod
    async def spawn(cls, spec: LaunchSpec, listener: Listener, *, max_frame_bytes: int,
                    stderr_callback: Callable[[str], None] | None,
                    child: Child | None = None) -> RuntimeProcess:
        """Take over ``child``, the runtime already spawned from ``spec``, or (without
        one) start it; :class:`SpawnError` when the OS refuses to run it. A ``child``
        whose pipes cannot be connected is the caller's to kill."""
        process = cls(listener, max_frame_bytes=max_frame_bytes,
                      stderr_callback=stderr_callback)
        if child is not None:
            await _AdoptedProcess.connect(child, process)
            process._group = child
            return process
        try:
            process._group = await spawn_protocol(
                lambda: process, spec.argv, cwd=spec.cwd, env=spec.env,
                tie=spec.tie)
        except OSError as exc:
            raise spawn_error(spec, exc) from exc
        return process

    # -- what the client reads ------------------------------------------------------------

    @property
    def stderr_tail(self) -> tuple[str, ...]:
        """The runtime's last stderr lines (at most :data:`STDERR_TAIL_LINES`)."""
        return tuple(self._stderr_tail)

    @property
    def running(self) -> bool:
        """Whether the process has not been seen to exit."""
        return self.exit_code is None

    # -- frames out -----------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        """Write one frame; refuses (``FrameTooLargeError``) one over the frame cap, which
        the runtime could only answer with an error that names no request."""
        frame = encode(message, max_frame_bytes=self._max_frame_bytes)
        if self._stdin is None or self._stdin.is_closing():
            raise ProtocolError("the runtime's stdin is closed")
        self._stdin.write(frame)

    async def drain(self) -> None:
        """Wait while the runtime is not reading its stdin (write flow control)."""
        await self._writable.wait()

    def pause_reading(self) -> None:
        """Stop reading stdout (a consumer is behind); the runtime then blocks on write."""
        pipe = self._pipe(1)
        if pipe is not None:
            pipe.pause_reading()

    def resume_reading(self) -> None:
        """Read stdout again."""
        pipe = self._pipe(1)
        if pipe is not None:
            pipe.resume_reading()

    # -- ending ---------------------------------------------------------------------------

    def close_stdin(self) -> None:
        """Close the runtime's stdin after what is buffered: EOF asks it to exit."""
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()

    def terminate(self) -> None:
        """Ask the runtime's whole process group to end (its own shutdown path)."""
        if self._group is not None:
            self._group.terminate()

    def kill(self) -> None:
        """Kill the runtime's whole process group: what it started there goes too."""
        if self._group is not None:
            self._group.kill()

    async def wait_exit(self, timeout: float) -> bool:
        """Whether the process exited within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def release(self) -> None:
        """After the exit: close the pipes and wait until asyncio let go of them all."""
        if self._transport is not None:
            self._transport.close()
        try:
            await asyncio.wait_for(self._released.wait(), KILL_WAIT)
        except asyncio.TimeoutError:
            log.warning("dsh runtime pid %s: pipes did not close after exit", self.pid)

    def abort(self) -> None:
        """Kill now, from any thread, without awaiting: for finalizers and cancellation.

        On the loop's thread (or scheduled there while the loop runs) the transport is
        closed first, which kills the runtime through asyncio and releases the pipes, so
        an abandoned client leaks no descriptor either; then SIGKILL reaches the rest of
        its group. With no running loop to schedule on, the group is killed directly.
        """
        if self._loop.is_closed():
            # Interpreter exit after asyncio.run: only the signal is left to send.
            if self.running:
                self.kill()
            return
        if threading.get_ident() == self._loop_thread:
            self._kill()
            return
        if self._loop.is_running():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                self._loop.call_soon_threadsafe(self._kill)
                return
        if self.running:
            self.kill()

    # -- asyncio.SubprocessProtocol -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.SubprocessTransport, transport)
        self.pid = self._transport.get_pid()
        self._stdin = cast(asyncio.WriteTransport, self._transport.get_pipe_transport(0))

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._frames(self._decoder.feed(data))
        elif fd == 2:
            self._stderr(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._frames(self._decoder.finish())
            self._stdout_open = False
            if self.running:
                # A runtime that closed stdout can answer nothing more; give it the grace
                # to exit (so the error can carry its exit code) before calling it broken.
                self._arm_grace(self._stdout_closed_early)
        elif fd == 2:
            self._flush_stderr()
            self._stderr_open = False
        else:
            # Nothing more can be written: release whoever waits for the pipe to drain.
            self._writable.set()
        self._maybe_report()

    def process_exited(self) -> None:
        transport = cast(asyncio.SubprocessTransport, self._transport)
        self.exit_code = cast(int, transport.get_returncode())
        self._exited.set()
        if self._stdout_open or self._stderr_open:
            self._arm_grace(self._report_exit)
        self._maybe_report()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._group is not None:
            self._group.release()
        self._released.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- internals ------------------------------------------------------------------------

    def _kill(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        if self.running:
            self.kill()

    def _pipe(self, fd: int) -> Any:
        if self._transport is None or self._transport.is_closing():
            return None
        return self._transport.get_pipe_transport(fd)

    def _frames(self, items: list[Any]) -> None:
        for item in items:
            if self._broken:
                return
            if isinstance(item, FrameFault):
                self._break(item.error)
                return
            try:
                message = parse_message(item.message)
            except InvalidMessageError as exc:
                self._break(exc)
                return
            self._listener.message_received(message)

    def _break(self, error: ProtocolError) -> None:
        self._broken = True
        self._listener.transport_broken(error, self.stderr_tail)

    def _stdout_closed_early(self) -> None:
        if self.running and not self._broken:
            self._break(ProtocolError("the runtime closed its stdout but kept running"))

    def _arm_grace(self, callback: Callable[[], None]) -> None:
        if self._grace is not None:
            self._grace.cancel()
        self._grace = self._loop.call_later(EXIT_GRACE, callback)

    def _maybe_report(self) -> None:
        if self.exit_code is not None and not self._stdout_open and not self._stderr_open:
            self._report_exit()

    def _report_exit(self) -> None:
        if self._reported or self.exit_code is None:
            return
        self._reported = True
        if self._grace is not None:
            self._grace.cancel()
        self._flush_stderr()
        self._listener.runtime_exited(self.exit_code, self.stderr_tail)
        if self._transport is not None:
            self._transport.close()

    def _stderr(self, data: bytes) -> None:
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            self._append_stderr(data[start:end])
            self._emit_stderr()
            start = end + 1
        self._append_stderr(data[start:])

    def _append_stderr(self, chunk: bytes) -> None:
        room = STDERR_LINE_LIMIT - len(self._stderr_partial)
        if len(chunk) > room:
            self._stderr_cut = True
            chunk = chunk[:max(room, 0)]
        self._stderr_partial += chunk

    def _flush_stderr(self) -> None:
        if self._stderr_partial or self._stderr_cut:
            self._emit_stderr()

    def _emit_stderr(self) -> None:
        line = self._stderr_partial.decode("utf-8", "replace").rstrip("\r")
        if self._stderr_cut:
            line += " [line cut]"
        self._stderr_partial.clear()
        self._stderr_cut = False
        self._stderr_tail.append(line)
        if self._stderr_callback is not None:
            try:
                self._stderr_callback(line)
            except Exception:
                # A faulty callback must not stop the draining: a runtime whose stderr
                # is not read blocks as soon as the pipe fills.
                log.exception("dsh.sdk stderr callback failed")


class _AdoptedProcess(asyncio.SubprocessTransport):
    """The subprocess transport of a runtime spawned before the loop owned it (POSIX).

    Its pipes become the loop's pipe transports; a thread waits for its exit (as asyncio's
    threaded child watcher does) and reports it on the loop. The protocol sees what
    asyncio's own transport gives it: ``connection_made``, ``pipe_data_received``,
    ``pipe_connection_lost`` per pipe, ``process_exited``, then ``connection_lost`` once
    the process exited and every pipe is closed. ``close`` closes the pipes and, if the
    process still runs, kills its group. Signals and waits go through the
    :class:`~dsh.core.process.Child`: the signalling methods of the transport interface are
    not offered.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, child: Child,
                 protocol: asyncio.SubprocessProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._child = child
        self._protocol = protocol
        self._pipes: dict[int, asyncio.BaseTransport] = {}
        self._open = {0, 1, 2}
        self._returncode: int | None = None
        self._closing = False
        self._finished = False

    @classmethod
    async def connect(cls, child: Child, protocol: asyncio.SubprocessProtocol) -> None:
        """Connect ``child``'s pipes to the running loop and watch for its exit."""
        loop = asyncio.get_running_loop()
        self = cls(loop, child, protocol)
        try:
            self._pipes[0], _ = await loop.connect_write_pipe(
                lambda: _Pipe(self, 0), child.stdin)
            protocol.connection_made(self)
            for fd, pipe in ((1, child.stdout), (2, child.stderr)):
                self._pipes[fd], _ = await loop.connect_read_pipe(
                    functools.partial(_Pipe, self, fd), pipe)
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self._wait, name="dsh-sdk-exit-watcher",
                         daemon=True).start()

    def _wait(self) -> None:
        code = self._child.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            self._loop.call_soon_threadsafe(self._exited, code)

    def _exited(self, code: int | None) -> None:
        self._returncode = code
        self._protocol.process_exited()
        self._finish()

    def _pipe_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        self._protocol.pipe_connection_lost(fd, exc)
        self._finish()

    def _finish(self) -> None:
        if self._returncode is not None and not self._open and not self._finished:
            self._finished = True
            self._loop.call_soon(self._protocol.connection_lost, None)

    # -- asyncio.SubprocessTransport ------------------------------------------------------

    def get_pid(self) -> int:
        return self._child.pid

    def get_returncode(self) -> int | None:
        return self._returncode

    def get_pipe_transport(self, fd: int) -> Any:
        return self._pipes.get(fd)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        for pipe in self._pipes.values():
            pipe.close()
        for fd, stream in ((0, self._child.stdin), (1, self._child.stdout),
                           (2, self._child.stderr)):
            if fd not in self._pipes and stream is not None:  # never connected
                stream.close()
        if self._returncode is None and self._child.returncode is None:
            self._child.kill()


class _Pipe(asyncio.Protocol):
    """One pipe of an :class:`_AdoptedProcess`, reporting to it by file descriptor."""

    def __init__(self, owner: _AdoptedProcess, fd: int) -> None:
        self._owner = owner
        self._fd = fd

    def data_received(self, data: bytes) -> None:
        self._owner._protocol.pipe_data_received(self._fd, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._pipe_lost(self._fd, exc)

    def pause_writing(self) -> None:
        self._owner._protocol.pause_writing()

    def resume_writing(self) -> None:
        self._owner._protocol.resume_writing()
