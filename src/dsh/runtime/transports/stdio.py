"""The stdio transport: JSON-RPC messages as newline-delimited frames over the
application's own stdio, for a :class:`dsh.core.peer.Peer` (the SDK and ACP servers).

The real stdin and stdout belong to the application's ``main`` command (protocol frames
for the SDK and ACP servers). Before any plugin starts, the runtime calls
:func:`reserve_app_stdio`, which moves them aside (``dup``) and points fds 0 and 1 at
``/dev/null`` and stderr, so a stray ``print``, a C extension or a child process that
inherits fd 1 can never corrupt the frame stream, and no child can eat protocol input.
A server then opens a :class:`StdioTransport` on the reserved pair (:func:`app_stdio`).

Reading and writing never block the event loop. Pipes, sockets and terminals are polled
with the loop's own pipe transports; anything the loop cannot poll (a regular file given
as stdin, ``/dev/null`` and other character devices that are not terminals, which epoll
refuses, or Windows' anonymous pipes) is served by one reader thread and one writer
thread instead. A launcher started without stdin (``dsh <&-``) reads ``/dev/null``; any
of these ends in EOF, which ends the application as its last request would.

Framing is :class:`dsh.core.jsonrpc.FrameDecoder`'s, below the peer's message interface,
so an oversize line costs bounded memory and reaches the peer as a fault (which a server
answers), never as a crash. Each frame is handed to the writer as one buffer on the loop
thread, which is what keeps frames from interleaving; no lock is needed on top of that
ordering. Unsent output is bounded twice: :meth:`StdioTransport.drain` waits above a
high-water mark, and a peer that stops reading for good is given up on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from dsh.core.errors import ConnectionClosedError
from dsh.core.jsonrpc import Frame, FrameDecoder, encode

if TYPE_CHECKING:
    from dsh.core.peer import Peer

# Unread output beyond this means the peer stopped reading: the transport gives up on
# it rather than buffering without bound. Raised to several maximum frames when large
# frames are configured.
_HARD_WRITE_LIMIT = 64 * 1024 * 1024
_HIGH_WATER = 1024 * 1024
_READ_CHUNK = 256 * 1024
FLUSH_TIMEOUT = 1.0
"""Seconds the last frames get to reach a slow reader when the transport closes."""


class AppStdio(NamedTuple):
    """The process's original stdin and stdout, kept for the application alone."""

    read_fd: int
    write_fd: int


_reserved: AppStdio | None = None


def reserve_app_stdio() -> AppStdio:
    """Move the real stdin/stdout aside for the application; idempotent per process.

    Afterwards fd 0 reads ``/dev/null`` and fd 1 writes to stderr, and ``sys.stdout``
    is ``sys.stderr``: everything but the application's own output ends up on stderr.
    """
    global _reserved
    if _reserved is not None:
        return _reserved
    sys.stdout.flush()
    read_fd, write_fd = _dup_or_devnull(0, os.O_RDONLY), _dup_or_devnull(1, os.O_WRONLY)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _reserved = AppStdio(read_fd, write_fd)
    return _reserved


def _dup_or_devnull(fd: int, mode: int) -> int:
    """A private copy of ``fd``; ``/dev/null`` when the launcher was started without it
    (``dsh <&-``), which then reads as an immediate EOF.

    The copy is never one of fds 0-2: those are pointed elsewhere right after, which
    would silently replace the application's stream.
    """
    try:
        return _above_stdio(os.dup(fd))
    except OSError:
        return _above_stdio(os.open(os.devnull, mode))


def _above_stdio(fd: int) -> int:
    """``fd`` moved to a number above 2 (the lowest free one is 0-2 when those are closed)."""
    if fd > 2 or os.name == "nt":  # Windows never hands out 0-2 here (its stdio is open)
        return fd
    import fcntl

    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def app_stdio() -> AppStdio:
    """The reserved pair; the runtime reserves it before any application command runs."""
    if _reserved is None:
        from dsh.core.errors import PluginError

        raise PluginError("stdio is not reserved for the application in this process")
    return _reserved


def _pollable(fd: int) -> bool:
    """Whether the loop's pipe transports can serve ``fd``: a pipe, a socket or a terminal.

    Regular files and character devices that are not terminals (``/dev/null``) are
    always "ready", and epoll refuses them (EPERM), so threads serve those instead.
    """
    if sys.platform == "win32":
        return False
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))


