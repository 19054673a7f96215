"""The ``agent-core`` plugin row: publishes the ``agent`` service.

The row owns the :class:`~dsh.runtime.agent.service.Agent`'s life: created at ``start``
(the runtime context it reads registries and providers from only exists then), closed at
``dispose``. Sessions persist through the ``sessions`` service when the tree has one.
A ``config``-only change is taken in place, so live sessions survive it; the
new values apply from the next turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.core.errors import DshError
from dsh.core.redact import EnvValue, shown
from dsh.runtime.agent.service import Agent
from dsh.runtime.agent.settings import AgentConfig
from dsh.runtime.kernel.loader import resolve
from dsh.runtime.kernel.plugin import (
    Capability,
    Checkup,
    Diagnosis,
    Manifest,
    Plugin,
    RuntimeContext,
)
from dsh.runtime.kernel.schema import validate

_DEFAULTS = AgentConfig()
SESSIONS = "sessions"
"""The optional persistence service (``sessions-sqlite``)."""


class AgentCore(Plugin):
    """Sessions, the turn loop and the ``agent`` service the protocol servers drive."""

    manifest = Manifest(
        id="agent-core",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="The agent loop: sessions, turns, tool calls; publishes service 'agent'.",
        config_schema={
            "type": "object",
            "properties": {
                "default_route": {
                    "type": "string", "default": _DEFAULTS.default_route,
                    "description": "Provider route used when a client names none.",
                },
                "max_steps": {
                    "type": "integer", "minimum": 1, "default": _DEFAULTS.max_steps,
                    "description": "Model calls one turn may make before it stops.",
                },
                "max_queued": {
                    "type": "integer", "minimum": 1, "default": _DEFAULTS.max_queued,
                    "description": "Prompts that may wait behind a session's running turn.",
                },
                "system_prompt": {
                    "type": "string", "default": _DEFAULTS.system_prompt,
                    "description": "The system prompt (registered prompt fragments follow).",
                },
                "compact_at": {
                    "type": "number", "minimum": 0, "maximum": 1,
                    "default": _DEFAULTS.compact_at,
                    "description": "Compact the history when its estimated tokens reach "
                                   "this fraction of the provider's context window "
                                   "(0: never automatically).",
                },
                "compact_keep": {
                    "type": "number", "minimum": 0, "maximum": 1,
                    "default": _DEFAULTS.compact_keep,
                    "description": "Fraction of the context window the most recent "
                                   "messages keep verbatim when compacting.",
                },
                "protected_paths": {
                    "type": "array", "items": {"type": "string"}, "default": [],
                    "description": "Absolute or ~/ directories no tool may read or write, "
                                   "besides the dsh home (which always is); no approval "
                                   "can open them.",
                },
                "max_idle_sessions": {
                    "type": "integer", "minimum": 0, "default": _DEFAULTS.max_idle_sessions,
                    "description": "Sessions with no work this runtime keeps in memory "
                                   "after giving their leases back (taking one back is "
                                   "then a version check, not a reload); past this, the "
                                   "longest idle is unloaded (its session_end fires).",
                },
                "hook_budget_s": {
                    "type": "number", "minimum": 0.001, "default": _DEFAULTS.hook_budget_s,
                    "description": "Seconds all hooks of one lifecycle event may take.",
                },
            },
            "additionalProperties": False,
        },
        provides=("agent",),
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self.agent: Agent | None = None

    async def start(self, rt: RuntimeContext) -> None:
        """Create the agent over the ``sessions`` service when one is published, else over
        an in-memory store, and publish it.

        The service is optional on purpose: a tree without a ``sessions`` row still runs,
        its sessions just die with the process. A tree with one lists it in the agent
        row's ``inject``, so it is started (and published) before this runs.
        """
        store = rt.service(SESSIONS) if SESSIONS in rt.service_names() else None
        self.agent = Agent(rt, AgentConfig.from_mapping(self.config, row_id=self.row_id), store)
        rt.publish("agent", self.agent)

    async def update(self, config: Mapping[str, Any]) -> bool:
        """Take new settings in place; running turns finish with the old ones."""
        self.config = config
        if self.agent is not None:
            self.agent.config = AgentConfig.from_mapping(config, row_id=self.row_id)
        return True

    async def dispose(self) -> None:
        """Cancel running turns and close every session (bounded)."""
        if self.agent is not None:
            await self.agent.close()

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``--live``: the model route in use (``--provider``, else the row's
        ``default_route``), or with ``--all-routes`` every route the profile publishes:
        its key is set, its server answers and, where the API lists models, it lists the
        route's default model (``route.<route>.key``, ``route.<route>.server``). Checked
        with the route's own code, as a session's first request would be; each route is
        published by another row, found among ``checkup.rows`` by what each row
        publishes. A route not in use whose key (or, keyless, whose base URL) was never
        set is reported as not configured, not failed: nobody uses it."""
        if not checkup.live:
            return []
        in_use = checkup.provider or config.get("default_route") or _DEFAULTS.default_route
        routes = _published(checkup)
        if in_use not in routes:
            why = "the route asked for (--provider)" if checkup.provider else \
                "the agent row's default_route"
            known = ", ".join(sorted(routes)) or "none"
            # A route from a patch's !env names no route: maybe a secret, never shown.
            check = f"route.env.{in_use.name}" if isinstance(in_use, EnvValue) \
                else f"route.{in_use}"
            found = [Diagnosis(check, "fail", f"no enabled row publishes route "
                               f"{shown(in_use)}, {why} (routes: {known})")]
        else:
            found = []
        for route in sorted(routes) if checkup.all_routes else [in_use]:
            if route in routes:
                row, plugin = routes[route]
                found += _probe(route, row, plugin, checkup, in_use=route == in_use)
        return found


