"""Test kit for the in-process protocol tests: a JSON-RPC peer over real pipes.

:func:`serving_peer` runs the servers' peer (:func:`server_peer`) on one end of two
``os.pipe()`` pairs and :class:`PipeClient` talks to it from the other, so framing,
buffering and EOF go through the kernel exactly as with a real process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from dsh.core import jsonrpc
from dsh.core.peer import Peer
from dsh.runtime.servers.jsonrpc_server import server_peer
from dsh.runtime.transports.stdio import StdioTransport


class PipeClient:
    """The client end of an in-process peer: raw lines in, parsed frames out."""

    def __init__(self, write_fd: int, reader: asyncio.StreamReader) -> None:
        self._write_fd = write_fd
        self._reader = reader
        self._next_id = 0

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (the test adds newlines)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self._write_fd, view) :]

    def send(self, message: dict[str, Any]) -> None:
        """Write one message as a frame."""
        self.send_raw(jsonrpc.encode(message))

    def request(self, method: str, params: Any = None) -> int:
        """Send a request with a fresh integer id and return the id."""
        self._next_id += 1
        self.send(jsonrpc.request(self._next_id, method, params))
        return self._next_id

    def close(self) -> None:
        """Close the server's stdin (EOF)."""
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next frame the server wrote, parsed."""
        line = await asyncio.wait_for(self._reader.readline(), timeout)
        if not line:
            raise EOFError("server closed its output")
        return json.loads(line)

    async def response(self, rid: int, timeout: float = 5.0) -> dict[str, Any]:
        """Skip notifications until the response for ``rid``."""
        while True:
            frame = await self.recv(timeout)
            if "method" not in frame and frame.get("id") == rid:
                return frame

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """Request and wait for its response frame."""
        return await self.response(self.request(method, params))

    async def at_eof(self, timeout: float = 5.0) -> bool:
        """True when the server's output ends without further frames."""
        return await asyncio.wait_for(self._reader.read(), timeout) == b""


@contextlib.asynccontextmanager
async def serving_peer(
    setup: Callable[[Peer], None] | None = None,
    *,
    max_frame_bytes: int = 1 << 20,
    **kwargs: Any,
) -> AsyncIterator[tuple[Peer, PipeClient]]:
    """A peer serving on fresh pipes, and the client talking to it.

    ``setup(peer)`` registers methods before serving starts. On exit the client's end is
    closed (EOF) and serving must end; the transport has closed the server's fds.
    """
    server_in, client_out = os.pipe()
    client_in, server_out = os.pipe()
    peer = server_peer(**kwargs)
    transport = StdioTransport(server_in, server_out, max_frame_bytes=max_frame_bytes)
    if setup is not None:
        setup(peer)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(client_in, "rb", buffering=0)
    )
    client = PipeClient(client_out, reader)
    await transport.start(peer)
    task = loop.create_task(peer.serve())
    try:
        yield peer, client
    finally:
        client.close()
        await asyncio.wait_for(task, 10)
        read_transport.close()
