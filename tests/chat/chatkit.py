"""Driving ``dsh chat`` as a person would: in a real pseudo-terminal (pexpect), the screen
read through a terminal emulator (pyte), with the scripted model.

:class:`Terminal` keeps both what a person sees (``screen()``, pyte's display, with
colours per cell) and every byte the chat wrote (``raw``), so a test can say both "the
table is drawn with borders" and "no OSC 52 ever reached the terminal".
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pexpect
import pyte
import yaml

REPO = Path(__file__).resolve().parents[2]
WAIT = 60.0
"""A bound on waiting for the screen to show something (never an assertion on time)."""


def scripted_patch(tmp: Path, responses: list[dict[str, Any]], *, policy: str | None = None,
                   chunk_size: int = 16, context_window: int = 128000,
                   idle_release_s: float | None = None) -> tuple[Path, Path]:
    """A patch making ``responses`` the model (requests recorded), and the record file;
    with ``idle_release_s``, leases given back that soon after a session's work ends and
    checked every 0.1 s (sessions that move between runtimes quickly)."""
    script, record = tmp / "script.yml", tmp / "requests.jsonl"
    script.write_text(yaml.safe_dump(responses, allow_unicode=True))
    rows: list[dict[str, Any]] = [
        {"insert": [{"id": "llm-scripted", "name": "llm-scripted",
                     "config": {"script": str(script), "record": str(record),
                                "chunk_size": chunk_size,
                                "context_window": context_window}}]},
        {"id": "agent", "merge": {"config": {"default_route": "scripted"}}},
    ]
    if policy is not None:
        rows.append({"id": "policy", "merge": {"config": {"mode": policy}}})
    if idle_release_s is not None:
        rows.append({"id": "sessions", "merge": {"config": {
            "idle_release_s": idle_release_s, "lease_heartbeat_s": 0.1,
            "lease_expiry_s": 5}}})
    patch = tmp / "chat-patch.yml"
    patch.write_text(yaml.safe_dump(rows))
    return patch, record


def requests(record: Path) -> list[dict[str, Any]]:
    """What the scripted model was sent, request by request."""
    if not record.exists():
        return []
    return [json.loads(x) for x in record.read_text().splitlines()]


class Terminal:
    """``dsh ARGS`` in a pseudo-terminal of ``cols`` x ``rows``."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None,
                 cols: int = 80, rows: int = 24) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("DSH_SERVE")}
        environ.update({"TERM": "xterm-256color", "COLORTERM": "truecolor",
                        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
        environ.pop("NO_COLOR", None)
        environ.update(env or {})
        self.screen_ = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen_)
        self.raw = bytearray()
        self.child = pexpect.spawn(sys.executable, ["-m", "dsh", *args], cwd=str(cwd),
                                   env=environ, dimensions=(rows, cols), timeout=WAIT)

    # -- reading -------------------------------------------------------------------------

    def pump(self, seconds: float = 0.05) -> None:
        """Read what the chat wrote during ``seconds`` into the screen."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                data = self.child.read_nonblocking(65536, timeout=0.02)
            except pexpect.TIMEOUT:
                data = b""
            except pexpect.EOF:
                return
            if data:
                self.raw += data
                self.stream.feed(data)
            if time.monotonic() >= deadline and not data:
                return

    def screen(self) -> str:
        """The screen as text, one line per row."""
        return "\n".join(self.screen_.display)

    def wait_for(self, wanted: str | Callable[[str], bool], *, timeout: float = WAIT) -> str:
        """Pump until the screen shows ``wanted`` (text, or a predicate of the screen)."""
        check = wanted if callable(wanted) else (lambda shown: wanted in shown)
        deadline = time.monotonic() + timeout
        while True:
            self.pump(0.05)
            shown = self.screen()
            if check(shown):
                return shown
            if not self.child.isalive() or time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed {wanted!r}; it shows:\n{shown}"
                                     f"\n(alive: {self.child.isalive()})")

    def settle(self, seconds: float = 0.3) -> str:
        """Pump for ``seconds`` and return the screen."""
        self.pump(seconds)
        return self.screen()

    def cells(self, text: str) -> list[Any]:
        """The screen cells of the first row holding ``text``, from where it starts."""
        for row in range(self.screen_.lines):
            shown = self.screen_.display[row]
            at = shown.find(text)
            if at >= 0:
                line = self.screen_.buffer[row]
                return [line[at + i] for i in range(len(text))]
        raise AssertionError(f"{text!r} is not on the screen:\n{self.screen()}")

    # -- typing --------------------------------------------------------------------------

    def type(self, text: str) -> None:
        """Type ``text`` key by key (a person typing, not a paste)."""
        for char in text:
            self.child.send(char)
            self.pump(0.005)

    def enter(self) -> None:
        self.child.send("\r")

    def paste(self, text: str) -> None:
        """Paste ``text`` as a terminal does with bracketed paste on."""
        self.child.send("\x1b[200~" + text + "\x1b[201~")

    def key(self, sequence: str) -> None:
        self.child.send(sequence)

    def say(self, text: str) -> None:
        """Type a message and send it."""
        self.type(text)
        self.pump(0.1)
        self.enter()

    def resize(self, cols: int, rows: int) -> None:
        self.screen_.resize(rows, cols)
        self.child.setwinsize(rows, cols)

    # -- the end -------------------------------------------------------------------------

    def exit_code(self, timeout: float = WAIT) -> int:
        """Wait for the chat to end; its exit status."""
        deadline = time.monotonic() + timeout
        while self.child.isalive():
            self.pump(0.05)
            if time.monotonic() > deadline:
                raise AssertionError(f"the chat did not exit; it shows:\n{self.screen()}")
        self.pump(0.05)
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else \
            -(self.child.signalstatus or 0)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.close(force=True)


def restored(raw: bytes) -> bool:
    """Whether the chat left the terminal as it found it: out of the alternate screen it
    entered, mouse reporting and bracketed paste off, cursor shown."""
    tail = raw[raw.rfind(b"\x1b[?1049h"):] if b"\x1b[?1049h" in raw else raw
    return (b"\x1b[?1049l" in tail and b"\x1b[?2004l" in tail and b"\x1b[?25h" in tail
            and (b"\x1b[?1000h" not in raw or b"\x1b[?1000l" in tail))
