"""The servers' JSON-RPC peer: the core :class:`~dsh.core.peer.Peer`, lenient, answering
with the servers' one error table, served on the application's reserved stdio.

The SDK and ACP servers register handlers on the peer this module makes and never see a
frame. Each incoming request runs as its own task, so a slow handler never delays a fast
one and answers may leave out of order, as JSON-RPC allows; at ``max_in_flight``
running requests the peer stops reading its input until half are done, which pushes back
on a flooding client through the pipe instead of growing memory. A request to the client
(an approval, an ACP permission, later ACP ``fs/*`` and ``terminal/*``) goes through the
same peer's ``request`` with its timeout.

How failures leave, so that one bad line never costs the connection:

    undecodable line      -32700, id null
    not a request shape   -32600, id recovered when readable
    oversize line         -32600, id null (the line is skipped, the stream goes on)
    lone surrogate        in the id or method: -32600, id null; in params: -32602
                          (such a string cannot be encoded back, nor stored)
    unknown method        -32601
    handler raised        a DshError -> its answer in :mod:`dsh.runtime.servers.errors`
                          (the one table); anything else -> -32603 "internal error"
                          (traceback on stderr)
    result too large      -32603 for the same id
"""

from __future__ import annotations

import logging

from dsh.core.peer import Peer
from dsh.runtime.servers.errors import to_wire
from dsh.runtime.servers.validation import lone_surrogate

log = logging.getLogger("dsh.servers")

DRAIN_TIMEOUT = 1.0
"""Seconds requests still running at the end of input get to answer; serving then ends
within this, the peer's cancel grace and the transport's flush bound, leaving room in the
runtime's 5 s disposal."""


def server_peer(*, max_in_flight: int = 1024, drain_timeout: float = DRAIN_TIMEOUT) -> Peer:
    """A peer as every dsh server runs one: bad input answered, errors through the table,
    params with lone surrogates refused before any handler sees them."""
    return Peer(strict=False, error_answer=to_wire, check_params=lone_surrogate,
                max_in_flight=max_in_flight, drain_timeout=drain_timeout, log=log)


async def serve_stdio(peer: Peer, max_frame_bytes: int, *, hint: str | None = None) -> None:
    """Serve ``peer`` on the reserved stdio until EOF, output loss or ``peer.stop()``.

    ``hint``: the line said on stderr when stdin is a terminal, for a person who started
    this server by hand (:func:`dsh.runtime.servers.terminal.hint_at_terminal`).
    """
    from dsh.runtime.transports.stdio import StdioTransport, app_stdio

    fds = app_stdio()
    if hint is not None:
        from dsh.runtime.servers.terminal import hint_at_terminal

        hint_at_terminal(fds.read_fd, hint)
    transport = StdioTransport(fds.read_fd, fds.write_fd, max_frame_bytes=max_frame_bytes)
    await transport.start(peer)
    await peer.serve()
