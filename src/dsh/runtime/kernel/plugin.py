"""The plugin contract: manifest, capabilities, the two contexts a plugin sees, and the
values the runtime's registries hold (:class:`Prompt`, :class:`Skill`, :class:`ToolSource`,
:class:`ContextSource`, each in a :class:`NamedRegistry`).

A plugin is a class with a :class:`Manifest` and four phases, each with one job:

``apply(reg)``
    Only registers (tools, commands, hooks, guardrails, services it will provide) through
    the :class:`Registrar`. No I/O, no threads, no processes: ``--dump-config`` and
    ``dsh doctor`` may load and apply plugins, and must never trigger side effects.
``start(rt)``
    Side effects begin: open files, spawn, publish service objects with
    ``rt.publish(name, obj)``. Services a row ``inject``\\s are started before it.
``update(config)``
    A ``config``-only change during reconcile. Return ``True`` when applied in place,
    ``False`` to ask the kernel to replace the plugin instead.
``dispose()``
    Undo ``start``; called in reverse start order, bounded by the kernel.

Registering what the manifest does not declare raises
:class:`~dsh.core.errors.CapabilityError` (``did not declare capability: lifecycle``), so a bad
plugin fails when it is applied, never halfway through a call (pluggy's habit).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import PurePath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NamedTuple, TypeVar

if TYPE_CHECKING:
    from dsh.runtime.kernel.guardrails import GuardrailChain
    from dsh.runtime.kernel.hooks import HookDispatcher

__all__ = ["Capability", "Checkup", "Command", "ContextRequest", "ContextSource", "Diagnosis",
           "EnvVar", "Manifest", "NamedRegistry", "Plugin", "Prompt", "Registrar",
           "RuntimeContext", "Skill", "ToolSource"]

_T = TypeVar("_T")


class Capability(str, enum.Enum):
    """What a plugin may register; declared up front in its manifest."""

    TOOL = "tool"
    COMMAND = "command"
    SKILL = "skill"
    PROMPT = "prompt"
    GUARDRAIL = "guardrail"
    LIFECYCLE = "lifecycle"
    SERVICE = "service"


class EnvVar(NamedTuple):
    """An environment name a plugin reads; ``dsh doctor`` checks required ones by name.

    ``secret``: it holds a credential (never shown, kept from children). ``routing``: it
    decides where credentials are sent (a provider's base URL).
    """

    required: bool = False
    default: str | None = None
    secret: bool = False
    description: str = ""
    routing: bool = False


class Manifest(NamedTuple):
    """Static facts about a plugin, readable without instantiating it.

    ``config_schema`` is a JSON Schema (the subset :mod:`dsh.runtime.kernel.schema` checks) for the
    row's ``config``; ``provides`` and ``requires`` name services, and ``requires`` is
    added to the row's own ``inject`` list when the kernel orders start-up.
    """

    id: str
    version: str
    capabilities: frozenset[Capability] = frozenset()
    description: str = ""
    config_schema: Mapping[str, Any] | None = None
    provides: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    env: Mapping[str, EnvVar] = MappingProxyType({})


class Command(NamedTuple):
    """An application entry a protocol/app plugin registers (``main`` starts the app).

    ``run`` receives the runtime context and the application's argv (everything after
    the launcher's own flags) and returns the process exit code. ``help`` is printed for
    ``dsh --profile NAME -h`` without starting anything.
    """

    name: str
    help: str
    run: Callable[[RuntimeContext, list[str]], Awaitable[int]]


class Registrar:
    """What ``apply`` may touch. Implemented by the kernel; documented here for plugins."""

    def tool(self, tool: Any) -> None:  # pragma: no cover - interface
        """Register a tool (an object following :class:`dsh.runtime.tools.Tool`)."""
        raise NotImplementedError

    def command(self, command: Command) -> None:  # pragma: no cover - interface
        """Register an application command; ``main`` is the one the launcher runs."""
        raise NotImplementedError

    def hook(
        self, event: str, name: str, fn: Callable[[Any], Any]
    ) -> None:  # pragma: no cover - interface
        """Register a lifecycle hook; ``name`` must be unique within the plugin."""
        raise NotImplementedError

    def guardrail(self, name: str, fn: Callable[[Any], Any]) -> None:  # pragma: no cover
        """Register a guardrail: the only extension point allowed to block (allow/deny/ask)."""
        raise NotImplementedError

    def service(self, name: str) -> None:  # pragma: no cover - interface
        """Declare that ``start`` will publish service ``name``."""
        raise NotImplementedError

    def prompt(self, name: str, text: str) -> None:  # pragma: no cover - interface
        """Register a system-prompt fragment."""
        raise NotImplementedError

    def skill(self, name: str, description: str, body: str) -> None:  # pragma: no cover
        """Register a skill the model can load on demand."""
        raise NotImplementedError

    def tool_source(
        self, name: str, tools_for: Callable[[str], Mapping[str, Any]]
    ) -> None:  # pragma: no cover - interface
        """Register tools found at run time: ``tools_for(session_id)`` → name → tool.

        Capability ``tool``. For tools that exist per session (MCP servers): the agent
        merges them under the registered tools on every request; a registered tool of the
        same name wins.
        """
        raise NotImplementedError

    def context(self, name: str, fn: Callable[[ContextRequest], Any]) -> None:  # pragma: no cover
        """Register a per-turn context section (capability ``prompt``).

        At the start of every turn ``fn(request)`` (sync or async, bounded like a hook)
        answers text or None; text different from what this section last showed the
        session is added to the conversation as a runtime-context message.
        """
        raise NotImplementedError


class ContextRequest(NamedTuple):
    """What a context section is asked with: whose turn, where it works, which turn."""

    session_id: str
    cwd: str
    turn: int


class Prompt(NamedTuple):
    """A system-prompt fragment registered by row ``row_id``."""

    row_id: str
    name: str
    text: str


class Skill(NamedTuple):
    """A skill the model can load on demand, registered by row ``row_id``."""

    row_id: str
    name: str
    description: str
    body: str


class ToolSource(NamedTuple):
    """Tools row ``row_id`` offers per session, found only at run time (MCP servers).

    ``tools_for(session_id)`` answers name → tool; it is asked whenever a turn needs the
    session's tools, so it must be cheap (answer from what the source already holds).
    """

    row_id: str
    name: str
    tools_for: Callable[[str], Mapping[str, Any]]


class ContextSource(NamedTuple):
    """A per-turn context section row ``row_id`` contributes (goals, instructions).

    ``fn(request)`` (sync or async) gets a :class:`ContextRequest` and
    answers the section's text, or None for nothing this turn.
    """

    row_id: str
    name: str
    fn: Callable[[Any], Any]


class NamedRegistry(Mapping[str, _T], Generic[_T]):
    """A read-only, tree-ordered name → item view (``registry.get(name)``, ``list()``)."""

    def __init__(self) -> None:
        self._items: dict[str, _T] = {}

    def __getitem__(self, name: str) -> _T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"NamedRegistry({list(self._items)})"

    def list(self) -> list[_T]:
        """Every item, in tree order."""
        return list(self._items.values())

    def _replace(self, items: dict[str, _T]) -> None:
        # The kernel's swap on install (registry.Registries.install); authors only read.
        self._items = items


class RuntimeContext:
    """What ``start`` and commands see. Implemented by the kernel.

    ``env`` is the launch's :class:`~dsh.core.launch.EnvSnapshot` (a read-only str
    mapping). The registries show the running tree and keep their identity across
    reconciles: ``tools`` (tool objects by ``tool.name``), ``commands``, ``prompts``,
    ``skills``, ``tool_sources``, ``contexts`` (each a read-only mapping with ``get(name)``
    and ``list()`` in tree order),
    ``hooks`` (``await rt.hooks.emit("before_turn", session_id=..., ...)``) and
    ``guardrails`` (``await rt.guardrails.check(call)`` → ``(Decision, reason)``).
    ``launch`` is the :class:`~dsh.config.resolve.Launch` the application started from (None for
    a kernel built directly). ``secret_env`` names the variables the running rows declare
    secret (:func:`dsh.runtime.kernel.envpolicy.declared_secrets`), which children never get by
    default.
    """

    launch: Any
    profile: str
    home: str
    cwd: str
    env: Mapping[str, str]
    secret_env: frozenset[str] = frozenset()
    tools: NamedRegistry[Any]
    commands: NamedRegistry[Command]
    prompts: NamedRegistry[Prompt]
    skills: NamedRegistry[Skill]
    tool_sources: NamedRegistry[ToolSource]
    contexts: NamedRegistry[ContextSource]
    hooks: HookDispatcher
    guardrails: GuardrailChain

    def service(self, name: str) -> Any:  # pragma: no cover - interface
        """A published service object (raises PluginError if nobody provides it)."""
        raise NotImplementedError

    def publish(self, name: str, obj: Any) -> None:  # pragma: no cover - interface
        """Publish a service this plugin declared with ``Registrar.service``."""
        raise NotImplementedError

    def service_names(self) -> list[str]:  # pragma: no cover - interface
        """Every published service name, sorted."""
        raise NotImplementedError


class Diagnosis(NamedTuple):
    """One check ``dsh doctor`` reports about a row, from the row's own plugin.

    ``check`` is the check's id in the doctor's document: ``<topic>.<row id>[.<name>]``
    (``sandbox.tools:shell``, ``mcp.tools:mcp.files``), or ``plugin.<row id>.<name>`` when
    no topic of the doctor's fits. ``status`` is ``ok``, ``warn`` (a failure only under
    ``--strict``) or ``fail``. ``message`` holds no secret value and no absolute path (the
    doctor also masks home and working-directory prefixes and credentials in URLs).
    """

    check: str
    status: str
    message: str


class Checkup(NamedTuple):
    """What ``dsh doctor`` tells :meth:`Plugin.diagnose` besides the row itself.

    ``live``: the doctor runs with ``--live``, so a plugin may reach what it depends on
    outside the process (a server, a database), bounded; without it, only local checks.
    ``rows`` are the profile's rows as the kernel would boot them (leaf rows with full
    ids, tags resolved, ``disabled`` set): a check spanning rows (the agent's default
    route, published by another row) reads them here. ``provider`` is the model route the
    user asked about (``--provider``; else the default one is meant), ``all_routes``
    whether every route is to be checked (``--all-routes``).
    """

    home: str
    cwd: str
    profile: str
    env: Mapping[str, str]
    live: bool
    rows: tuple[Mapping[str, Any], ...] = ()
    provider: str | None = None
    all_routes: bool = False

    def shown(self, path: str) -> str:
        """``path`` as a check may show it: under ``$DSH_HOME`` or ``$CWD`` (an ancestor's
        file as ``$CWD/../...``), never absolute."""
        real = os.path.abspath(path)
        for prefix, label in ((self.home, "$DSH_HOME"), (self.cwd, "$CWD")):
            relative = os.path.relpath(real, prefix)
            if relative == ".":
                return label
            if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
                return f"{label}/{PurePath(relative).as_posix()}"
        return "$CWD/" + PurePath(os.path.relpath(real, self.cwd)).as_posix()


class Plugin:
    """Base class for plugins; subclasses set ``manifest`` and override the phases.

    ``diagnose`` is the capability ``dsh doctor`` asks every enabled row for: the doctor
    names no plugin and imports none of their modules.
    """

    manifest: ClassVar[Manifest]

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        self.row_id = row_id
        self.config = config

    @classmethod
    def env_for(cls, config: Mapping[str, Any]) -> Mapping[str, EnvVar]:
        """The environment names a row of this plugin with ``config`` reads.

        The manifest's ``env`` by default; a plugin whose variable names come from its
        config (a provider route's ``api_key_env``) adds them. Called on a composed row's
        raw config (tags unresolved, not validated) without creating the plugin, so it
        must be pure and tolerate anything.
        """
        return cls.manifest.env

    def apply(self, reg: Registrar) -> None:
        """Register what the plugin offers. Must not perform I/O."""

    async def start(self, rt: RuntimeContext) -> None:
        """Begin side effects and publish services."""

    async def update(self, config: Mapping[str, Any]) -> bool:
        """Take a new ``config`` in place; ``False`` asks for replacement."""
        return False

    async def dispose(self) -> None:
        """Release everything ``start`` acquired."""

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``dsh doctor``'s checks of a row with ``config`` (tags resolved, not validated:
        a plugin validates it against its schema and reports what is wrong), without
        creating the plugin or starting anything; none by default."""
        return []
