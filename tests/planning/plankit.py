"""A real ``dsh --profile sdk`` on the scripted model, and a client that answers approvals.

:func:`start` writes the script and a patch (the offline example plus any row changes),
spawns the runtime and initializes it; :class:`Run` sends prompts and reads one turn's
frames, answering each ``approval/request`` from a list of decisions the test gives, so a
test says in advance what the user will approve.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runtimeproc import OFFLINE_PATCH, RuntimeProcess

TURN_TIMEOUT = 30.0
"""Seconds before a turn is declared hung (a failure, never a measurement)."""


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted tool call."""
    return {"name": name, "arguments": arguments}


def say(text: str, *calls: dict[str, Any]) -> dict[str, Any]:
    """A scripted model response: ``text`` and the tool ``calls``, if any."""
    return {"text": text, "tool_calls": list(calls)} if calls else {"text": text}


class Run:
    """One runtime process and the frames it sent, with approvals answered as told."""

    def __init__(self, proc: RuntimeProcess) -> None:
        self.proc = proc
        self.decisions: list[str] = []
        self.asked: list[dict[str, Any]] = []

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """A request's whole response frame (``result`` or ``error``)."""
        return self.proc.call(method, params)

    def result(self, method: str, params: Any = None) -> Any:
        """A request's result; an error answer fails the test."""
        answer = self.call(method, params)
        assert "result" in answer, answer
        return answer["result"]

    def turn(self, session_id: str, text: str) -> list[dict[str, Any]]:
        """Prompt and read the session's events until it is idle again."""
        self.result("session/prompt", {"sessionId": session_id,
                                       "contentBlocks": [{"type": "text", "text": text}]})
        events: list[dict[str, Any]] = []
        while True:
            frame = self.proc.recv(TURN_TIMEOUT)
            method = frame.get("method")
            if method == "approval/request":
                self.asked.append(frame["params"])
                assert self.decisions, f"an approval nobody expected: {frame}"
                self.proc.send({"jsonrpc": "2.0", "id": frame["id"],
                                "result": {"decision": self.decisions.pop(0)}})
            elif method == "session.event" and frame["params"]["sessionId"] == session_id:
                events.append(frame["params"]["event"])
            elif (method == "session.status" and frame["params"]["sessionId"] == session_id
                  and frame["params"]["status"] == "idle"):
                return events


@contextmanager
def start(tmp: Path, script: Sequence[dict[str, Any]], *, rows: Sequence[dict[str, Any]] = (),
          approvals: bool = False, profile: str = "sdk") -> Iterator[tuple[Run, Path]]:
    """A started, initialized runtime working in ``tmp/work``; stopped cleanly at the end."""
    work = tmp / "work"
    work.mkdir()
    script_file = tmp / "script.yml"
    script_file.write_text(json.dumps(list(script)))  # JSON is YAML
    patch = tmp / "patch.yml"
    patch.write_text(json.dumps([
        {"id": "llm-scripted", "merge": {"config": {"script": str(script_file)}}}, *rows]))
    proc = RuntimeProcess(profile, [OFFLINE_PATCH, patch], cwd=work)
    try:
        proc.initialize(work, provider="scripted", model="scripted",
                        **({"capabilities": {"approvals": True}} if approvals else {}))
        yield Run(proc), work
        proc.close_stdin()
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.finish()


def of(events: Sequence[dict[str, Any]], type: str) -> list[dict[str, Any]]:
    """The data of the events of ``type``."""
    return [e["data"] for e in events if e["type"] == type]


def results(events: Sequence[dict[str, Any]]) -> list[tuple[bool, str]]:
    """``(isError, text)`` of each tool result, in order."""
    return [(m["isError"], "".join(b.get("text", "") for b in m["content"]))
            for m in (d["message"] for d in of(events, "tool/result"))]


def sections(events: Sequence[dict[str, Any]], name: str) -> list[str]:
    """Texts of the context section ``name`` the model was sent (``user/message`` events)."""
    found = []
    for data in of(events, "user/message"):
        source = data.get("source") or {}
        if source.get("kind") == "runtime-context":
            found += [s["text"] for s in source.get("sections", ()) if s.get("name") == name]
    return found
