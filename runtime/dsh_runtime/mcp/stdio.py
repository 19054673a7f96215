"""The stdio transport: a server process, one JSON-RPC message per line each way.

The child gets the few variables a program needs to run (``HOME``, ``PATH``, ``USER``...,
as the MCP SDKs pass them) plus the server's own, never the runtime's whole environment:
credentials meant for dsh's model provider stay in dsh. It starts through
:mod:`dsh.process`: a group of its own, tied to the runtime, so a killed runtime leaves no
server behind; :meth:`StdioTransport.close` closes its stdin, gives it
:data:`STDIN_GRACE_S` to leave, then stops its whole process group.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import IO, Any

from dsh import process

from dsh_runtime.mcp.session import ConnectionClosed, ProtocolError

STDIN_GRACE_S = 0.5
"""Seconds a server has to exit after its stdin closes, before SIGTERM (well-behaved
servers exit on EOF in milliseconds; the runtime's own clients wait about 2 s for it)."""
TERM_GRACE_S = 1.0
"""Seconds after SIGTERM before SIGKILL."""
MAX_LINE = 64 * 1024 * 1024
"""The longest message line read; a longer one is a protocol error, not unbounded memory."""
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

    async def open(self) -> None:
        """Spawn the server; ``FileNotFoundError`` when its command is not found."""
        env = {k: os.environ[k] for k in INHERITED
               if k in os.environ and not os.environ[k].startswith("()")}
        env.update(self._env)
        self._proc = await process.spawn_async(
            [self._command, *self._args], env=env, cwd=self._cwd, stdin=process.PIPE,
            stdout=process.PIPE,
            stderr=self._errlog if self._errlog is not None else process.DEVNULL,
            limit=MAX_LINE)

    async def send(self, message: dict[str, Any]) -> None:
        """Write one line; :class:`ConnectionClosed` when the server's stdin is gone."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            raise ConnectionClosed("the server's stdin is closed")
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            proc.stdin.write(data.encode("utf-8"))
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ConnectionClosed("the server exited") from exc

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        """Each line the server writes, decoded; ends when its stdout closes."""
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        while True:
            try:
                line = await stdout.readline()
            except ValueError as exc:  # asyncio's LimitOverrunError, re-raised as ValueError
                raise ProtocolError(f"a line over {MAX_LINE} bytes") from exc
            if not line:
                return
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except ValueError as exc:
                raise ProtocolError("a line that is not JSON") from exc

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
