"""The sandbox's network allow-list: host names, and the proxy in the runtime that keeps it.

A shell row's ``sandbox.network`` may be a list of hosts instead of ``true``/``false``
(``[pypi.org, files.pythonhosted.org, registry.npmjs.org, github.com]``). A sandboxed
command then has no route out but one: an HTTP proxy that this module runs inside the
runtime, one per command, which the command finds through the standard variables
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and their lower-case twins; ``NO_PROXY``
removed, so nothing is sent around it). The proxy speaks

- ``CONNECT host:port`` (HTTPS, and any TLS or TCP protocol a client tunnels): a
  tunnel, bytes copied both ways, **no TLS interception** (the proxy never sees inside);
- plain HTTP in absolute form (``GET http://host/path``): forwarded with the request
  line made relative, ``Proxy-*`` headers dropped and ``Connection: close`` (one request
  per upstream connection, so a second request on a kept-alive connection cannot go
  to a host nobody checked).

Every other destination is refused with ``403 Forbidden`` and a one-line body naming the
host and the setting that would allow it, and the refusal is recorded so the tool result
can say it too. The names are resolved by the proxy (in the runtime), never by the
command: a sandboxed command needs no DNS, and gets none (UDP is refused).

Entries (:func:`parse_hosts`): a host name (``pypi.org``, any port), ``*.example.com``
(its subdomains, not itself), an IPv4 address or ``[IPv6]``, each optionally with
``:port`` (that port only). How the command reaches the proxy is the rung's business
(:mod:`dsh.runtime.tools.sandbox`): a TCP port on 127.0.0.1 under Landlock, a unix socket
and a relay (:mod:`dsh.core.netrelay`) under bubblewrap, whose accepted connections
arrive here as file descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError
from dsh.runtime.tools import netguard

_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_HEAD_LIMIT = 64 * 1024
"""Bytes a request head (request line and headers) may take."""
_HEAD_TIMEOUT = 30.0
"""Seconds a client has to send its request head."""
_CONNECT_TIMEOUT = 30.0
"""Seconds the proxy gives an upstream connection to open."""
_MAX_CONNECTIONS = 256
"""Connections one command's proxy serves at once; more wait for a free slot."""
_CHUNK = 65536
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                   "all_proxy")
"""Set to the proxy for every sandboxed command under an allow-list."""
BYPASS_VARIABLES = ("NO_PROXY", "no_proxy")
"""Removed: a command told to go around the proxy would only fail."""
RELAY_PORT = 3128
"""Where the relay listens inside a bubblewrap sandbox (its own network: never taken)."""


class Entry(NamedTuple):
    """One allow-list entry: ``host`` (lower case, no brackets), whether it stands for its
    subdomains (``*.``), and the one ``port`` it allows (0: any)."""

    host: str
    subdomains: bool = False
    port: int = 0

    def allows(self, host: str, port: int) -> bool:
        """Whether this entry lets ``host:port`` through (``host`` normalised)."""
        if self.port and port != self.port:
            return False
        if self.subdomains:
            return host.endswith("." + self.host)
        return host == self.host


def parse_hosts(values: Iterable[Any], where: str) -> tuple[str, ...]:
    """The allow-list as given, each entry checked; the first bad one is a ConfigError
    naming ``where[index]``: a host name, ``*.`` subdomains, an IP address, with an
    optional ``:port``; no scheme, path or user."""
    found: list[str] = []
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ConfigError(f"{where}[{index}]: expected a host name, not "
                              f"{type(value).__name__}")
        problem = _problem(value.strip())
        if problem:
            shown = value if len(value) <= 80 else value[:77] + "..."
            raise ConfigError(f"{where}[{index}]: {shown!r} is not a host name ({problem}; "
                              "write pypi.org, *.example.com, 10.0.0.5 or host:port)")
        found.append(value.strip().lower().rstrip("."))
    return tuple(found)


def _problem(text: str) -> str:
    if not text:
        return "it is empty"
    if "://" in text or "/" in text:
        return "a host, not a URL"
    if "@" in text:
        return "no user or password"
    try:
        _entry(text)
    except ValueError as exc:
        return str(exc)
    return ""


