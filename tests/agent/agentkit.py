"""Test kit for the agent slice: a real kernel on real rows, and fixture plugins.

Rows name the fixture plugins as ``agentkit:Name`` (pytest puts this folder on
``sys.path``). :class:`Booted` starts a :class:`~dsh.runtime.kernel.kernel.Kernel` on rows, gives
the published ``agent`` and records every notification, so tests read what a protocol
server would forward. Waits are bounded only to turn a bug into a failure instead of a
hang; no test asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsh.runtime.kernel.kernel import Kernel
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.tools.base import Image, ToolContext, ToolResult

GUARD = 10.0
"""Seconds before a wait is declared hung (a failure, never a measurement)."""

JOURNAL: list[Any] = []
"""What fixture hooks and tools saw; cleared by :class:`Booted`."""


def write_script(directory: Path, responses: Sequence[Mapping[str, Any]],
                 name: str = "script.jsonl") -> str:
    """Write a scripted-provider JSONL script and return its path."""
    path = directory / name
    path.write_text("".join(json.dumps(r) + "\n" for r in responses), encoding="utf-8")
    return str(path)


def rows(script: str, *, agent: Mapping[str, Any] | None = None,
         policy: Mapping[str, Any] | None = None,
         extra: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The dsh-base shape (agent, tools, policy) with a scripted provider, plus ``extra``."""
    return [
        {"id": "agent", "name": "agent-core",
         "config": {"default_route": "scripted", **(agent or {})}},
        {"id": "llm-scripted", "name": "llm-scripted", "config": {"script": script}},
        {"id": "tools:working-directory", "name": "tool-working-directory"},
        {"id": "policy", "name": "guardrail-policy", "config": dict(policy or {})},
        *extra,
    ]


class Booted:
    """``async with Booted(rows) as b``: a started kernel, its agent, the notifications."""

    def __init__(self, tree: Sequence[Mapping[str, Any]], *, hook_budget: float = 2.0) -> None:
        self.kernel = Kernel(tree, profile="test", home=os.environ["DSH_HOME"], cwd=os.getcwd(),
                             env={}, hook_budget=hook_budget)
        self.notes: list[tuple[str, dict[str, Any]]] = []
        self._changed = asyncio.Event()
        self.agent: Any = None

    async def __aenter__(self) -> Booted:
        JOURNAL.clear()
        self.kernel.load()
        await self.kernel.start()
        self.agent = self.kernel.context.service("agent")
        self.agent.add_listener(self._record)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.kernel.dispose()

    def _record(self, method: str, params: dict[str, Any]) -> None:
        self.notes.append((method, params))
        self._changed.set()

    async def until(self, predicate: Any) -> None:
        """Wait until ``predicate()`` holds (checked after every notification)."""
        async def wait() -> None:
            while not predicate():
                self._changed.clear()
                await self._changed.wait()
        await asyncio.wait_for(wait(), GUARD)

    async def idle(self, session_id: str, count: int = 1) -> None:
        """Wait for the session's ``count``-th ``idle`` status."""
        await self.until(lambda: self.statuses(session_id).count("idle") >= count)

    async def seen(self, session_id: str, type: str) -> None:
        """Wait until the session has emitted an event of ``type``."""
        await self.until(lambda: type in self.types(session_id))

    def events(self, session_id: str) -> list[dict[str, Any]]:
        """The session's events as notified, in order."""
        return [p["event"] for m, p in self.notes
                if m == "session.event" and p["sessionId"] == session_id]

    def types(self, session_id: str) -> list[str]:
        """The session's event types, in order."""
        return [e["type"] for e in self.events(session_id)]

    def of(self, session_id: str, type: str) -> list[dict[str, Any]]:
        """The data of the session's events of ``type``."""
        return [e["data"] for e in self.events(session_id) if e["type"] == type]

    def statuses(self, session_id: str) -> list[str]:
        """The session's ``session.status`` values, in order."""
        return [p["status"] for m, p in self.notes
                if m == "session.status" and p["sessionId"] == session_id]


def text(content: str) -> list[dict[str, str]]:
    """Prompt content blocks for ``content``."""
    return [{"type": "text", "text": content}]


# -- fixture plugins -------------------------------------------------------------------


