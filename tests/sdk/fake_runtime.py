"""A test-only SDK runtime: a real stdio program that speaks (or breaks) the protocol.

Run as ``python fake_runtime.py MODE [launcher arguments...]`` (the tests spawn it through
a generated ``dsh_bin`` wrapper, so it receives ``--profile P --patch ...`` like the real
runtime, and ignores them). Modes:

``ok``              a minimal, well-behaved SDK runtime (below)
``garbage``         prints a non-JSON line on stdout, then waits for stdin EOF
``exit-during-init`` writes to stderr, reads ``initialize`` and exits 3
``silent``          reads everything, answers nothing, exits on stdin EOF
``oversize``        answers ``initialize`` with a frame of ``FAKE_OVERSIZE_BYTES`` bytes
``slow-shutdown``   ``ok``, but ignores ``shutdown``, stdin EOF and SIGTERM: only SIGKILL ends it
``linger``          ``ok``, but outlives stdin EOF (a signal still ends it)

In ``ok`` mode a prompt's text picks a behaviour: ``busy`` answers -32001; ``approve``
asks the client ``approval/request`` and reports the decision; ``crash`` exits 5 after a
line on stderr; ``spawn-child`` starts a ``sleep`` in the runtime's process group and
reports its pid; ``stderr N`` writes N stderr lines first; ``flood N`` sends N deltas;
``close-stdout`` closes stdout and lives on; anything else is echoed. The
method ``test/never`` is never answered. Every
run emits an event of an earlier message before its own inbox receipt, which a client
must skip. ``FAKE_RUNTIME_RECORD`` names a file that receives one JSON line per message
read, after a first line with ``{argv, cwd, home}``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

OUT = sys.stdout


def send(message: dict[str, Any]) -> None:
    OUT.write(json.dumps(message) + "\n")
    OUT.flush()


def record(entry: Any) -> None:
    path = os.environ.get("FAKE_RUNTIME_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def messages():
    for line in sys.stdin:
        if line.strip():
            message = json.loads(line)
            record(message)
            yield message


def answer(message: dict[str, Any], result: Any) -> None:
    send({"jsonrpc": "2.0", "id": message["id"], "result": result})


def fail(message: dict[str, Any], code: int, text: str) -> None:
    send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": code, "message": text}})


def event(session: str, kind: str, data: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "method": "session.event",
          "params": {"sessionId": session, "event": {"type": kind, "data": data}}})


def status(session: str, value: str) -> None:
    send({"jsonrpc": "2.0", "method": "session.status",
          "params": {"sessionId": session, "status": value}})


class Runtime:
    """The ``ok`` protocol, single-threaded: one message at a time."""

    def __init__(self, *, answer_shutdown: bool = True) -> None:
        self.answer_shutdown = answer_shutdown
        self.sessions: list[str] = []
        self.counter = 0
        self.incoming = messages()

    def serve(self) -> None:
        for message in self.incoming:
            if "method" not in message:
                continue
            if self.handle(message) == "stop":
                return

    def handle(self, message: dict[str, Any]) -> str | None:
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            answer(message, {"serverInfo": {"name": "dsh-sdk-runtime", "version": "0.0-fake"},
                             "protocolVersion": 1,
                             "profile": {"name": "fake", "patchReload": "startup"}})
        elif method == "tools/list":
            answer(message, {"tools": [{"name": "echo", "description": "echo",
                                        "parameters": {"type": "object"}}]})
        elif method == "runtime/status":
            answer(message, {"state": "ready",
                             "reloadRequired": os.environ.get("FAKE_RELOAD_REQUIRED") == "1"})
        elif method == "session/new":
            self.counter += 1
            self.sessions.append(f"s{self.counter}")
            answer(message, {"sessionId": self.sessions[-1]})
        elif method == "session/list":
            answer(message, {"sessions": [{"sessionId": s} for s in self.sessions]})
        elif method == "session/resume":
            if params.get("sessionId") in self.sessions:
                answer(message, {})
            else:
                fail(message, -32602, f"no such session: {params.get('sessionId')}")
        elif method == "session/cancel":
            answer(message, {"cancelled": False})
        elif method == "session/prompt":
            self.prompt(message, params)
        elif method == "test/never":
            pass
        elif method == "shutdown":
            if self.answer_shutdown:
                answer(message, {})
                return "stop"
        elif "id" in message:
            fail(message, -32601, f"method not found: {method}")
        return None

    def prompt(self, message: dict[str, Any], params: dict[str, Any]) -> None:
        session = params["sessionId"]
        text = params["contentBlocks"][0].get("text", "")
        if text == "busy":
            fail(message, -32001, "session is busy")
            return
        if text == "crash":
            sys.stderr.write("fake: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(5)
        if text == "close-stdout":
            os.close(1)
            while True:
                time.sleep(60)
        if text.startswith("stderr "):
            for i in range(int(text.split()[1])):
                sys.stderr.write(f"fake stderr line {i}\n")
            sys.stderr.flush()
        self.counter += 1
        message_id = f"m{self.counter}"
        answer(message, {"messageId": message_id})
        # An earlier message's leftovers, which belong to no run of this prompt.
        event(session, "assistant/delta", {"text": "stale"})
        status(session, "idle")
        status(session, "running")
        event(session, "agent/inbox/spliced", {"inserted": [{"id": message_id}]})
        if text == "approve":
            reply = f"approval: {self.ask(session)}"
        elif text.startswith("flood "):
            for i in range(int(text.split()[1])):
                event(session, "assistant/delta", {"text": str(i)})
            reply = "flooded"
        elif text == "spawn-child":
            child = subprocess.Popen(["sleep", "600"])
            reply = f"child: {child.pid}"
        else:
            reply = f"echo: {text}"
        event(session, "assistant/delta", {"text": reply})
        event(session, "assistant/message",
              {"message": {"role": "assistant", "content": [{"type": "text", "text": reply}]}})
        event(session, "turn/end", {"reason": {"kind": "completed"}})
        status(session, "idle")

    def ask(self, session: str) -> str:
        send({"jsonrpc": "2.0", "id": "approval-1", "method": "approval/request",
              "params": {"sessionId": session, "toolCall": {"name": "echo", "arguments": {}}}})
        for message in self.incoming:
            if message.get("id") == "approval-1" and "method" not in message:
                if "error" in message:
                    return f"error {message['error']['code']}"
                return message["result"]["decision"]
            self.handle(message)
        return "eof"


def main() -> int:
    mode = sys.argv[1]
    record({"argv": sys.argv[2:], "cwd": os.getcwd(), "home": os.environ.get("DSH_HOME")})
    if mode == "ok":
        Runtime().serve()
    elif mode == "garbage":
        OUT.write("this is not JSON-RPC\n")
        OUT.flush()
        sys.stdin.read()
    elif mode == "exit-during-init":
        sys.stderr.write("fake: loading profile\nfake: fatal: plugin 'x' failed to load\n")
        sys.stderr.flush()
        sys.stdin.readline()
        return 3
    elif mode == "silent":
        sys.stdin.read()
    elif mode == "oversize":
        size = int(os.environ.get("FAKE_OVERSIZE_BYTES", str(64 * 1024)))
        for message in messages():
            answer(message, {"pad": "x" * size})
    elif mode == "linger":
        Runtime().serve()
        while True:
            time.sleep(60)
    elif mode == "slow-shutdown":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        Runtime(answer_shutdown=False).serve()
        while True:
            time.sleep(60)
    else:
        sys.stderr.write(f"fake_runtime: unknown mode {mode!r}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