def _entry(text: str) -> Entry:
    """``text`` as an :class:`Entry`; ValueError saying what is wrong."""
    text = text.lower().rstrip(".")
    port = 0
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError("an unclosed [")
        host, rest = text[1:close], text[close + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("not an IPv6 address inside []") from None
        if rest:
            port = _port(rest.removeprefix(":")) if rest.startswith(":") else -1
            if port < 0:
                raise ValueError("only :port may follow ]")
        return Entry(host, False, port)
    if text.count(":") > 1:
        raise ValueError("an IPv6 address goes in brackets: [::1]")
    if ":" in text:
        text, _, raw = text.partition(":")
        port = _port(raw)
    subdomains = text.startswith("*.")
    host = text[2:] if subdomains else text
    if not host:
        raise ValueError("no host before the port")
    if len(host) > 253:
        raise ValueError("longer than 253 characters")
    if not all(_LABEL.match(label) for label in host.split(".")):
        raise ValueError("only letters, digits, '-' and '_' between dots")
    return Entry(host, subdomains, port)


def _port(raw: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError("a port is a number from 1 to 65535")
    return int(raw)


class AllowList:
    """The parsed list and the setting that holds it (named in every refusal)."""

    def __init__(self, hosts: Sequence[str], setting: str) -> None:
        self.hosts = tuple(hosts)
        self.entries = tuple(_entry(h) for h in self.hosts)
        self.setting = setting

    def allows(self, host: str, port: int) -> bool:
        """Whether ``host:port`` (as the client named it) is allowed."""
        host = _normal(host)
        return any(entry.allows(host, port) for entry in self.entries)


def _normal(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


class Refusal(NamedTuple):
    """A destination the proxy refused: ``host:port`` and why."""

    host: str
    port: int
    reason: str


class Proxy:
    """One command's allow-list proxy (see the module docstring).

    :meth:`listen_tcp` opens it on 127.0.0.1 (the Landlock rung, whose command may connect
    to that port only); :meth:`listen_relay` on a unix socket that a relay inside a
    bubblewrap sandbox hands connections to. :attr:`refused` is what it turned away, in
    order, for the tool result; :meth:`close` ends every connection.
    """

    def __init__(self, allow: AllowList) -> None:
        self.allow = allow
        self.refused: list[Refusal] = []
        self.port = 0
        self._servers: list[asyncio.AbstractServer] = []
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)
        self._own: set[tuple[str, int]] = set()

    async def listen_tcp(self) -> int:
        """Listen on a random port of 127.0.0.1; returns the port."""
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0,
                                            limit=_HEAD_LIMIT)
        self._servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        self._own.add(("127.0.0.1", self.port))
        return self.port

    def listen_relay(self, path: str) -> None:
        """Listen on the unix socket ``path`` for a relay's control connection; each file
        descriptor it sends is one client connection."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.setblocking(False)
        self._listener = listener
        self._spawn(self._accept_relay(listener))

    async def _accept_relay(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        control, _ = await loop.sock_accept(listener)
        control.setblocking(False)
        ready = asyncio.Event()
        loop.add_reader(control.fileno(), ready.set)
        try:
            while True:
                await ready.wait()
                ready.clear()
                try:
                    _, fds, _, _ = socket.recv_fds(control, 1, 16)
                except BlockingIOError:
                    continue
                except OSError:
                    return
                if not fds:
                    return  # the relay (so the sandbox) is gone
                for fd in fds:
                    self._spawn(self._serve_fd(fd))
        finally:
            loop.remove_reader(control.fileno())
            control.close()

    async def _serve_fd(self, fd: int) -> None:
        conn = socket.socket(fileno=fd)
        conn.setblocking(False)
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=_HEAD_LIMIT)
        except OSError:
            conn.close()
            return
        await self._serve(reader, writer)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop listening and end every connection still open."""
        for server in self._servers:
            server.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    # -- one client connection --------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            async with self._slots:
                await self._one(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.TimeoutError, ValueError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            await _answer(writer, 400, "dsh sandbox proxy: not an HTTP request")
            return
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, port = _split_authority(target, 443)
            if host is None:
                await _answer(writer, 400, f"dsh sandbox proxy: bad CONNECT target {target}")
                return
            upstream = await self._open(writer, host, port)
            if upstream is None:
                return
            writer.write(f"{version} 200 Connection established\r\n\r\n".encode("latin-1"))
            await writer.drain()
            await _pipe(reader, writer, *upstream)
            return
        if not target.lower().startswith("http://"):
            why = ("HTTPS goes through CONNECT (the proxy does not open TLS)"
                   if target.lower().startswith("https://") else
                   "a proxy request names an absolute http:// URL")
            await _answer(writer, 400, f"dsh sandbox proxy: {why}")
            return
        rest = target[len("http://"):]
        authority, slash, path = rest.partition("/")
        host, port = _split_authority(authority.rpartition("@")[2], 80)
        if host is None:
            await _answer(writer, 400, f"dsh sandbox proxy: bad URL {target}")
            return
        upstream = await self._open(writer, host, port)
        if upstream is None:
            return
        headers = [line for line in lines[1:] if line and not line.lower().startswith(
            ("proxy-", "connection:", "keep-alive:"))]
        request = "\r\n".join([f"{method} {slash}{path} {version}", *headers,
                               "Connection: close", "", ""])
        upstream[1].write(request.encode("latin-1"))
        await upstream[1].drain()
        await _pipe(reader, writer, *upstream)

    async def _open(self, writer: asyncio.StreamWriter, host: str,
                    port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Check ``host:port`` and connect to it; on refusal or failure answer the client
        and return None.

        The name is resolved here and the connection made to a checked address (no second
        lookup a rebinding DNS server could answer differently). A host *name* never
        reaches loopback, link-local (cloud metadata at 169.254.169.254), unspecified or
        multicast addresses: only an entry naming such an address itself (or
        ``localhost``) does.
        """
        name = _normal(host)
        if not self.allow.allows(name, port):
            await self._refuse(writer, name, port, "not in the allow-list",
                               f"not allowed by {self.allow.setting}; add {name} (any "
                               f"port) or {name}:{port} there to allow it")
            return None
        try:
            addresses = await netguard.resolve(name, port)
        except netguard.BlockedURLError as exc:
            await _answer(writer, 502, f"dsh sandbox proxy: {exc}")
            return None
        if not _literal(name) and name != "localhost":
            addresses = [a for a in addresses if not _internal(a)]
            if not addresses:
                await self._refuse(
                    writer, name, port, "a name for an internal address",
                    f"{name} resolves only to loopback or link-local addresses, which a host "
                    "name in the allow-list never reaches; name the address itself there")
                return None
        failure = "no address"
        for address in addresses:
            if (str(address), port) in self._own:
                await self._refuse(writer, name, port, "the proxy itself",
                                   "the proxy does not connect to itself")
                return None
            try:
                reader, upstream = await asyncio.wait_for(
                    asyncio.open_connection(str(address), port, limit=_CHUNK),
                    _CONNECT_TIMEOUT)
            except asyncio.TimeoutError:
                failure = "timed out"
            except OSError as exc:
                failure = exc.strerror or str(exc)
            else:
                return reader, upstream
        await _answer(writer, 502, f"dsh sandbox proxy: cannot reach {name}:{port}: {failure}")
        return None

    async def _refuse(self, writer: asyncio.StreamWriter, name: str, port: int, reason: str,
                      text: str) -> None:
        self.refused.append(Refusal(name, port, reason))
        await _answer(writer, 403, f"dsh sandbox: connection to {name}:{port} refused: {text}")


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _internal(address: netguard.Address) -> bool:
    plain = netguard.unwrap(address)
    return plain.is_loopback or plain.is_link_local or plain.is_unspecified \
        or plain.is_multicast


def _split_authority(text: str, default: int) -> tuple[str | None, int]:
    """``(host, port)`` of ``host[:port]`` or ``[v6][:port]``; host None when malformed."""
    text = text.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            return None, 0
        host, rest = text[1:close], text[close + 1:]
    else:
        host, _, port_text = text.partition(":")
        rest = f":{port_text}" if port_text else ""
    if rest:
        raw = rest.removeprefix(":")
        if not rest.startswith(":") or not raw.isdigit() or not 0 < int(raw) < 65536:
            return None, 0
        return (host or None), int(raw)
    return (host or None), default


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (text + "\n").encode("utf-8")
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
                 + body)
    with contextlib.suppress(OSError):
        await writer.drain()


async def _pipe(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                upstream_reader: asyncio.StreamReader,
                upstream_writer: asyncio.StreamWriter) -> None:
    """Copy both ways until both sides are done (a half-close is passed on)."""
    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(_CHUNK):
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()
        except OSError:
            dst.close()

    try:
        await asyncio.gather(copy(client_reader, upstream_writer),
                             copy(upstream_reader, client_writer))
    finally:
        upstream_writer.close()


def environment(env: dict[str, str], url: str) -> dict[str, str]:
    """``env`` with every proxy variable pointing at ``url`` and the bypass list removed."""
    out = {k: v for k, v in env.items() if k not in BYPASS_VARIABLES}
    for name in PROXY_VARIABLES:
        out[name] = url
    return out


def refusal_line(refused: Sequence[Refusal], setting: str) -> str:
    """The one line a tool result carries when the proxy refused destinations ('' if
    none): each ``host:port`` once, in order."""
    if not refused:
        return ""
    seen = list(dict.fromkeys(f"{r.host}:{r.port}" for r in refused))
    shown = ", ".join(seen[:10]) + (f" and {len(seen) - 10} more" if len(seen) > 10 else "")
    return (f"[Network: the sandbox refused {shown} (not in {setting}; add a host there to "
            "allow it)]")