class StdioTransport:
    """JSON-RPC messages in and out over a read fd and a write fd.

    :meth:`start` connects a receiver (a :class:`~dsh.core.peer.Peer`): it gets each
    decoded message (or :class:`~dsh.core.jsonrpc.FrameFault`) on the loop thread, and
    ``connection_lost`` once when input ends. The transport owns both fds: :meth:`close`
    closes them.
    """

    def __init__(self, read_fd: int, write_fd: int, *, max_frame_bytes: int) -> None:
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._max_frame_bytes = max_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes)
        self._hard_limit = max(_HARD_WRITE_LIMIT, 4 * max_frame_bytes)
        self._reader: _Reader | None = None
        self._writer: _Writer | None = None
        self._receiver: Peer | None = None
        self._paused = False
        self._eof = False
        self.closed = False

    async def start(self, receiver: Peer | None) -> None:
        """Open both fds and connect ``receiver``; ``None`` reads and drops the input (an
        application that only writes)."""
        loop = asyncio.get_running_loop()
        if _pollable(self._write_fd):
            self._writer = await _PipeWriter.open(loop, self._write_fd, self._hard_limit)
        else:
            self._writer = _ThreadWriter(loop, self._write_fd, self._hard_limit)
        self._receiver = receiver
        if receiver is not None:
            receiver.connection_made(self)
        if _pollable(self._read_fd):
            self._reader = await _PipeReader.open(loop, self._read_fd, self)
        else:
            self._reader = _ThreadReader(loop, self._read_fd, self)
        if self._paused:
            self._reader.pause()

    def data_received(self, data: bytes) -> None:
        """Feed raw input (called by the reader on the loop thread)."""
        receiver = self._receiver
        if receiver is not None:
            for item in self._decoder.feed(data):
                receiver.message_received(item.message if isinstance(item, Frame) else item)

    def eof_received(self) -> None:
        """Input ended (or failed); delivered once."""
        if self._eof:
            return
        self._eof = True
        receiver = self._receiver
        if receiver is not None:
            for item in self._decoder.finish():
                receiver.message_received(item.message if isinstance(item, Frame) else item)
            receiver.connection_lost(ConnectionClosedError(
                "the client closed the connection (end of input)"))

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message as a frame; refuses one over the frame cap
        (:class:`~dsh.core.errors.FrameTooLargeError`), which the peer could not read."""
        self.write(encode(message, max_frame_bytes=self._max_frame_bytes))

    def write(self, frame: bytes) -> None:
        """Queue one whole encoded line (newline included); never blocks the loop.

        Raises :class:`ConnectionClosedError` once the peer has gone or stopped reading for
        good.
        """
        if self.closed or self._writer is None:
            raise ConnectionClosedError("the connection is closed")
        try:
            self._writer.write(frame)
        except ConnectionError as exc:
            raise self._output_lost(exc) from exc

    async def drain(self) -> None:
        """Wait while unsent output is above the high-water mark."""
        if self._writer is not None:
            try:
                await self._writer.drain()
            except ConnectionError as exc:
                raise self._output_lost(exc) from exc

    def _output_lost(self, exc: ConnectionError) -> ConnectionClosedError:
        """The output is gone for good (the client stopped reading or closed it): that
        ends the connection, as the end of input does."""
        lost = ConnectionClosedError(f"the output is closed ({exc})")
        if self._receiver is not None:
            self._receiver.connection_lost(lost)
        return lost

    def pause_receiving(self) -> None:
        """Stop taking input (the peer is at its in-flight bound)."""
        self._paused = True
        if self._reader is not None:
            self._reader.pause()

    def resume_receiving(self) -> None:
        """Take input again."""
        self._paused = False
        if self._reader is not None:
            self._reader.resume()

    async def close(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Stop reading, flush what is queued (bounded by ``timeout``), release the fds."""
        if self.closed:
            return
        self.closed = True
        if self._reader is not None:
            self._reader.close()
        if self._writer is not None:
            await self._writer.close(timeout)


