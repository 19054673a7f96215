"""The stdio transport: a server process, one JSON-RPC message per line each way.

The child gets the few variables a program needs to run (``HOME``, ``PATH``, ``USER``...,
as the MCP SDKs pass them) plus the server's own, never the runtime's whole environment:
credentials meant for dsh's model provider stay in dsh. It starts through
:mod:`dsh.core.process`: a group of its own, tied to the runtime, so a killed runtime leaves no
server behind; :meth:`StdioTransport.close` closes its stdin, gives it
:data:`STDIN_GRACE_S` to leave, then stops its whole process group.

Below the session's :class:`~dsh.core.peer.Peer` it frames bytes with dsh's one decoder
(:class:`~dsh.core.jsonrpc.FrameDecoder`, bounded by :data:`MAX_LINE`): one reader task
feeds the peer each line's message, or the fault of a line that is not one (which ends
the strict peer), and tells it when the server's stdout closes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from dsh.core import jsonrpc, process
from dsh.core.errors import ConnectionClosedError

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
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")
"""Variables of the runtime's environment every server gets (when set)."""


class StdioTransport:
    """``command args`` in ``cwd`` with ``env`` added; its stderr goes to ``errlog``."""

    def __init__(self, command: str, args: list[str], env: Mapping[str, str], cwd: str,
                 errlog: IO[bytes] | None) -> None:
        self.protocol_version: str | None = None
        self._command = command
        self._args = args
        self._env = env
        self._cwd = cwd
        self._errlog = errlog
        self._proc: process.AsyncChild | None = None
        self._reader: asyncio.Task[None] | None = None
        self._receiving = asyncio.Event()
        self._receiving.set()

    async def open(self, receiver: Peer) -> None:
        """Spawn the server and start feeding ``receiver`` its messages;
        ``FileNotFoundError`` when its command is not found."""
        env = {k: os.environ[k] for k in INHERITED
               if k in os.environ and not os.environ[k].startswith("()")}
        env.update(self._env)
        self._proc = await process.spawn_async(
            [self._command, *self._args], env=env, cwd=self._cwd, stdin=process.PIPE,
            stdout=process.PIPE,
            stderr=self._errlog if self._errlog is not None else process.DEVNULL)
        receiver.connection_made(self)
        self._reader = asyncio.create_task(self._read(receiver), name="dsh-mcp-reader")

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
        """Close stdin, wait a little, then terminate and kill the server's process group
        (what the server left running in its group goes too)."""
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        await proc.exited(STDIN_GRACE_S)
        await proc.stop(TERM_GRACE_S)
        if self._reader is not None:
            self._reader.cancel()

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
