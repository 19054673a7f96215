"""Run the web application: bind, announce, serve on the runtime's loop, stop cleanly.

The socket is bound and listening before anything is announced, so the printed URL
always works (``--port 0`` reports the port the system picked). uvicorn serves on the
runtime's own asyncio loop; its signal capture is switched off because the runtime owns
SIGTERM/SIGINT (:mod:`dsh.runtime.app` cancels ``main``), and it speaks HTTP through
:mod:`.headtimeout`, which closes a connection that sends no complete request head in
``request_timeout_s``. On that cancel the event
streams end and pending approvals are denied first, so no open response holds the
shutdown up, then uvicorn closes within :data:`STOP_BOUND`.

Announcements: the start URL once on stderr for people, and one JSON line
``{"url", "host", "port", "token"}`` on the application's reserved stdout for programs
(tests, benchmarks); nothing else is ever written there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import secrets
import socket
import sys
from collections.abc import Iterator
from importlib import resources
from typing import Any

from dsh.core.errors import UsageError
from dsh.runtime.kernel.plugin import RuntimeContext
from dsh.runtime.servers.operations import Operations, RuntimeView
from dsh.runtime.web.approvals import ApprovalBroker
from dsh.runtime.web.guard import allowed_hosts
from dsh.runtime.web.options import LOOPBACK, WebOptions
from dsh.runtime.web.routes import STATIC_TYPES, WebApi
from dsh.runtime.web.streams import EventHub

STOP_BOUND = 2.0


async def serve(rt: RuntimeContext, options: WebOptions) -> int:
    """Serve until cancelled (a signal); the cancellation propagates after a clean stop."""
    import uvicorn

    from dsh.runtime.web.headtimeout import with_head_timeout

    static = {name: (resources.files("dsh.runtime.web") / "static" / name).read_bytes()
              for name in STATIC_TYPES}
    sock = _bind(options.host, options.port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    agent = rt.service("agent")
    hub = EventHub()
    broker = ApprovalBroker(options.approval_timeout_s, hub.publish)
    api = WebApi(Operations(agent, RuntimeView.of(rt)), hub, broker, rt.cwd,
                 options.max_body_bytes, static, options.request_timeout_s)
    extra = [_url_host(options.host)] if options.explicit_host else []
    app = api.app(token=token, hosts=allowed_hosts(port, extra))
    config = uvicorn.Config(app, http=with_head_timeout(options.request_timeout_s), ws="none",
                            lifespan="off", log_config=None,
                            access_log=False, server_header=False,
                            timeout_graceful_shutdown=int(STOP_BOUND))
    server = _server(config)
    unsubscribe = [agent.add_listener(hub.publish)]
    state = getattr(rt, "config_state", None)
    if state is not None:
        unsubscribe.append(state.add_listener(
            lambda method, params: hub.broadcast("config", {"event": method, **params})))
    agent.set_approver(broker.ask)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        _announce(options, port, token)
        await asyncio.wait({task})
        task.result()
        return 1  # uvicorn stopped without being asked to: not a clean run
    except asyncio.CancelledError:
        hub.close()
        broker.close()
        server.should_exit = True
        await asyncio.wait({task}, timeout=STOP_BOUND + 1)
        raise
    finally:
        agent.set_approver(None)
        for stop in unsubscribe:
            stop()
        if not task.done():
            task.cancel()
        sock.close()


def _server(config: Any) -> Any:
    """uvicorn's server without its signal handlers (the runtime owns the signals)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; failure is a one-line usage error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise UsageError(f"dsh web: cannot listen on {host}:{port}: {exc}") from None
    try:
        if os.name == "posix":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"dsh web: cannot listen on {host}:{port}: "
                         f"{exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _url_host(host: str) -> str:
    """``host`` as it appears in a URL and a Host header (IPv6 in brackets)."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def _announce(options: WebOptions, port: int, token: str) -> None:
    """The start URL on stderr (and a warning for a non-loopback host), JSON on stdout."""
    from dsh.runtime.transports.stdio import app_stdio

    host = options.host
    shown = LOOPBACK if host in ("0.0.0.0", "::") else _url_host(host)
    url = f"http://{shown}:{port}/?token={token}"
    if options.explicit_host and host != LOOPBACK:
        sys.stderr.write(f"dsh web: warning: listening on {host}, not only 127.0.0.1: anyone "
                         "who can reach this port and learns the token can run tools here\n")
    sys.stderr.write(f"dsh web: open {url}\n")
    sys.stderr.flush()
    line = json.dumps({"url": url, "host": host, "port": port, "token": token}) + "\n"
    os.write(app_stdio().write_fd, line.encode())
