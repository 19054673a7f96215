"""Fixture plugins for the kernel tests, referenced from rows as ``plugins_fixture:Name``.

They report what happens to them in :data:`JOURNAL` (``(phase, row_id)`` pairs), which
each test clears, so tests observe real start/update/dispose calls in their real order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.runtime.kernel.plugin import (
    Capability,
    Command,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)

JOURNAL: list[tuple[str, str]] = []
EVERYTHING = frozenset(Capability)


@dataclass(frozen=True)
class FakeTool:
    """The kernel treats tools as opaque objects with a ``name``."""

    name: str


@dataclass(frozen=True)
class Service:
    """A published service object that remembers who made it, with which config."""

    row_id: str
    tag: Any


class Recorder(Plugin):
    """Configurable test double: provides/uses services, registers tools, journals phases.

    Config: ``provides``/``uses`` (service names), ``tools`` (names), ``tag`` (any),
    ``fail_start``, ``in_place`` (what ``update`` answers), ``fail_update``,
    ``hang_dispose``, ``fail_dispose``.
    """

    manifest = Manifest(
        id="recorder",
        version="1",
        capabilities=EVERYTHING,
        config_schema={
            "type": "object",
            "properties": {
                "provides": {"type": "array", "items": {"type": "string"}, "default": []},
                "uses": {"type": "array", "items": {"type": "string"}, "default": []},
                "tools": {"type": "array", "items": {"type": "string"}, "default": []},
                "in_place": {"type": "boolean", "default": True},
            },
        },
    )

    def apply(self, reg: Registrar) -> None:
        for name in self.config["provides"]:
            reg.service(name)
        for name in self.config["tools"]:
            reg.tool(FakeTool(name))
        reg.hook("before_turn", "observe", self.observe)

    def observe(self, event: Any) -> None:
        JOURNAL.append(("hook", self.row_id))

    async def start(self, rt: RuntimeContext) -> None:
        JOURNAL.append(("start", self.row_id))
        if self.config.get("fail_start"):
            raise RuntimeError(f"{self.row_id} refuses to start")
        self.seen = {name: rt.service(name) for name in self.config["uses"]}
        for name in self.config["provides"]:
            rt.publish(name, Service(self.row_id, self.config.get("tag")))

    async def update(self, config: Mapping[str, Any]) -> bool:
        JOURNAL.append(("update", self.row_id))
        if config.get("fail_update"):
            raise RuntimeError(f"{self.row_id} refuses the update")
        if not self.config["in_place"] or not config["in_place"]:
            return False
        self.config = config
        return True

    async def dispose(self) -> None:
        JOURNAL.append(("dispose", self.row_id))
        if self.config.get("fail_dispose"):
            raise RuntimeError(f"{self.row_id} cannot let go")
        if self.config.get("hang_dispose"):
            await asyncio.sleep(60)


class OtherRecorder(Recorder):
    """The same behaviour under another name, to test replacement by a name change."""


class Needy(Recorder):
    """Needs service ``db`` through its manifest rather than the row's ``inject``."""

    manifest = Manifest(id="needy", version="1", capabilities=EVERYTHING,
                        config_schema=Recorder.manifest.config_schema, requires=("db",))


class Peek(Recorder):
    """Journals the ``launch`` attribute its start context shows."""

    async def start(self, rt: RuntimeContext) -> None:
        JOURNAL.append(("launch", rt.launch))


class Touch(Plugin):
    """Creates the file ``config.path`` when started: proves load/apply do no I/O."""

    manifest = Manifest(
        id="touch",
        version="1",
        capabilities=frozenset({Capability.TOOL}),
        config_schema={"type": "object", "required": ["path"],
                       "properties": {"path": {"type": "string"}}},
    )

    def apply(self, reg: Registrar) -> None:
        reg.tool(FakeTool("touch"))

    async def start(self, rt: RuntimeContext) -> None:
        Path(self.config["path"]).write_text("started", encoding="utf-8")


class Typed(Plugin):
    """A plugin with a strict schema, for config validation messages."""

    manifest = Manifest(
        id="typed",
        version="1",
        config_schema={
            "type": "object",
            "additionalProperties": False,
            "properties": {"timeout": {"type": "number", "default": 30}},
        },
    )