class _Reader:
    def pause(self) -> None:
        raise NotImplementedError

    def resume(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _Writer:
    def write(self, data: bytes) -> None:
        raise NotImplementedError

    async def drain(self) -> None:
        raise NotImplementedError

    async def close(self, timeout: float) -> None:
        raise NotImplementedError


class _PipeReader(asyncio.Protocol, _Reader):
    """Polls a pipe, socket or terminal with the loop's read-pipe transport."""

    def __init__(self, fd: int, sink: StdioTransport) -> None:
        self._fd = fd
        self._sink = sink
        self._transport: asyncio.ReadTransport | None = None

    @classmethod
    async def open(cls, loop: asyncio.AbstractEventLoop, fd: int, sink: StdioTransport) -> _Reader:
        reader = cls(fd, sink)
        pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
        await loop.connect_read_pipe(lambda: reader, pipe)
        return reader

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._sink.data_received(data)

    def eof_received(self) -> bool | None:
        self._sink.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._sink.eof_received()

    def pause(self) -> None:
        if self._transport is not None and self._transport.is_reading():
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        _release(self._fd)


class _PipeWriter(asyncio.Protocol, _Writer):
    """Writes through the loop's write-pipe transport, which buffers partial writes."""

    def __init__(self, fd: int, hard_limit: int) -> None:
        self._fd = fd
        self._hard_limit = hard_limit
        self._transport: asyncio.WriteTransport | None = None
        self._lost: asyncio.Future[None] | None = None
        self._resumed: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    @classmethod
    async def open(cls, loop: asyncio.AbstractEventLoop, fd: int, hard_limit: int) -> _Writer:
        writer = cls(fd, hard_limit)
        writer._lost = loop.create_future()
        pipe = os.fdopen(fd, "wb", buffering=0, closefd=False)
        transport, _ = await loop.connect_write_pipe(lambda: writer, pipe)
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        return writer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._error = exc or ConnectionResetError("output closed")
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        self.resume_writing()

    def pause_writing(self) -> None:
        if self._resumed is None and self._lost is not None:
            self._resumed = self._lost.get_loop().create_future()

    def resume_writing(self) -> None:
        if self._resumed is not None:
            if not self._resumed.done():
                self._resumed.set_result(None)
            self._resumed = None

    def write(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self._lost is None or self._lost.done():
            raise ConnectionResetError("output closed")
        transport.write(data)
        if transport.get_write_buffer_size() > self._hard_limit:
            transport.abort()
            raise ConnectionResetError("peer stopped reading output")

    async def drain(self) -> None:
        if self._resumed is not None:
            await asyncio.shield(self._resumed)
        if self._error is not None and self._lost is not None and self._lost.done():
            raise ConnectionResetError("output closed") from self._error

    async def close(self, timeout: float) -> None:
        if self._transport is None or self._lost is None:
            return
        self._transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), timeout)
        except asyncio.TimeoutError:
            self._transport.abort()
        _release(self._fd)


class _ThreadReader(_Reader):
    """One thread blocking in ``os.read`` for fds the loop cannot poll."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, sink: StdioTransport) -> None:
        self._loop = loop
        self._fd = fd
        self._sink = sink
        self._running = threading.Event()
        self._running.set()
        self._closed = False
        threading.Thread(target=self._run, name="dsh-stdin", daemon=True).start()

    def _run(self) -> None:
        while not self._closed:
            self._running.wait()
            try:
                data = os.read(self._fd, _READ_CHUNK)
            except OSError:
                data = b""
            if self._closed:
                return
            try:
                if data:
                    self._loop.call_soon_threadsafe(self._sink.data_received, data)
                else:
                    self._loop.call_soon_threadsafe(self._sink.eof_received)
                    return
            except RuntimeError:  # the loop is closed: nobody is listening any more
                return

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def close(self) -> None:
        # A thread blocked in read() keeps its fd: closing it under the thread could hand
        # the number to a new file. The process's exit closes it.
        self._closed = True
        self._running.set()


class _ThreadWriter(_Writer):
    """One thread doing blocking ``os.write`` for fds the loop cannot poll."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, hard_limit: int) -> None:
        self._loop = loop
        self._fd = fd
        self._hard_limit = hard_limit
        self._pending: list[bytes] = []
        self._size = 0
        self._cond = threading.Condition()
        self._closing = False
        self._error: OSError | None = None
        self._done = loop.create_future()
        threading.Thread(target=self._run, name="dsh-stdout", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                batch, self._pending = self._pending, []
                if not batch and self._closing:
                    break
            joined = b"".join(batch)
            data = memoryview(joined)
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:
                self._error = exc
                break
            with self._cond:
                self._size -= len(joined)
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            self._loop.call_soon_threadsafe(_set_done, self._done)

    def write(self, data: bytes) -> None:
        with self._cond:
            if self._error is not None or self._closing:
                raise ConnectionResetError("output closed") from self._error
            if self._size + len(data) > self._hard_limit:
                raise ConnectionResetError("peer stopped reading output")
            self._pending.append(data)
            self._size += len(data)
            self._cond.notify_all()

    async def drain(self) -> None:
        # The size check lives in ``write``; polling here keeps the thread handoff simple.
        while self._size > _HIGH_WATER and self._error is None and not self._done.done():
            await asyncio.sleep(0.005)

    async def close(self, timeout: float) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        try:
            await asyncio.wait_for(asyncio.shield(self._done), timeout)
        except asyncio.TimeoutError:
            return  # the thread is still blocked in write(); exit closes the fd
        _release(self._fd)


def _release(fd: int) -> None:
    """Give the fd back: blocking mode restored (a terminal shares it with the shell), then
    closed, so the peer sees EOF as soon as the application is done with it."""
    with contextlib.suppress(OSError):
        os.set_blocking(fd, True)
    with contextlib.suppress(OSError):
        os.close(fd)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

