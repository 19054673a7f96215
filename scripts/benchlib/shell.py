"""The shell tool's sandbox: what each rung adds to starting a command, and the allow-list
proxy's cost per request."""

from __future__ import annotations

import asyncio
import http.server
import os
import socket
import tempfile
import threading
import time
from typing import Any

from benchlib.procs import PythonPass, balanced, installed_environ, median_ms
from benchlib.registry import Metric, Options, Result, benchmark

SANDBOX = Metric(
    "shell_sandbox_start", "ms", "<", 100,
    about="`bash -c true` as the shell tool starts it on the bubblewrap rung "
          "(workspace-write, bwrap --unshare-net --unshare-pid ...): the command prepared "
          "for its rung, started through dsh.core.process, run to its exit, cleaned up; the "
          "same command unsandboxed is a detail.",
    changes="bubblewrap's namespace set-up (network and pid namespaces cost most), the "
            "kernel, the bind mounts the policy asks for; load. Target 100 ms.")
LANDLOCK = Metric(
    "shell_landlock_start", "ms", "<", 20,
    about="the same `bash -c true` on the Landlock rung (bubblewrap made unavailable): the "
          "rules built for the command, the ruleset and seccomp filter applied in the "
          "forked child, a fresh TMPDIR made and removed; interleaved with the bubblewrap "
          "rung and the unsandboxed start in one loop, its ratio to the bubblewrap rung's "
          "a detail.",
    changes="fork instead of vfork for the pre-exec step (the runtime's size), the number "
            "of rules (entries around the hidden homes), the kernel's Landlock; load. "
            "Target 20 ms (issue 32).")
PROXY = Metric(
    "shell_proxy_overhead", "ms", "<", 5,
    about="what the allow-list proxy adds to one allowed HTTP request: a GET in absolute "
          "form through the proxy (listening on 127.0.0.1, as on the Landlock rung) to a "
          "server on 127.0.0.1, minus the same GET straight to the server; each request on "
          "a new connection, medians of interleaved requests.",
    changes="the event loop the proxy shares with the runtime, the upstream connect and "
            "name check, copying both ways; load. Target 5 ms (issue 32).")


@benchmark("shell_sandbox_start", SANDBOX, LANDLOCK)
def shell_sandbox_start(opts: Options) -> list[Result]:
    """``true`` through the shell tool's own start path on each rung, interleaved."""
    from dsh.runtime.tools.sandbox import Policy, landlock_probe, probe, rung

    base = {"mode": "workspace-write", "network": False, "required": False}
    policies = {"off": Policy.from_config({**base, "mode": "off"}),
                "bubblewrap": Policy.from_config(base),
                "landlock": Policy.from_config({**base, "bwrap": "/nonexistent/bwrap"})}
    bwrap, landlock = probe(policies["bubblewrap"]), landlock_probe()
    sides = ["off"]
    if bwrap.usable:
        sides.append("bubblewrap")
    if landlock.usable and rung(policies["landlock"]).name == "landlock":
        sides.append("landlock")
    runs = opts.reps(41, 9)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        home = os.path.join(tmp, "home")
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        os.makedirs(home)
        baseline = PythonPass(environ, tmp)
        times: dict[str, list[float]] = {side: [] for side in sides}
        for run in range(runs + 1):
            if run:
                baseline.sample()
            for side in balanced(sides, run):
                times[side].append(_start(policies[side], work, home, environ))
    medians = {side: median_ms(samples[1:]) for side, samples in times.items()}
    plain = medians["off"]
    rows: list[Result] = []
    if "bubblewrap" in medians:
        boxed = medians["bubblewrap"]
        rows.append(SANDBOX.measure(boxed, runs=runs, python_pass_ms=baseline.median_ms,
                                    unsandboxed_ms=plain, overhead_ms=round(boxed - plain, 2),
                                    ratio=round(boxed / plain, 2)))
    else:
        rows.append(SANDBOX.skip(f"bubblewrap is not usable here: {bwrap.reason}"))
    if "landlock" in medians:
        value = medians["landlock"]
        details: dict[str, Any] = {"unsandboxed_ms": plain,
                                   "overhead_ms": round(value - plain, 2)}
        if "bubblewrap" in medians:
            details["bubblewrap_ms"] = medians["bubblewrap"]
            details["ratio_to_bubblewrap"] = round(value / medians["bubblewrap"], 2)
        else:
            details["ratio_to_bubblewrap"] = "bubblewrap not usable here"
        rows.append(LANDLOCK.measure(value, runs=runs, python_pass_ms=baseline.median_ms,
                                     **details))
    else:
        rows.append(LANDLOCK.skip(f"the Landlock rung is not usable here: "
                                  f"{landlock.reason}"))
    return rows


def _start(policy: Any, work: str, home: str, environ: dict[str, str]) -> float:
    """Seconds from preparing ``bash -c true`` for ``policy``'s rung to its exit, reaped
    and cleaned up (the shell tool's path, without its output handling)."""
    from dsh.core import process
    from dsh.runtime.tools.confined import prepare
    from dsh.runtime.tools.shell import shell_argv

    async def once() -> float:
        t0 = time.perf_counter()
        command = await prepare(policy, shell_argv("", "true"), work, home=home,
                                env=environ)
        child = process.spawn(command.argv, cwd=work, env=command.env,
                              stdout=process.DEVNULL, stderr=process.DEVNULL,
                              confine=command.confine)
        child.popen.wait()
        child.stop(0)
        await command.close()
        return time.perf_counter() - t0

    return asyncio.run(once())


class _Hello(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        body = b"hello\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@benchmark("shell_proxy_overhead", PROXY)
def shell_proxy_overhead(opts: Options) -> Result:
    """One GET straight to a local server and one through the allow-list proxy, in turn."""
    from dsh.runtime.tools.netproxy import AllowList, Proxy

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    target = server.server_address[1]
    loop = asyncio.new_event_loop()
    looping = threading.Thread(target=loop.run_forever, daemon=True)
    looping.start()
    proxy = Proxy(AllowList([f"127.0.0.1:{target}"], "bench"))
    port = asyncio.run_coroutine_threadsafe(proxy.listen_tcp(), loop).result(10)
    runs = opts.reps(401, 61)
    sides = {"direct": (target, b"GET / HTTP/1.0\r\n\r\n"),
             "proxy": (port, f"GET http://127.0.0.1:{target}/ HTTP/1.0\r\n\r\n".encode())}
    times: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        try:
            for run in range(runs + 1):
                if run % 20 == 0:
                    baseline.sample()
                for side in balanced(list(sides), run):
                    times[side].append(_get(*sides[side]))
        finally:
            asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            looping.join(10)
            loop.close()
            server.shutdown()
            server.server_close()
    if proxy.refused:
        return PROXY.skip(f"the proxy refused the bench's own server: {proxy.refused[0]}")
    direct, proxied = (median_ms(times[s][1:]) for s in ("direct", "proxy"))
    return PROXY.measure(round(proxied - direct, 3), runs=runs,
                         python_pass_ms=baseline.median_ms, direct_ms=direct,
                         through_proxy_ms=proxied)


def _get(port: int, request: bytes) -> float:
    """Seconds for one request on a new connection to 127.0.0.1:``port``, to the answer's
    end; the answer must be the server's 200."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    elapsed = time.perf_counter() - t0
    if not answer.startswith(b"HTTP/1.") or b" 200 " not in answer.split(b"\r\n", 1)[0] \
            or not answer.endswith(b"hello\n"):
        raise RuntimeError(f"unexpected answer: {answer[:80]!r}")
    return elapsed