def _published(checkup: Checkup) -> dict[str, tuple[Mapping[str, Any], type[Plugin]]]:
    """Each model route of the profile: the enabled row publishing it, and its plugin."""
    routes: dict[str, tuple[Mapping[str, Any], type[Plugin]]] = {}
    for row in checkup.rows:
        if row["disabled"]:
            continue
        try:
            plugin = resolve(row["id"], row["name"])
        except DshError:
            continue  # the doctor reports it as plugin.<row id>
        published = getattr(plugin, "published_route", None)
        route = published(row["config"]) if published is not None else None
        if route is not None:
            routes.setdefault(route, (row, plugin))
    return routes


def _probe(route: str, row: Mapping[str, Any], plugin: type[Plugin], checkup: Checkup,
           *, in_use: bool) -> list[Diagnosis]:
    """The checks of ``route``, published by ``row`` (a row of ``plugin``); a route not
    ``in_use`` that was never configured is said to be so, and not reached."""
    check, where = f"route.{route}", f"(route '{route}', row '{row['id']}')"
    try:
        values = validate(plugin.manifest.config_schema or {}, row["config"], row_id=row["id"])
    except DshError as exc:
        return [Diagnosis(check, "fail", str(exc))]
    route_for = getattr(plugin, "route_for", None)
    if route_for is None:
        return [Diagnosis(check, "ok", f"route '{route}' (row '{row['id']}', {row['name']}) "
                          "has no server to reach")]
    try:
        probe = route_for(values, env=checkup.env, home=checkup.home, row_id=row["id"])
        unset = None if in_use else probe.unconfigured()
        if unset is not None:
            return [Diagnosis(f"{check}.key", "ok", f"not configured ({unset}); not in use, "
                              f"so not checked {where}")]
        results = asyncio.run(probe.probe())
    except DshError as exc:
        return [Diagnosis(check, "fail", str(exc))]
    return [Diagnosis(f"{check}.{name}", status, f"{message} {where}")
            for name, status, message in results]
