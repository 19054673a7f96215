"""The allow-list proxy on its own: entries, matching, and a real proxy on 127.0.0.1 answering
real HTTP clients (the sandboxed commands that use it are in ``test_sandbox.py``)."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dsh.core.errors import ConfigError
from dsh.runtime.tools.netproxy import AllowList, Proxy, environment, parse_hosts, refusal_line


def test_entries_match_hosts_subdomains_and_ports() -> None:
    allow = AllowList(parse_hosts(["PyPI.org.", "*.npmjs.org", "10.0.0.5:8080", "[::1]:3000"],
                                  "where"), "where")
    assert allow.allows("pypi.org", 443) and allow.allows("PYPI.ORG.", 80)
    assert not allow.allows("files.pypi.org", 443)  # a plain name is that host only
    assert allow.allows("registry.npmjs.org", 443) and not allow.allows("npmjs.org", 443)
    assert not allow.allows("evilnpmjs.org", 443)
    assert allow.allows("10.0.0.5", 8080) and not allow.allows("10.0.0.5", 80)
    assert allow.allows("[::1]", 3000) and allow.allows("::1", 3000)
    assert not allow.allows("::1", 3001)


@pytest.mark.parametrize(("entry", "problem"), [
    ("http://pypi.org", "a host, not a URL"), ("pypi.org/simple", "a host, not a URL"),
    ("user@pypi.org", "no user or password"), ("pypi.org:0", "a port is a number"),
    ("pypi.org:http", "a port is a number"), ("[::1", "an unclosed ["),
    ("[pypi.org]", "not an IPv6 address"), ("fe80::1", "in brackets"),
    ("a..b", "only letters"), ("-a.org", "only letters"), (":443", "no host"),
    ("x" * 64 + ".org", "only letters"), ("*.", "only letters")])
def test_bad_entries_say_what_is_wrong(entry: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_hosts(["ok.example", entry], "row 'r' config.sandbox.network")
    message = str(caught.value)
    assert message.startswith("row 'r' config.sandbox.network[1]: ") and problem in message
    with pytest.raises(ConfigError, match=r"\[0\]: expected a host name, not int"):
        parse_hosts([443], "row 'r' config.sandbox.network")


def test_the_environment_points_every_client_at_the_proxy() -> None:
    env = environment({"PATH": "/bin", "NO_PROXY": "*", "no_proxy": "*",
                       "HTTPS_PROXY": "http://elsewhere:1"}, "http://127.0.0.1:9")
    assert env == {"PATH": "/bin", **{name: "http://127.0.0.1:9" for name in (
        "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
        "all_proxy")}}


def test_the_refusal_line_names_each_destination_once() -> None:
    from dsh.runtime.tools.netproxy import Refusal

    refused = [Refusal("a.org", 443, ""), Refusal("b.org", 80, ""), Refusal("a.org", 443, "")]
    assert refusal_line(refused, "S") == ("[Network: the sandbox refused a.org:443, b.org:80 "
                                          "(not in S; add a host there to allow it)]")
    assert refusal_line([], "S") == ""


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{self.path} via {self.headers.get('Connection')} " \
               f"{self.headers.get('Proxy-Authorization')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


async def ask(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


def test_a_real_proxy_forwards_tunnels_and_refuses(server: int) -> None:
    async def scenario() -> None:
        proxy = Proxy(AllowList([f"127.0.0.1:{server}"], "row 'r' config.sandbox.network"))
        port = await proxy.listen_tcp()
        try:
            plain = await ask(port, f"GET http://127.0.0.1:{server}/x?y=1 HTTP/1.1\r\n"
                                    "Host: h\r\nConnection: keep-alive\r\n"
                                    "Proxy-Authorization: Basic c2VjcmV0\r\n\r\n".encode())
            assert plain.startswith(b"HTTP/1.0 200") and plain.endswith(b"/x?y=1 via close None")
            refused = await ask(port, b"GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: h\r\n\r\n")
            assert refused.startswith(b"HTTP/1.1 403 Forbidden\r\n"), refused
            assert b"connection to 127.0.0.1:9 refused: not allowed by row 'r'" in refused
            tls = await ask(port, b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n")
            assert tls.startswith(b"HTTP/1.1 400") and b"CONNECT" in tls, tls
            junk = await ask(port, b"hello\r\n\r\n")
            assert junk.startswith(b"HTTP/1.1 400"), junk
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"CONNECT 127.0.0.1:{server} HTTP/1.1\r\n\r\n".encode())
            assert await reader.readuntil(b"\r\n\r\n") == \
                b"HTTP/1.1 200 Connection established\r\n\r\n"
            writer.write(b"GET /tunnelled HTTP/1.0\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 10)).endswith(b"/tunnelled via None None")
            writer.close()
            assert [(r.host, r.port) for r in proxy.refused] == [("127.0.0.1", 9)]
        finally:
            await proxy.close()

    asyncio.run(scenario())


def test_the_proxy_never_connects_to_itself_and_says_when_a_host_is_down() -> None:
    async def scenario() -> None:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            down = closed.getsockname()[1]
        proxy = Proxy(AllowList(["127.0.0.1", "localhost"], "S"))
        port = await proxy.listen_tcp()
        try:
            loop = await ask(port, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
            assert loop.startswith(b"HTTP/1.1 403") and b"itself" in loop, loop
            gone = await ask(port, f"CONNECT 127.0.0.1:{down} HTTP/1.1\r\n\r\n".encode())
            assert gone.startswith(b"HTTP/1.1 502") and b"cannot reach" in gone, gone
        finally:
            await proxy.close()

    asyncio.run(scenario())


def test_a_host_name_never_reaches_loopback_but_the_address_itself_may(server: int) -> None:
    """A name in the list that resolves to 127.0.0.1 (this machine's own name, from
    /etc/hosts) is refused, as a rebinding DNS answer would be; ``127.0.0.1`` and
    ``localhost`` named outright are allowed."""
    name = socket.gethostname().lower()
    try:
        looped = all(ip.startswith("127.") for *_, (ip, *_) in socket.getaddrinfo(
            name, server, type=socket.SOCK_STREAM) if ":" not in ip)
    except OSError:
        looped = False
    if not looped or name == "localhost":
        pytest.skip(f"this machine's name {name!r} does not resolve to loopback only")

    async def scenario() -> None:
        proxy = Proxy(AllowList([name, "localhost", "127.0.0.1"], "S"))
        port = await proxy.listen_tcp()
        try:
            refused = await ask(port, f"GET http://{name}:{server}/ HTTP/1.0\r\n\r\n".encode())
            assert refused.startswith(b"HTTP/1.1 403"), refused
            assert b"resolves only to loopback or link-local addresses" in refused, refused
            for allowed in ("localhost", "127.0.0.1"):
                answer = await ask(port, f"GET http://{allowed}:{server}/ok HTTP/1.0\r\n\r\n"
                                   .encode())
                assert answer.startswith(b"HTTP/1.0 200"), answer
        finally:
            await proxy.close()

    asyncio.run(scenario())


@pytest.mark.skipif(not hasattr(socket, "send_fds"), reason="needs SCM_RIGHTS")
@pytest.mark.parametrize("carrier", ["python", "frozen"])
def test_the_relay_hands_each_connection_to_the_proxy(
        server: int, tmp_path: Any, carrier: str) -> None:
    """The relay as a sandboxed command runs it (here outside a sandbox, on a free port):
    it listens, execs the command, and every connection it accepts is served by the
    proxy in this process; the frozen runtime's entry (``--dsh-netrelay``) runs the
    same source. Run as a sandboxed command is, in a process group of its own that is
    killed at the end: the relay's accepting child outlives the command by design (a
    sandbox's pid namespace or container ends it), and must not outlive the test."""
    import sys

    from dsh.core import netrelay, process

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    request = f"GET http://127.0.0.1:{server}/relayed HTTP/1.0"
    command = ["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}; "
               f"printf '{request}\\r\\n\\r\\n' >&3; cat <&3"]
    path = str(tmp_path / "relay.sock")
    if carrier == "python":
        argv = netrelay.argv(path, port, command)
    else:
        argv = [sys.executable, "-c", "from dsh.core.netrelay import run_frozen; run_frozen()",
                netrelay.FROZEN_FLAG, path, str(port), *command]

    async def scenario() -> bytes:
        proxy = Proxy(AllowList([f"127.0.0.1:{server}"], "S"))
        proxy.listen_relay(path)
        try:
            done = await asyncio.to_thread(process.run, argv, timeout=30)
            return bytes(done.stdout + done.stderr)
        finally:
            await proxy.close()

    output = asyncio.run(scenario())
    assert output.startswith(b"HTTP/1.0 200") and output.endswith(b"/relayed via close None"), \
        output
