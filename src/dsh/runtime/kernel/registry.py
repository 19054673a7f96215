"""What plugins register: the registrar ``apply`` sees, and the registries it fills.

Registration happens in two steps so that a bad plugin fails at load, never mid-call:

1. :class:`RowRegistrar` records one row's registrations into a :class:`Registration`,
   rejecting undeclared capabilities, unknown events and duplicate names within the plugin
   as they happen. It closes when ``apply`` returns.
2. :func:`merge` combines the registrations of a whole tree, in tree order, rejecting a
   name two rows both claim; :meth:`Registries.install` then swaps the merged result into
   the registries the runtime reads, all at once.

Services are different: they are objects published at ``start`` rather than registered
at ``apply``, so they live in a :class:`ServiceTable` filled while rows start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from dsh.core.errors import CapabilityError, PluginError
from dsh.runtime.kernel.guardrails import Guardrail, GuardrailChain
from dsh.runtime.kernel.hooks import DEFAULT_BUDGET, EVENTS, Hook, HookDispatcher
from dsh.runtime.kernel.plugin import (
    Capability,
    Command,
    ContextSource,
    Manifest,
    NamedRegistry,
    Prompt,
    Registrar,
    Skill,
    ToolSource,
)


class Registration:
    """Everything one row registered in ``apply`` (``services``: names it will publish).

    A plain class rather than a dataclass, as are the other records every boot creates:
    generating a dataclass's methods costs about half a millisecond at import (issue 3).
    """

    __slots__ = (
        "commands",
        "contexts",
        "guardrails",
        "hooks",
        "prompts",
        "row_id",
        "services",
        "skills",
        "tool_sources",
        "tools",
    )

    def __init__(self, row_id: str) -> None:
        self.row_id = row_id
        self.tools: dict[str, Any] = {}
        self.commands: dict[str, Command] = {}
        self.hooks: list[Hook] = []
        self.guardrails: list[Guardrail] = []
        self.services: list[str] = []
        self.prompts: dict[str, Prompt] = {}
        self.skills: dict[str, Skill] = {}
        self.tool_sources: dict[str, ToolSource] = {}
        self.contexts: dict[str, ContextSource] = {}


class RowRegistrar(Registrar):
    """The :class:`~dsh.runtime.kernel.plugin.Registrar` one row's ``apply`` receives.

    ``manifest.provides`` counts as services registered up front.
    """

    def __init__(self, row_id: str, manifest: Manifest) -> None:
        self.registration = Registration(row_id)
        self._manifest = manifest
        self._capabilities = frozenset(Capability(c) for c in manifest.capabilities)
        self._closed = False
        for name in manifest.provides:
            self.service(name)

    def close(self) -> None:
        """End registration: a plugin that kept the registrar cannot register later."""
        self._closed = True

    def tool(self, tool: Any) -> None:
        """Register a tool under ``tool.name``."""
        name = getattr(tool, "name", None)
        self._admit(Capability.TOOL, f"tool '{name}'")
        if not isinstance(name, str) or not name:
            self._fail(f"registered a tool without a name: {tool!r}")
        self._add("tool", self.registration.tools, name, tool)

    def command(self, command: Command) -> None:
        """Register an application command."""
        if not isinstance(command, Command):
            self._fail(f"registered a command that is not a Command: {command!r}")
        self._admit(Capability.COMMAND, f"command '{command.name}'")
        self._add("command", self.registration.commands, command.name, command)

    def hook(self, event: str, name: str, fn: Callable[[Any], Any]) -> None:
        """Register lifecycle hook ``name`` for ``event``."""
        self._admit(Capability.LIFECYCLE, f"hook '{name}'")
        if event not in EVENTS:
            self._fail(f"registered hook '{name}' for unknown event '{event}' "
                       f"(events: {', '.join(EVENTS)})")
        if not callable(fn):
            self._fail(f"registered hook '{name}' that is not callable")
        if any(hook.name == name for hook in self.registration.hooks):
            self._fail(f"registered hook '{name}' twice (hook names are unique per plugin)")
        self.registration.hooks.append(Hook(self.registration.row_id, name, event, fn))

    def guardrail(self, name: str, fn: Callable[[Any], Any]) -> None:
        """Register guardrail ``name``."""
        self._admit(Capability.GUARDRAIL, f"guardrail '{name}'")
        if not callable(fn):
            self._fail(f"registered guardrail '{name}' that is not callable")
        if any(g.name == name for g in self.registration.guardrails):
            self._fail(f"registered guardrail '{name}' twice")
        self.registration.guardrails.append(Guardrail(self.registration.row_id, name, fn))

    def service(self, name: str) -> None:
        """Declare that ``start`` will publish service ``name`` (idempotent)."""
        self._admit(Capability.SERVICE, f"service '{name}'")
        if not isinstance(name, str) or not name:
            self._fail(f"declared a service with an invalid name: {name!r}")
        if name not in self.registration.services:
            self.registration.services.append(name)

    def prompt(self, name: str, text: str) -> None:
        """Register a system-prompt fragment."""
        self._admit(Capability.PROMPT, f"prompt '{name}'")
        self._add("prompt", self.registration.prompts, name,
                  Prompt(self.registration.row_id, name, text))

    def skill(self, name: str, description: str, body: str) -> None:
        """Register a skill."""
        self._admit(Capability.SKILL, f"skill '{name}'")
        self._add("skill", self.registration.skills, name,
                  Skill(self.registration.row_id, name, description, body))

    def tool_source(self, name: str, tools_for: Callable[[str], Mapping[str, Any]]) -> None:
        """Register a per-session source of tools."""
        self._admit(Capability.TOOL, f"tool source '{name}'")
        if not callable(tools_for):
            self._fail(f"registered tool source '{name}' that is not callable")
        self._add("tool source", self.registration.tool_sources, name,
                  ToolSource(self.registration.row_id, name, tools_for))

    def context(self, name: str, fn: Callable[[Any], Any]) -> None:
        """Register a per-turn context section."""
        self._admit(Capability.PROMPT, f"context '{name}'")
        if not callable(fn):
            self._fail(f"registered context '{name}' that is not callable")
        self._add("context", self.registration.contexts, name,
                  ContextSource(self.registration.row_id, name, fn))

    def _admit(self, capability: Capability, what: str) -> None:
        if self._closed:
            self._fail(f"registered {what} after apply() returned")
        if capability not in self._capabilities:
            row_id = self.registration.row_id
            raise CapabilityError(
                f"row '{row_id}' (plugin '{self._manifest.id}') registered {what} "
                f"but did not declare capability: {capability.value}",
                row_id=row_id,
            )

    def _add(self, kind: str, table: dict[str, Any], name: str, item: Any) -> None:
        if name in table:
            self._fail(f"registered {kind} '{name}' twice")
        table[name] = item

    def _fail(self, problem: str) -> None:
        row_id = self.registration.row_id
        raise PluginError(f"row '{row_id}' (plugin '{self._manifest.id}') {problem}",
                          row_id=row_id)


class Merged(NamedTuple):
    """A whole tree's registrations, checked for clashes; what :meth:`Registries.install` takes."""

    tools: dict[str, Any]
    commands: dict[str, Command]
    prompts: dict[str, Prompt]
    skills: dict[str, Skill]
    hooks: tuple[Hook, ...]
    guardrails: tuple[Guardrail, ...]
    tool_sources: Mapping[str, ToolSource] = MappingProxyType({})
    contexts: Mapping[str, ContextSource] = MappingProxyType({})