class NoteTool:
    """A mutating tool with a path argument: writes ``text`` to ``path``."""

    name = "write_note"
    description = "Write a note to a file."
    parameters = {"type": "object",
                  "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                  "required": ["path"], "additionalProperties": False}
    mutating = True
    path_arguments = ("path",)

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        Path(ctx.cwd, args["path"]).write_text(args.get("text", ""), encoding="utf-8")
        return ToolResult(f"wrote {args['path']}")


class Untyped:
    """A mutating tool that declares no path arguments (the policy cannot judge it)."""

    name = "untyped"
    description = "Changes something somewhere."
    parameters = {"type": "object"}
    mutating = True

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult("changed")


class WaitTool:
    """Waits until cancelled, journaling whether the context saw the cancellation."""

    name = "wait"
    description = "Wait forever."
    parameters = {"type": "object"}
    mutating = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        JOURNAL.append(("wait", "started"))
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            JOURNAL.append(("wait", "cancelled", ctx.cancelled.is_set()))
            raise
        return ToolResult("waited")


class StubbornTool:
    """Swallows the cancellation of its task and answers anyway."""

    name = "stubborn"
    description = "Ignore cancellation."
    parameters = {"type": "object"}
    mutating = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        JOURNAL.append(("stubborn", "started"))
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return ToolResult("ignored the cancellation")
        return ToolResult("waited")


class BoomTool:
    """Raises instead of answering."""

    name = "boom"
    description = "Explode."
    parameters = {"type": "object"}
    mutating = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        raise RuntimeError("kaboom")


class FixtureTools(Plugin):
    """Registers the fixture tools."""

    manifest = Manifest(id="fixture-tools", version="1",
                        capabilities=frozenset({Capability.TOOL}))

    def apply(self, reg: Registrar) -> None:
        for tool in (NoteTool(), Untyped(), WaitTool(), StubbornTool(), BoomTool()):
            reg.tool(tool)


class FixtureGuardrail(Plugin):
    """A guardrail answering config ``decision`` for every call (journals the call)."""

    manifest = Manifest(id="fixture-guardrail", version="1",
                        capabilities=frozenset({Capability.GUARDRAIL}))

    def apply(self, reg: Registrar) -> None:
        reg.guardrail("fixture", self.check)

    def check(self, call: Any) -> tuple[str, str]:
        JOURNAL.append(("guardrail", call.name, call.can_ask))
        return self.config["decision"], "fixture says so"


class BadModel:
    """A provider that yields something that is not a chunk (journals its stream's close)."""

    default_model = "bad"
    context_window = 10

    def accepts_model(self, model: str) -> bool:
        return model == "bad"

    async def stream(self, request: Any) -> Any:
        try:
            yield {"type": "text", "text": "not a chunk"}
            yield {"type": "never reached"}
        finally:
            JOURNAL.append(("bad-stream", "closed"))


class FixtureProvider(Plugin):
    """Publishes :class:`BadModel` as ``llm:bad``."""

    manifest = Manifest(id="fixture-provider", version="1",
                        capabilities=frozenset({Capability.SERVICE}), provides=("llm:bad",))

    async def start(self, rt: Any) -> None:
        rt.publish("llm:bad", BadModel())


class FixtureHooks(Plugin):
    """Hooks on config ``events`` that ``record``, ``raise``, ``hang`` or ``meddle`` (config
    ``mode``; ``meddle`` empties every message it can reach in the payload)."""

    manifest = Manifest(id="fixture-hooks", version="1",
                        capabilities=frozenset({Capability.LIFECYCLE}))

    def apply(self, reg: Registrar) -> None:
        mode = self.config["mode"]
        for event in self.config["events"]:
            reg.hook(event, f"{mode}-{event}", getattr(self, "_" + mode))

    async def _record(self, event: Any) -> None:
        JOURNAL.append((event.type, event.session_id, event.step,
                        event.attributes.get("turn")))

    async def _raise(self, event: Any) -> None:
        raise ValueError(f"hook broke on {event.type}")

    async def _hang(self, event: Any) -> None:
        await asyncio.sleep(3600)

    async def _meddle(self, event: Any) -> None:
        payload = event.payload
        messages = getattr(payload, "messages", None) or [payload.get("message", payload)]
        for message in messages:
            message["content"].clear()


class SessionTool:
    """A tool offered to one session only (by :class:`FixtureToolSource`)."""

    name = "only_here"
    description = "Exists in one session."
    parameters = {"type": "object"}
    mutating = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(f"only in {ctx.session_id}")


class ContextTool:
    """Uses the session side of its context: emits an event, counts history, sends an image."""

    name = "inspect"
    description = "Look at the session."
    parameters = {"type": "object"}
    mutating = False

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        ctx.emit("fixture/note", {"said": "hello"})
        history = ctx.history()
        history.clear()  # a copy: the session must not notice
        JOURNAL.append(("images", ctx.images_supported))
        return ToolResult(f"history had {len(ctx.history())} messages",
                          images=(Image("image/png", "aGk="),))


class FixtureToolSource(Plugin):
    """Offers :class:`SessionTool` to session ``config['session']``, fails for ``boom``."""

    manifest = Manifest(id="fixture-source", version="1",
                        capabilities=frozenset({Capability.TOOL}))

    def apply(self, reg: Registrar) -> None:
        reg.tool(ContextTool())
        reg.tool_source("fixture", self.tools_for)

    def tools_for(self, session_id: str) -> Mapping[str, Any]:
        if session_id == "boom":
            raise RuntimeError("source broke")
        if session_id == self.config["session"]:
            # A source's tool never shadows a registered one of the same name.
            return {"only_here": SessionTool(), "inspect": SessionTool()}
        return {}


class FixtureContext(Plugin):
    """Context sections: ``goal`` (config ``text``, one per turn when ``every_turn``),
    ``quiet`` (None), and ``broken`` (raises) when config ``broken`` is set."""

    manifest = Manifest(id="fixture-context", version="1",
                        capabilities=frozenset({Capability.PROMPT}))

    def apply(self, reg: Registrar) -> None:
        reg.context("goal", self.goal)
        reg.context("quiet", lambda request: None)
        if self.config.get("broken"):
            reg.context("broken", self.broken)

    async def goal(self, request: Any) -> str:
        JOURNAL.append(("context", request.session_id, request.turn, request.cwd))
        if self.config.get("every_turn"):
            return f"{self.config['text']} (turn {request.turn})"
        return self.config["text"]

    def broken(self, request: Any) -> str:
        raise ValueError("no context today")
