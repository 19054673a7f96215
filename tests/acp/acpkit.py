"""Helpers for the ACP tests: offline patches, scripts, and two clients for ``dsh --profile acp``.

* :func:`acp_client` runs the ``agent-client-protocol`` package's own client (a peer
  nobody here wrote) against a spawned ``dsh``; :class:`Recorder` is the client-side
  handler object that records updates and answers permission requests.
* :class:`RawAcp` speaks line by line over real pipes and checks that every stdout line
  is a JSON-RPC 2.0 frame, for the stdout-purity and bad-input tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = REPO / "examples" / "offline" / "patch.yml"


def write_patch(tmp: Path, script: list[dict[str, Any]], *, mode: str = "ask",
                extra: Sequence[dict[str, Any]] = ()) -> Path:
    """An offline patch: the scripted provider answering ``script``, policy ``mode``."""
    script_path = tmp / "script.yml"
    script_path.write_text(yaml.safe_dump(script))
    patch = tmp / "acp-patch.yml"
    rows = [
        {"id": "llm-scripted", "merge": {"config": {"script": str(script_path)}}},
        {"id": "policy", "merge": {"config": {"mode": mode}}},
        *extra,
    ]
    patch.write_text(yaml.safe_dump(rows))
    return patch


def dsh_argv(*patches: Path) -> list[str]:
    """``python -m dsh --profile acp --patch <offline> --patch ...``."""
    argv = [sys.executable, "-m", "dsh", "--profile", "acp", "--patch", str(OFFLINE_PATCH)]
    for patch in patches:
        argv += ["--patch", str(patch)]
    return argv


# -- the agent-client-protocol package's client ---------------------------------------------


class Recorder:
    """The client side: records every ``session/update``, answers permission requests
    with ``answer`` (an option id, or ``"cancelled"``), and fails on fs/terminal calls
    (dsh's client advertises none, so dsh must never make them)."""

    def __init__(self, answer: str = "allow_once") -> None:
        self.answer = answer
        self.updates: list[tuple[str, Any]] = []
        self.permissions: list[dict[str, Any]] = []
        self.forbidden: list[str] = []

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any,
                                 **kwargs: Any) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        self.permissions.append({"sessionId": session_id, "toolCall": tool_call,
                                 "options": options})
        if self.answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=self.answer, outcome="selected"))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        self.forbidden.append("fs/write_text_file")
        raise RuntimeError("not advertised")

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        self.forbidden.append("fs/read_text_file")
        raise RuntimeError("not advertised")

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        self.forbidden.append("terminal/create")
        raise RuntimeError("not advertised")

    def kinds(self) -> list[str]:
        """The ``sessionUpdate`` kind of every update so far, in order."""
        return [u.session_update for _, u in self.updates]

    def of(self, kind: str) -> list[Any]:
        """The updates of one kind."""
        return [u for _, u in self.updates if u.session_update == kind]

    def agent_text(self) -> str:
        """All agent message chunks' text, joined."""
        return "".join(u.content.text for u in self.of("agent_message_chunk"))


@contextlib.asynccontextmanager
async def acp_client(recorder: Recorder, tmp: Path, *patches: Path,
                     frames: list[dict[str, Any]] | None = None) -> AsyncIterator[Any]:
    """Spawn ``dsh --profile acp`` and yield the package's ``ClientSideConnection``.

    ``frames`` (when given) receives every message the client reads, in arrival order.
    The agent's stderr goes to ``tmp/agent-stderr.log``.
    """
    from acp import spawn_agent_process
    from acp.connection import StreamDirection, StreamEvent

    def observe(event: StreamEvent) -> None:
        if frames is not None and event.direction is StreamDirection.INCOMING:
            frames.append(event.message)

    with open(tmp / "agent-stderr.log", "ab") as stderr:
        argv = dsh_argv(*patches)
        async with spawn_agent_process(
            recorder, argv[0], *argv[1:], env=dict(os.environ), cwd=os.getcwd(),
            transport_kwargs={"stderr": stderr.fileno()}, observers=[observe],
        ) as (conn, process):
            yield conn
        assert process.returncode == 0, (tmp / "agent-stderr.log").read_text()[-4000:]


# -- a raw line client -----------------------------------------------------------------------


def assert_frame(line: bytes) -> dict[str, Any]:
    """One stdout line must be one JSON-RPC 2.0 request, notification or response."""
    assert line.endswith(b"\n"), f"unterminated stdout line: {line[:200]!r}"
    frame = json.loads(line)
    assert isinstance(frame, dict) and frame.get("jsonrpc") == "2.0", line[:200]
    if "method" in frame:
        assert isinstance(frame["method"], str)
    else:
        assert "id" in frame and (("result" in frame) != ("error" in frame)), frame
    return frame


class RawAcp:
    """``dsh --profile acp`` with piped stdio, spoken to one line at a time."""

    def __init__(self, *patches: Path) -> None:
        self.proc = subprocess.Popen(dsh_argv(*patches), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[bytes] = []
        self._frames: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._stderr: list[bytes] = []
        self._next_id = 0
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            try:
                self._frames.put(assert_frame(line))
            except (AssertionError, ValueError):
                self._frames.put({"impure": line.decode("utf-8", "replace")})
        self._frames.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: Any = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self._next_id

    def recv(self, timeout: float = 20.0) -> dict[str, Any]:
        try:
            frame = self._frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no frame in {timeout} s; stderr: {self.stderr()}") from None
        if frame is None:
            raise AssertionError(f"stdout closed; stderr: {self.stderr()}")
        assert "impure" not in frame, f"not a JSON-RPC frame on stdout: {frame['impure']!r}"
        return frame

    def until(self, done: Callable[[dict[str, Any]], bool],
              on_request: Callable[[dict[str, Any]], Any] | None = None
              ) -> list[dict[str, Any]]:
        """Frames up to and including the first ``done`` one; server requests are
        answered with ``on_request(frame)`` as they come."""
        seen = []
        while True:
            frame = self.recv()
            seen.append(frame)
            if "method" in frame and "id" in frame and on_request is not None:
                self.send({"jsonrpc": "2.0", "id": frame["id"], "result": on_request(frame)})
            if done(frame):
                return seen

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        rid = self.request(method, params)
        return self.until(lambda f: f.get("id") == rid and "method" not in f)[-1]

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")[-4000:]

    def finish(self) -> None:
        """Kill if still running, join the readers, close the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(15)
        for thread in self._threads:
            thread.join(15)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