def merge(registrations: Iterable[Registration]) -> Merged:
    """Combine registrations in order; a name claimed by two rows is a PluginError."""
    tables: dict[str, dict[str, Any]] = {"tool": {}, "command": {}, "prompt": {}, "skill": {},
                                         "tool source": {}, "context": {}}
    owners: dict[tuple[str, str], str] = {}
    hooks: list[Hook] = []
    guardrails: list[Guardrail] = []
    for reg in registrations:
        own = {"tool": reg.tools, "command": reg.commands, "prompt": reg.prompts,
               "skill": reg.skills, "tool source": reg.tool_sources, "context": reg.contexts}
        for kind, items in own.items():
            for name, item in items.items():
                first = owners.setdefault((kind, name), reg.row_id)
                if first != reg.row_id:
                    raise PluginError(
                        f"{kind} '{name}' is registered by both row '{first}' and row "
                        f"'{reg.row_id}'",
                        row_id=reg.row_id,
                    )
                tables[kind][name] = item
        hooks.extend(reg.hooks)
        guardrails.extend(reg.guardrails)
    return Merged(tables["tool"], tables["command"], tables["prompt"], tables["skill"],
                  tuple(hooks), tuple(guardrails), tables["tool source"], tables["context"])


class Registries:
    """The registries the runtime reads; their identity is stable, contents swap on install."""

    def __init__(self, runtime: Any, *, hook_budget: float = DEFAULT_BUDGET) -> None:
        self.tools: NamedRegistry[Any] = NamedRegistry()
        self.commands: NamedRegistry[Command] = NamedRegistry()
        self.prompts: NamedRegistry[Prompt] = NamedRegistry()
        self.skills: NamedRegistry[Skill] = NamedRegistry()
        self.tool_sources: NamedRegistry[ToolSource] = NamedRegistry()
        self.contexts: NamedRegistry[ContextSource] = NamedRegistry()
        self.hooks = HookDispatcher(runtime, budget=hook_budget)
        self.guardrails = GuardrailChain()
        self.secret_env: frozenset[str] = frozenset()
        """Variable names the running rows declare secret (see the kernel's install)."""

    def install(self, merged: Merged) -> None:
        """Make ``merged`` what the runtime sees."""
        self.tools._replace(merged.tools)
        self.commands._replace(merged.commands)
        self.prompts._replace(merged.prompts)
        self.skills._replace(merged.skills)
        self.tool_sources._replace(merged.tool_sources)
        self.contexts._replace(merged.contexts)
        self.hooks.set_hooks(merged.hooks)
        self.guardrails.set_guardrails(merged.guardrails)


class ServiceTable:
    """Published service objects by name, each remembering the row that published it."""

    def __init__(self) -> None:
        self._published: dict[str, tuple[str, Any]] = {}

    def get(self, name: str) -> Any:
        """The object published as ``name``; PluginError when none is."""
        try:
            return self._published[name][1]
        except KeyError:
            raise PluginError(f"no service '{name}' is published") from None

    def __contains__(self, name: object) -> bool:
        return name in self._published

    def names(self) -> list[str]:
        """Every published service name, sorted (for messages that list what exists)."""
        return sorted(self._published)

    def publish(self, row_id: str, name: str, obj: Any) -> None:
        """Record ``obj`` as service ``name`` of ``row_id`` (republishing replaces it)."""
        self._published[name] = (row_id, obj)

    def withdraw(self, row_id: str) -> None:
        """Forget every service ``row_id`` published (it is being disposed)."""
        self._published = {n: e for n, e in self._published.items() if e[0] != row_id}
