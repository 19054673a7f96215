"""A real ``dsh`` runtime process and a line-level client for it, for protocol tests.

Every line the runtime writes on stdout is parsed and checked to be a JSON-RPC 2.0 frame
as it arrives (:func:`assert_frame`); a test that reads nothing still fails on a stray
line when it calls :meth:`RuntimeProcess.finish`. stderr is collected as a bounded tail
for failure messages.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsh.core import jsonrpc

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OFFLINE_PATCH = REPO / "examples" / "offline" / "patch.yml"

STANDIN_PATCH = """\
- {id: agent, disabled: true}
- {id: tools, disabled: true}
- {id: policy, disabled: true}
- insert:
    - id: standin
      name: "standin_agent:StandInAgentPlugin"
      config: {dispose_delay: %(dispose_delay)s}
- {id: sdk-server, config: %(server_config)s}
"""


def assert_frame(line: bytes) -> dict[str, Any]:
    """Parse one stdout line and check it is a JSON-RPC 2.0 request, notification or
    response; anything else on stdout is a hygiene failure."""
    assert line.endswith(b"\n"), f"unterminated stdout line: {line[:200]!r}"
    frame = json.loads(line)
    assert isinstance(frame, dict), f"stdout line is not an object: {line[:200]!r}"
    assert frame.get("jsonrpc") == "2.0", f"not JSON-RPC 2.0: {line[:200]!r}"
    if "method" in frame:
        assert isinstance(frame["method"], str)
    else:
        assert "id" in frame and (("result" in frame) != ("error" in frame)), frame
    return frame


def standin_patch(tmp: Path, *, dispose_delay: float = 0, **server_config: Any) -> Path:
    """A patch running the stand-in agent under the real SDK server."""
    path = tmp / "standin.yml"
    path.write_text(STANDIN_PATCH % {"dispose_delay": dispose_delay,
                                     "server_config": json.dumps(server_config)})
    return path


class RuntimeProcess:
    """``python -m dsh --profile PROFILE --patch ...`` with piped stdio."""

    def __init__(self, profile: str, patches: Sequence[Path], *, cwd: Path,
                 args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 wrapper: Sequence[str] = ()) -> None:
        """``wrapper`` is put before the command (a program that execs the rest, e.g. one
        giving the runtime a host name of its own)."""
        environ = dict(os.environ)
        environ["PYTHONPATH"] = os.pathsep.join(
            [str(HERE), *filter(None, [environ.get("PYTHONPATH")])])
        environ.update(env or {})
        argv = [*wrapper, sys.executable, "-m", "dsh", "--profile", profile]
        for patch in patches:
            argv += ["--patch", str(patch)]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*argv, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=cwd, env=environ,
        )
        self.frames: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=200)
        self.raw_stdout: list[bytes] = []
        self._next_id = 0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw_stdout.append(line)
            try:
                self.frames.put(assert_frame(line))
            except BaseException as exc:  # surfaced to the test by recv()
                self.frames.put(exc)
        self.frames.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail.append(line.decode(errors="replace").rstrip())

    # -- writing ---------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(jsonrpc.encode(message))

    def request(self, method: str, params: Any = None) -> int:
        self._next_id += 1
        self.send(jsonrpc.request(self._next_id, method, params))
        return self._next_id

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    # -- reading ---------------------------------------------------------------------------

    def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        try:
            item = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no frame within {timeout} s; stderr:\n{self.stderr()}") from None
        if item is None:
            self.frames.put(None)
            raise EOFError(f"runtime closed stdout; stderr:\n{self.stderr()}")
        if isinstance(item, BaseException):
            raise item
        return item

    def response(self, rid: int, timeout: float = 10.0) -> dict[str, Any]:
        """The response to ``rid``; notifications before it are skipped."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv(max(0.01, deadline - time.monotonic()))
            if "method" not in frame and frame.get("id") == rid:
                return frame

    def call(self, method: str, params: Any = None, timeout: float = 10.0) -> dict[str, Any]:
        return self.response(self.request(method, params), timeout)

    def until(self, method: str, predicate: Any = None, timeout: float = 10.0) -> list[dict]:
        """Frames up to and including the first notification ``method`` matching."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            frame = self.recv(max(0.01, deadline - time.monotonic()))
            seen.append(frame)
            if frame.get("method") == method and (predicate is None or predicate(frame)):
                return seen

    def initialize(self, cwd: Path, **params: Any) -> dict[str, Any]:
        answer = self.call("initialize", {"cwd": str(cwd), **params}, timeout=30)
        assert "result" in answer, answer
        return answer["result"]

    # -- ending ----------------------------------------------------------------------------

    def wait(self, timeout: float = 15.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"runtime still running after {timeout} s; stderr:\n"
                                 f"{self.stderr()}") from None

    def stderr(self) -> str:
        return "\n".join(self.stderr_tail)

    def finish(self) -> None:
        """Make sure the process is gone, and that everything it printed was a frame."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        for line in list(self.raw_stdout):
            assert_frame(line)


def dsh_script() -> Path:
    """The installed ``dsh`` console script beside the interpreter under test."""
    return Path(sys.executable).parent / ("dsh.exe" if os.name == "nt" else "dsh")
