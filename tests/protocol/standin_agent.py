"""A test-only plugin that publishes a scripted ``agent`` service (a real runtime peer).

Process tests of the SDK server's hygiene (signals, EOF, framing, cancellation, children)
run ``dsh --profile sdk-minimal`` with the shipped agent rows disabled and this plugin
inserted (``standin.yml``), so they test the server and the process, not the agent loop.
Prompt text selects the behaviour:

``hang``   the turn waits until cancelled (``turn/end`` reason ``cancelled``)
``spawn``  the turn starts ``sleep 600`` and reports its pid, then completes
``noise``  the turn prints, logs and runs a child that writes to its inherited fd 1
anything   the turn answers ``echo: <text>`` and completes
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

from dsh.core.errors import JsonRpcError
from dsh.runtime.agent.store import HistoryPage
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar, RuntimeContext

Listener = Callable[[str, dict[str, Any]], None]


class StandInAgent:
    """Just enough of the ``agent`` contract to drive the SDK server from a process."""

    def __init__(self, cwd: str, dispose_delay: float) -> None:
        self._cwd = cwd
        self._dispose_delay = dispose_delay
        self._listeners: list[Listener] = []
        self._seq: dict[str, itertools.count[int]] = {}
        self._cwds: dict[str, str] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def configure(self, *, provider: str | None, model: str | None, **_: Any) -> dict[str, Any]:
        if provider not in (None, "standin"):
            raise JsonRpcError(-32602, f"unknown provider route '{provider}' (registered: standin)")
        return {"provider": "standin", "model": model or "standin"}

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn)

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        for fn in list(self._listeners):
            fn(method, params)

    def _event(self, sid: str, type: str, data: dict[str, Any]) -> None:
        seq = next(self._seq.setdefault(sid, itertools.count()))
        event = {"type": type, "seq": seq, "time": int(time.time() * 1000), "data": data}
        self._notify("session.event", {"sessionId": sid, "event": event})

    async def new_session(self, *, cwd: str | None = None, session_id: str | None = None) -> str:
        sid = session_id or f"s-{uuid.uuid4().hex[:8]}"
        self._cwds[sid] = cwd or self._cwd
        return sid

    async def open_session(self, sid: str, *, cwd: str | None = None) -> None:
        self._cwds.setdefault(sid, cwd or self._cwd)

    async def prompt(
        self, sid: str, blocks: list[dict[str, Any]], *, cwd: str | None = None
    ) -> str:
        if sid in self._tasks:
            raise JsonRpcError(-32001, "session busy: a turn is running")
        self._cwds.setdefault(sid, cwd or self._cwd)
        message_id = str(uuid.uuid4())
        inserted = [{"id": message_id, "role": "user", "content": blocks,
                     "source": {"kind": "user"}}]
        self._event(sid, "agent/inbox/spliced",
                    {"target": "next-turn", "start": 0, "inserted": inserted})
        self._notify("session.status", {"sessionId": sid, "status": "running"})
        text = "".join(b.get("text", "") for b in blocks)
        self._tasks[sid] = asyncio.get_running_loop().create_task(self._turn(sid, text))
        return message_id

    async def _turn(self, sid: str, text: str) -> None:
        self._event(sid, "turn/start", {"turn": 1})
        reason = "completed"
        try:
            if text == "hang":
                await asyncio.Event().wait()
            if text == "noise":
                print("stray print")
                logging.getLogger("standin").warning("stray log")
                await asyncio.to_thread(subprocess.run, ["echo", "stray child"], check=True)
            if text == "spawn":
                child = subprocess.Popen(["sleep", "600"])
                text = f"pid {child.pid}"
            message = {"role": "assistant", "content": [{"type": "text", "text": f"echo: {text}"}]}
            self._event(sid, "assistant/message", {"turn": 1, "step": 1, "message": message})
        except asyncio.CancelledError:
            reason = "cancelled"
        finally:
            self._tasks.pop(sid, None)
            self._event(sid, "turn/end", {"turn": 1, "reason": {"kind": reason}})
            self._notify("session.status", {"sessionId": sid, "status": "idle"})

    async def cancel(self, sid: str) -> bool:
        task = self._tasks.get(sid)
        if task is None:
            return False
        task.cancel()
        await asyncio.wait([task])
        return True

    async def resume(self, sid: str) -> None:
        raise JsonRpcError(-32602, f"unknown session: {sid}")

    def get_cwd(self, sid: str) -> str:
        if sid not in self._cwds:
            raise JsonRpcError(-32602, f"unknown session: {sid}")
        return self._cwds[sid]

    def set_cwd(self, sid: str, path: str) -> str:
        self._cwds[sid] = path
        return path

    def list_sessions(self, *, session_id: str | None = None, workspace: str | None = None,
                      limit: int | None = None) -> list[dict[str, Any]]:
        listed = [{"sessionId": s, "cwd": c} for s, c in sorted(self._cwds.items())
                  if session_id in (None, s) and workspace in (None, c)]
        return listed if limit is None else listed[:limit]

    def history(self, sid: str) -> list[dict[str, Any]]:
        self.get_cwd(sid)
        return []

    def history_page(self, sid: str, **window: int) -> HistoryPage:
        self.get_cwd(sid)
        return HistoryPage([], None)

    def set_approver(self, fn: Any) -> None:
        """Approvals are not exercised through this stand-in."""

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.sleep(self._dispose_delay)


class StandInAgentPlugin(Plugin):
    """Publishes :class:`StandInAgent` as service ``agent``."""

    manifest = Manifest(
        id="standin-agent",
        version="0",
        capabilities=frozenset({Capability.SERVICE}),
        config_schema={"type": "object", "properties": {"dispose_delay": {"type": "number"}}},
    )

    def apply(self, reg: Registrar) -> None:
        reg.service("agent")

    async def start(self, rt: RuntimeContext) -> None:
        self.agent = StandInAgent(rt.cwd, float(self.config.get("dispose_delay", 0)))  # type: ignore[attr-defined]
        rt.publish("agent", self.agent)

    async def dispose(self) -> None:
        await self.agent.close()
