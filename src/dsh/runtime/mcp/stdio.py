"""The stdio transport: a server process, one JSON-RPC message per line each way.

The child gets the few variables a program needs to run (the policy's ``core``:
``HOME``, ``PATH``, ``USER``, locale, time zone..., as the MCP SDKs pass them, minus any
value that looks like a credential) plus the server's own, never the runtime's whole
environment: credentials meant for dsh's model provider stay in dsh. It starts through
:mod:`dsh.core.process`: a group and a container of its own, tied to the runtime, so
neither a stop nor a killed runtime leaves the server or anything it started behind;
:meth:`StdioTransport.close` closes its stdin, gives it :data:`STDIN_GRACE_S` to leave,
then stops it with everything it started.

Its stderr is read as it comes and only the last :data:`STDERR_KEEP` bytes are kept
(:class:`StderrTail`), for the line that explains a failure: a server that writes
gigabytes of logs costs that much reading, never that much memory or disk.

Below the session's :class:`~dsh.core.peer.Peer` it frames bytes with dsh's one decoder
(:class:`~dsh.core.jsonrpc.FrameDecoder`, bounded by :data:`MAX_LINE`): one reader task
feeds the peer each line's message, or the fault of a line that is not one (which ends
the strict peer), and tells it when the server's stdout closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dsh.core import jsonrpc, process
from dsh.core.errors import ConnectionClosedError
from dsh.runtime.kernel.envpolicy import EnvPolicy

if TYPE_CHECKING:
    from dsh.core.peer import Peer

STDIN_GRACE_S = 0.5
"""Seconds a server has to exit after its stdin closes, before SIGTERM (well-behaved
servers exit on EOF in milliseconds; the runtime's own clients wait about 2 s for it)."""
TERM_GRACE_S = 1.0
"""Seconds after SIGTERM before SIGKILL."""
MAX_LINE = 64 * 1024 * 1024
"""The longest message line read; a longer one is a protocol error, not unbounded memory."""
_READ_CHUNK = 256 * 1024
STDERR_KEEP = 64 * 1024
"""Bytes of a server's stderr kept (its last ones)."""
_STDERR_CHUNK = 64 * 1024
_STDERR_DRAIN_S = 0.5
"""How long a stopped server's stderr is still read for its last words (a process it
left behind may hold the pipe open for ever)."""
INHERITED = EnvPolicy(inherit="core")
"""What of the runtime's environment every server gets: the core names, secrets left out."""


class StderrTail:
    """The last ``keep`` bytes of a stream, whatever its length: a ring over a buffer."""

    def __init__(self, keep: int = STDERR_KEEP) -> None:
        self.keep = keep
        self.total = 0
        self._data = bytearray()

    def feed(self, data: bytes) -> None:
        """Take the next piece; older bytes beyond ``keep`` are dropped."""
        self.total += len(data)
        self._data += data[-self.keep:]
        if len(self._data) > self.keep:
            del self._data[:-self.keep]

    def last_line(self) -> str:
        """The last non-empty line kept (empty when there is none)."""
        lines = self._data.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else ""


class StdioTransport:
    """``command args`` in ``cwd`` with ``env`` added; the end of its stderr is kept in
    ``stderr`` (None: stderr is discarded)."""

    def __init__(self, command: str, args: list[str], env: Mapping[str, str], cwd: str,
                 stderr: StderrTail | None) -> None:
        self.protocol_version: str | None = None
        self._command = command
        self._args = args
        self._env = env
        self._cwd = cwd
        self._stderr = stderr
        self._proc: process.AsyncChild | None = None
        self._pump: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._receiving = asyncio.Event()
        self._receiving.set()

    async def open(self, receiver: Peer) -> None:
        """Spawn the server and start feeding ``receiver`` its messages;
        ``FileNotFoundError`` when its command is not found."""
        env = {k: v for k, v in INHERITED.build(os.environ).items() if not v.startswith("()")}
        env.update(self._env)
        self._proc = await process.spawn_async(
            [self._command, *self._args], env=env, cwd=self._cwd, stdin=process.PIPE,
            stdout=process.PIPE,
            stderr=process.PIPE if self._stderr is not None else process.DEVNULL)
        if self._stderr is not None:
            self._pump = asyncio.create_task(self._read_stderr(self._stderr),
                                             name="dsh-mcp-stderr")
        receiver.connection_made(self)
        self._reader = asyncio.create_task(self._read(receiver), name="dsh-mcp-reader")

    async def _read_stderr(self, tail: StderrTail) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(_STDERR_CHUNK):
            tail.feed(chunk)

    def send(self, message: dict[str, Any]) -> None:
        """Queue one line; :class:`ConnectionClosedError` when the server's stdin is gone."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            raise ConnectionClosedError("the server's stdin is closed")
        proc.stdin.write(jsonrpc.encode(message))

    async def drain(self) -> None:
        """Wait while the server is not reading its stdin."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise ConnectionClosedError("the server's stdin is closed")
        try:
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ConnectionClosedError("the server exited") from exc

    def pause_receiving(self) -> None:
        """Read no more of the server's stdout (it then blocks writing it)."""
        self._receiving.clear()

    def resume_receiving(self) -> None:
        """Read again."""
        self._receiving.set()

    async def close(self) -> None:
        """Close stdin, wait a little, then stop the server with everything it started
        (its container), and read what is left of its stderr."""
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        await proc.exited(STDIN_GRACE_S)
        await proc.stop(TERM_GRACE_S)
        if self._reader is not None:
            self._reader.cancel()
        if self._pump is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._pump), _STDERR_DRAIN_S)
            self._pump.cancel()

    async def _read(self, receiver: Peer) -> None:
        """Each line the server writes, to ``receiver``, until its stdout closes."""
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        decoder = jsonrpc.FrameDecoder(MAX_LINE)
        while True:
            await self._receiving.wait()
            data = await stdout.read(_READ_CHUNK)
            for item in decoder.feed(data) if data else decoder.finish():
                receiver.message_received(
                    item.message if isinstance(item, jsonrpc.Frame) else item)
            if not data:
                break
        receiver.connection_lost(ConnectionClosedError(
            "the connection closed (the server exited or dropped it)"))
