"""A bare JSON-RPC peer on a spawned runtime's pipes: the fewest moving parts between the
clock and the runtime, so the figures are the runtime's, not a client's (the SDK client's
own cost is measured apart, in :mod:`benchlib.sdk`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from benchlib.procs import OFFLINE_PATCH


class Rpc:
    """``<runtime> --profile P [--patch offline]`` spawned now (``t0``), spoken to in
    newline-delimited JSON-RPC."""

    def __init__(self, profile: str, environ: dict[str, str], cwd: str,
                 runtime: tuple[str, ...] | list[str] | None = None, *,
                 offline: bool = True) -> None:
        argv = [*(runtime or [sys.executable, "-m", "dsh"]), "--profile", profile,
                *(["--patch", str(OFFLINE_PATCH)] if offline else [])]
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=environ, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Write one request (buffered until :meth:`flush`); its id."""
        from dsh.core import jsonrpc

        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(jsonrpc.encode(jsonrpc.request(self.next_id, method, params)))
        return self.next_id

    def flush(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        """The next frame from the runtime."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the runtime closed its stdout")
        return json.loads(line)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and read until its answer (notifications skipped)."""
        wanted = self.send(method, params)
        self.flush()
        while True:
            frame = self.read()
            if frame.get("id") == wanted:
                return frame

    def close(self) -> None:
        """Close stdin (the runtime exits on EOF) and reap it."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