class App(Plugin):
    """Registers the application command ``main``, a prompt and a skill."""

    manifest = Manifest(
        id="app",
        version="1",
        capabilities=frozenset({Capability.COMMAND, Capability.PROMPT, Capability.SKILL}),
    )

    def apply(self, reg: Registrar) -> None:
        reg.command(Command("main", "run the test app", self.main))
        reg.prompt("persona", "You are a test.")
        reg.skill("testing", "how to test", "Write real tests.")

    async def main(self, rt: RuntimeContext, argv: list[str]) -> int:
        return len(argv)


class UndeclaredHook(Plugin):
    """Registers a hook without declaring ``lifecycle``."""

    manifest = Manifest(id="undeclared", version="1",
                        capabilities=frozenset({Capability.TOOL}))

    def apply(self, reg: Registrar) -> None:
        reg.hook("before_turn", "sneaky", lambda event: None)


class UndeclaredContext(Plugin):
    """Registers a context section without declaring ``prompt``."""

    manifest = Manifest(id="undeclared-context", version="1",
                        capabilities=frozenset({Capability.TOOL}))

    def apply(self, reg: Registrar) -> None:
        reg.context("sneaky", lambda request: "hi")


class UndeclaredToolSource(Plugin):
    """Registers a tool source without declaring ``tool``."""

    manifest = Manifest(id="undeclared-source", version="1",
                        capabilities=frozenset({Capability.PROMPT}))

    def apply(self, reg: Registrar) -> None:
        reg.tool_source("sneaky", lambda session_id: {})


class DuplicateHook(Plugin):
    """Registers two hooks of the same name."""

    manifest = Manifest(id="duplicate", version="1",
                        capabilities=frozenset({Capability.LIFECYCLE}))

    def apply(self, reg: Registrar) -> None:
        reg.hook("before_turn", "twice", lambda event: None)
        reg.hook("after_turn", "twice", lambda event: None)


class UnknownEvent(Plugin):
    """Registers a hook for an event that does not exist."""

    manifest = Manifest(id="unknown-event", version="1",
                        capabilities=frozenset({Capability.LIFECYCLE}))

    def apply(self, reg: Registrar) -> None:
        reg.hook("before_lunch", "hungry", lambda event: None)


class LateRegistrar(Plugin):
    """Keeps the registrar and tries to register from ``start``."""

    manifest = Manifest(id="late", version="1", capabilities=frozenset({Capability.TOOL}))

    def apply(self, reg: Registrar) -> None:
        self.reg = reg

    async def start(self, rt: RuntimeContext) -> None:
        self.reg.tool(FakeTool("late"))


class Hooked(Plugin):
    """Registers a raising and a slow hook, for dispatch through the kernel."""

    manifest = Manifest(id="hooked", version="1",
                        capabilities=frozenset({Capability.LIFECYCLE}))

    def apply(self, reg: Registrar) -> None:
        reg.hook("after_turn", "explodes", self.explodes)
        reg.hook("after_turn", "slow", self.slow)
        reg.hook("after_turn", "fine", self.fine)

    async def explodes(self, event: Any) -> None:
        raise ValueError("kaboom")

    async def slow(self, event: Any) -> None:
        await asyncio.sleep(60)

    async def fine(self, event: Any) -> None:
        JOURNAL.append(("fine", event.session_id))


class Undeclared(Plugin):
    """Publishes a service it never declared."""

    manifest = Manifest(id="undeclared-service", version="1",
                        capabilities=frozenset({Capability.SERVICE}))

    async def start(self, rt: RuntimeContext) -> None:
        rt.publish("ghost", object())


class Silent(Plugin):
    """Declares a service but never publishes it."""

    manifest = Manifest(id="silent", version="1", provides=("quiet",),
                        capabilities=frozenset({Capability.SERVICE}))

    async def dispose(self) -> None:
        JOURNAL.append(("dispose", self.row_id))


class Exploding(Plugin):
    """Fails inside ``apply`` with a foreign exception."""

    manifest = Manifest(id="exploding", version="1")

    def apply(self, reg: Registrar) -> None:
        raise KeyError("missing piece")


NOT_A_PLUGIN = object()
