"""A real ``dsh web`` process and a small server-sent-events reader, for the web tests.

:class:`WebProcess` spawns ``python -m dsh web --patch ... --port 0`` with the test's
private ``DSH_HOME`` and cwd, waits for the one JSON line the server writes on stdout
once it listens (``{"url", "host", "port", "token"}``), and on exit sends SIGTERM and
checks the exit code. stderr is collected for failure messages.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = REPO / "examples" / "offline" / "patch.yml"
START_TIMEOUT = 30.0


def write_patch(directory: Path, script: str, *, extra: str = "") -> Path:
    """A patch running the scripted provider with ``script`` (YAML text), plus ``extra``."""
    (directory / "script.yml").write_text(script)
    patch = directory / "web-patch.yml"
    patch.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: !path script.yml}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n" + extra)
    return patch


class WebProcess:
    """``dsh web --patch PATCH --port 0 ARGS`` until :meth:`stop`."""

    def __init__(self, patches: Sequence[Path], *, cwd: Path, args: Sequence[str] = ()) -> None:
        argv = [sys.executable, "-m", "dsh", "web"]
        for patch in patches:
            argv += ["--patch", str(patch)]
        self.proc = subprocess.Popen([*argv, "--port", "0", *args], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
        self.stderr: list[str] = []
        self.signalled = False
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_thread.start()
        line = self._lines.get(timeout=START_TIMEOUT)
        if line is None:
            self.proc.wait(10)
            self._stderr_thread.join(5)
            raise AssertionError(f"dsh web exited {self.proc.returncode} before listening:\n"
                                 + "".join(self.stderr))
        self.info: dict[str, Any] = json.loads(line)
        self.port: int = self.info["port"]
        self.token: str = self.info["token"]
        self.base = f"http://127.0.0.1:{self.port}"

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._lines.put(raw.decode())
        self._lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr.append(raw.decode(errors="replace"))

    def extra_stdout(self) -> list[str]:
        """stdout lines after the announcement (must stay empty)."""
        lines = []
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return lines
            if line is not None:
                lines.append(line)

    def client(self, *, auth: bool = True, timeout: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def send(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` once (a second signal would force an immediate exit)."""
        if not self.signalled and self.proc.poll() is None:
            self.signalled = True
            self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the process (unless done already) and return its exit code."""
        self.send(sig)
        try:
            code = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        self._stderr_thread.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code

    def __enter__(self) -> WebProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sse_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """``(event, data, id)`` for each frame of an open ``text/event-stream`` response."""
    event, data, frame_id = "message", [], None
    for line in response.iter_lines():
        if not line:
            if data:
                yield event, json.loads("\n".join(data)), frame_id
            event, data, frame_id = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                frame_id = value


def stream_until_turn_end(client: httpx.Client, session_id: str, *, since: int = 0,
                          turns: int = 1) -> list[dict[str, Any]]:
    """Every session.event from ``since`` until the ``turns``-th ``turn/end``."""
    events: list[dict[str, Any]] = []
    ended = 0
    with client.stream("GET", f"/api/sessions/{session_id}/events",
                       params={"since": since}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for name, data, frame_id in sse_events(response):
            if name != "session.event":
                continue
            event = data["event"]
            assert data["sessionId"] == session_id
            assert frame_id == str(event["seq"])
            events.append(event)
            if event["type"] == "turn/end":
                ended += 1
                if ended == turns:
                    return events
    raise AssertionError(f"stream ended before turn/end: {[e['type'] for e in events]}")


def prompt(client: httpx.Client, session_id: str, text: str) -> str:
    answer = client.post(f"/api/sessions/{session_id}/prompt",
                         json={"contentBlocks": [{"type": "text", "text": text}]})
    assert answer.status_code == 202, answer.text
    return answer.json()["messageId"]
