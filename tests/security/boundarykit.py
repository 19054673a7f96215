"""Helpers of the boundary tests: a real ``dsh`` runtime driven by a scripted model that
tries to get out of its workspace, and a client that may answer its approval requests.

:class:`Attack` writes the script (one tool call per step, then a final text), starts the
runtime with the offline patch plus the caller's rows, and :meth:`Attack.turn` prompts one
session, answering every ``approval/request`` with the caller's ``answer`` function, and
returns what happened: the tool results in order, the approval requests, the turn's end.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

Answer = Callable[[dict[str, Any]], str]
"""``answer(toolCall) -> "allow" | "deny"`` for each ``approval/request``."""


class Turn(NamedTuple):
    """One prompt's outcome: tool results (``{error, text, code}``), approval requests
    (their ``toolCall``), and the ``turn/end`` reason."""

    results: list[dict[str, Any]]
    asked: list[dict[str, Any]]
    reason: dict[str, Any]

    def texts(self) -> list[str]:
        return [r["text"] for r in self.results]


def script(calls: Sequence[Mapping[str, Any]], final: str = "done", *,
           per_step: int = 1) -> list[dict[str, Any]]:
    """``per_step`` tool calls per step, then ``final``."""
    steps = [calls[i:i + per_step] for i in range(0, len(calls), per_step)]
    return [*({"text": f"step {i}", "tool_calls": [dict(c) for c in step]}
              for i, step in enumerate(steps)), {"text": final}]


class Attack:
    """A runtime (``profile``) in ``cwd`` whose scripted model makes ``calls``; ``wrapper``
    goes before its command line (``tests/fixtures/sandboxrungs.py``)."""

    def __init__(self, tmp: Path, calls: Sequence[Mapping[str, Any]], *, cwd: Path,
                 profile: str = "sdk", rows: Sequence[Mapping[str, Any]] = (),
                 approvals: bool = False, env: Mapping[str, str] | None = None,
                 max_steps: int = 200, per_step: int = 1,
                 wrapper: Sequence[str] = ()) -> None:
        steps = tmp / "attack-script.json"
        steps.write_text(json.dumps(script(calls, per_step=per_step)))
        patch = tmp / "attack-patch.yml"
        patch.write_text(json.dumps([
            {"id": "llm-scripted", "merge": {"config": {"script": str(steps)}}},
            {"id": "agent", "merge": {"config": {"max_steps": max_steps}}},
            *rows]))
        self.cwd = cwd
        self.proc = RuntimeProcess(profile, [OFFLINE_PATCH, patch], cwd=cwd, env=env,
                                   wrapper=wrapper)
        params: dict[str, Any] = {"provider": "scripted", "model": "scripted"}
        if approvals:
            params["capabilities"] = {"approvals": True}
        self.proc.initialize(cwd, **params)

    def __enter__(self) -> Attack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.finish()

    def call(self, method: str, params: Any = None, timeout: float = 10) -> dict[str, Any]:
        return self.proc.call(method, params, timeout)

    def turn(self, session: str = "s1", answer: Answer | None = None, *,
             timeout: float = 60) -> Turn:
        """Prompt ``session`` and run its turn to ``idle``, answering approvals."""
        rid = self.proc.request("session/prompt", {
            "sessionId": session, "contentBlocks": [{"type": "text", "text": "go"}]})
        results: list[dict[str, Any]] = []
        asked: list[dict[str, Any]] = []
        reason: dict[str, Any] = {}
        while True:
            frame = self.proc.recv(timeout)
            if frame.get("id") == rid and "method" not in frame:
                assert "result" in frame, frame
            method = frame.get("method")
            if method == "approval/request":
                asked.append(frame["params"]["toolCall"])
                decision = answer(frame["params"]["toolCall"]) if answer else "deny"
                self.proc.send({"jsonrpc": "2.0", "id": frame["id"],
                                "result": {"decision": decision}})
            elif method == "session.event" and frame["params"]["sessionId"] == session:
                event = frame["params"]["event"]
                if event["type"] == "tool/result":
                    data = event["data"]
                    message = data["message"]
                    results.append({
                        "error": message["isError"],
                        "text": "".join(b.get("text", "") for b in message["content"]),
                        "code": (data.get("error") or {}).get("code")})
                elif event["type"] == "turn/end":
                    reason = event["data"]["reason"]
            elif (method == "session.status" and frame["params"]["sessionId"] == session
                  and frame["params"]["status"] == "idle"):
                return Turn(results, asked, reason)

    def close(self) -> None:
        """End the runtime cleanly (stdin EOF) and check it exited 0."""
        self.proc.close_stdin()
        assert self.proc.wait() == 0, self.proc.stderr()


def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative name → bytes), links not followed."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}
