"""The plugin kernel: load a tree of rows, start it in dependency order, reconcile, dispose.

Lifecycle (:class:`KernelState`)::

    NEW --load()--> LOADED --start()--> STARTING --> RUNNING <--> RECONCILING
                                            |                          |
                                            +--> FAILED <--------------+ (restore failed)
    any state --dispose()--> DISPOSING --> DISPOSED

``load`` has no side effects beyond importing plugin modules: it resolves the enabled rows,
validates their config, instantiates them and runs ``apply`` (registration only), then
checks the whole tree (service providers, dependency cycles, name clashes) so that a bad
tree fails before anything starts. ``start`` runs the side effects, providers before the
rows that ``inject`` (or ``manifest.requires``) their services, and undoes itself if one
row fails. ``reconcile`` is transactional: it either reaches the new tree or restores the
old one and raises.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dsh.core.errors import DshError, PluginError
from dsh.runtime.kernel import schema
from dsh.runtime.kernel.configstate import ConfigState
from dsh.runtime.kernel.hooks import DEFAULT_BUDGET, BudgetExceededError, run_bounded
from dsh.runtime.kernel.loader import resolve
from dsh.runtime.kernel.plugin import Command, Manifest, Plugin, RuntimeContext
from dsh.runtime.kernel.registry import Registration, Registries, RowRegistrar, ServiceTable, merge
from dsh.runtime.kernel.tree import RowDiff, RowSpec, StartPlan, diff_rows, parse_rows, plan_start

DISPOSE_TIMEOUT = 5.0
"""Seconds each row's ``dispose`` may take before the kernel moves on without it."""

logger = logging.getLogger("dsh.kernel")


class KernelState(enum.Enum):
    """Where the kernel is in its lifecycle; misuse names the state it found."""

    NEW = "new"
    LOADED = "loaded"
    STARTING = "starting"
    RUNNING = "running"
    RECONCILING = "reconciling"
    DISPOSING = "disposing"
    DISPOSED = "disposed"
    FAILED = "failed"


class RowState(enum.Enum):
    """Where one row's plugin instance is in its lifecycle."""

    DISABLED = "disabled"
    LOADED = "loaded"
    STARTING = "starting"
    RUNNING = "running"
    DISPOSING = "disposing"
    DISPOSED = "disposed"
    FAILED = "failed"


class _Slot:
    """One enabled row's plugin instance and what the kernel knows about it.

    The kernel's records are plain classes: a dataclass's generated methods cost about
    half a millisecond each to create at import, on every boot (issue 3's target).
    """

    __slots__ = ("config", "manifest", "plugin", "registration", "spec", "state")

    def __init__(self, spec: RowSpec, plugin: Plugin, manifest: Manifest,
                 config: dict[str, Any], registration: Registration) -> None:
        self.spec = spec
        self.plugin = plugin
        self.manifest = manifest
        self.config = config
        self.registration = registration
        self.state = RowState.LOADED

    @property
    def needs(self) -> tuple[str, ...]:
        """Services this row waits for: its ``inject`` plus the manifest's ``requires``."""
        return (*self.spec.inject, *self.manifest.requires)


class KernelContext(RuntimeContext):
    """The :class:`~dsh.runtime.kernel.plugin.RuntimeContext` commands and servers receive.

    Registries (``tools``, ``commands``, ``prompts``, ``skills``, ``hooks``,
    ``guardrails``) always show the running tree; their identity survives reconciles, so
    holding a reference is safe. ``config_state`` is the current effective config (it
    moves with live reload; see :mod:`dsh.runtime.kernel.configstate`).
    """

    def __init__(self, *, profile: str, home: str, cwd: str, env: Mapping[str, str],
                 registries: Registries | None = None, services: ServiceTable | None = None,
                 hook_budget: float = DEFAULT_BUDGET, launch: Any = None,
                 config_state: ConfigState | None = None) -> None:
        self.launch = launch
        self.config_state = config_state if config_state is not None else ConfigState(
            getattr(launch, "effective_config", None) or {})
        self.profile = profile
        self.home = home
        self.cwd = cwd
        self.env = env
        self._registries = (Registries(self, hook_budget=hook_budget) if registries is None
                            else registries)
        self._services = ServiceTable() if services is None else services
        self.tools = self._registries.tools
        self.commands = self._registries.commands
        self.prompts = self._registries.prompts
        self.skills = self._registries.skills
        self.tool_sources = self._registries.tool_sources
        self.contexts = self._registries.contexts
        self.hooks = self._registries.hooks
        self.guardrails = self._registries.guardrails

    @property
    def secret_env(self) -> frozenset[str]:
        """The variable names the running rows declare secret (children never get them
        by default: :mod:`dsh.runtime.kernel.envpolicy`)."""
        return self._registries.secret_env

    def service(self, name: str) -> Any:
        """A published service object; PluginError if nobody has published ``name``."""
        return self._services.get(name)

    def service_names(self) -> list[str]:
        """Every published service name, sorted."""
        return self._services.names()

    def publish(self, name: str, obj: Any) -> None:
        """Refused here: a service is published by its row, from the context its
        ``start`` receives, so the kernel knows whom it belongs to."""
        raise PluginError(f"service '{name}' can only be published from the start() of the "
                          "row that declares it")


class _RowContext(KernelContext):
    """The context one row's ``start`` receives: may publish that row's services."""

    def __init__(self, base: KernelContext, slot: _Slot) -> None:
        super().__init__(profile=base.profile, home=base.home, cwd=base.cwd, env=base.env,
                         registries=base._registries, services=base._services,
                         launch=base.launch, config_state=base.config_state)
        self._slot = slot

    def publish(self, name: str, obj: Any) -> None:
        """Publish service ``name``, which this row declared in ``apply``."""
        slot = self._slot
        row_id = slot.spec.id
        if name not in slot.registration.services:
            raise PluginError(f"row '{row_id}' published service '{name}' without declaring "
                              "it (Registrar.service or manifest.provides)", row_id=row_id)
        if slot.state not in (RowState.STARTING, RowState.RUNNING):
            raise PluginError(f"row '{row_id}' published service '{name}' while "
                              f"{slot.state.value}", row_id=row_id)
        self._services.publish(row_id, name, obj)


class _Transaction:
    """What a reconcile changed so far, for undoing it."""

    __slots__ = ("started", "updated")

    def __init__(self) -> None:
        self.updated: list[tuple[_Slot, RowSpec, dict[str, Any]]] = []
        self.started: list[_Slot] = []


class Kernel:
    """Boots one config tree (flat rows in tree order) and keeps it running.

    ``home`` and ``cwd`` become strings; ``env`` is the launch's EnvSnapshot (any
    read-only str mapping works). ``hook_budget`` bounds each hook call in seconds.
    ``launch`` is the :class:`~dsh.config.resolve.Launch` an application was started with (None
    when a kernel is built directly, as in tests); servers report from it.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], *, profile: str,
                 home: str | os.PathLike[str], cwd: str | os.PathLike[str],
                 env: Mapping[str, str], hook_budget: float = DEFAULT_BUDGET,
                 launch: Any = None) -> None:
        self._rows = tuple(rows)
        self._context = KernelContext(profile=profile, home=os.fspath(home),
                                      cwd=os.fspath(cwd), env=env, hook_budget=hook_budget,
                                      launch=launch)
        self._state = KernelState.NEW
        self._specs: tuple[RowSpec, ...] = ()
        self._slots: dict[str, _Slot] = {}  # enabled rows, tree order
        self._plan = StartPlan()

    @property
    def state(self) -> KernelState:
        """The kernel's lifecycle state."""
        return self._state

    @property
    def context(self) -> KernelContext:
        """The runtime context shared by commands, servers and the agent loop."""
        return self._context

    def row_states(self) -> dict[str, RowState]:
        """Every row's state in tree order (disabled rows included)."""
        return {spec.id: self._slots[spec.id].state if spec.id in self._slots
                else RowState.DISABLED for spec in self._specs}

    def load(self) -> None:
        """Resolve, validate and ``apply`` every enabled row, then check the whole tree.

        Raises ConfigError (bad rows, config, services) or PluginError (a plugin that
        cannot load or registers wrongly); nothing has started either way.
        """
        self._require("load", KernelState.NEW)
        try:
            specs = parse_rows(self._rows)
            slots = {s.id: self._load_slot(s) for s in specs if not s.disabled}
            self._plan = self._check(slots)
        except BaseException:
            self._state = KernelState.FAILED
            raise
        self._specs, self._slots = specs, slots
        self._install(slots.values())
        self._state = KernelState.LOADED

    async def start(self) -> None:
        """Start every row, providers first; on a failure dispose what started and raise
        PluginError naming the row, leaving nothing running."""
        self._require("start", KernelState.LOADED)
        self._state = KernelState.STARTING
        started: list[_Slot] = []
        try:
            for row_id in self._plan.order:
                slot = self._slots[row_id]
                await self._start_slot(slot)
                started.append(slot)
        except BaseException:
            for slot in reversed(started):
                await self._dispose_slot(slot, DISPOSE_TIMEOUT)
            self._install(())
            self._state = KernelState.FAILED
            raise
        self._state = KernelState.RUNNING

    def command(self, name: str) -> Command:
        """The command ``name`` registered by some row (``main`` starts the application)."""
        self._require("command", KernelState.LOADED, KernelState.RUNNING,
                      KernelState.RECONCILING)
        command = self._context.commands.get(name)
        if command is None:
            prefix = (f"profile '{self._context.profile}' has no application: "
                      if name == "main" else "")
            raise PluginError(f"{prefix}no row registers command '{name}'")
        return command

    def command_row(self, name: str) -> str | None:
        """The id of the row that registered command ``name`` (None when none did)."""
        return next((row_id for row_id, slot in self._slots.items()
                     if name in slot.registration.commands), None)

    async def reconcile(self, rows: Sequence[Mapping[str, Any]],
                        keep: Iterable[str] = ()) -> RowDiff:
        """Move the running tree to ``rows``, or restore it and raise.

        Kept rows are untouched; a ``config``-only change calls ``update`` (replacing the
        plugin when it answers False); other changes replace; new rows start; removed rows
        dispose. Rows that need a service of a replaced or removed row are restarted too,
        so nobody keeps a disposed service object. Returns what changed.

        Rows in ``keep`` must survive as they are (e.g. the server owning the process's
        stdio): a reconcile that would replace or dispose one raises PluginError saying a
        restart is required, with the old tree running.
        """
        self._require("reconcile", KernelState.RUNNING)
        keep = frozenset(keep)
        old_slots, old_plan = dict(self._slots), self._plan
        self._state = KernelState.RECONCILING
        try:  # everything that can be checked without side effects
            specs = parse_rows(rows)
            by_id = {s.id: s for s in specs if not s.disabled}
            diff = diff_rows({i: slot.spec for i, slot in old_slots.items()}, by_id)
            gone = diff.replaced | diff.removed
            # A kept row's config change counts too: undoing a refused update in place
            # could restart it, which is what ``keep`` forbids.
            _refuse_pinned(keep & (gone | diff.updated | old_plan.dependents(gone)))
            fresh = {i: self._load_slot(by_id[i]) for i in by_id if i in diff.replaced
                     or i in diff.added}
            configs = {i: self._config(old_slots[i].manifest, by_id[i]) for i in by_id
                       if i in diff.updated}
            self._check(_merged(by_id, old_slots, fresh))
        except BaseException:
            self._state = KernelState.RUNNING
            raise
        txn = _Transaction()
        try:
            plan = await self._apply_changes(by_id, old_slots, old_plan, fresh, configs, txn,
                                             keep)
        except BaseException as exc:
            await self._restore(old_slots, old_plan, txn, exc)
            raise
        self._specs, self._slots, self._plan = specs, _merged(by_id, old_slots, fresh), plan
        self._install(self._slots.values())
        self._state = KernelState.RUNNING
        return diff

    async def dispose(self, timeout: float = DISPOSE_TIMEOUT) -> list[PluginError]:
        """Dispose every started row in reverse start order, each bounded by ``timeout``
        seconds. A failing or overrunning row is logged (stderr) and skipped, never
        stopping the others; the collected errors are returned. Idempotent."""
        if self._state in (KernelState.DISPOSING, KernelState.DISPOSED):
            return []
        self._state = KernelState.DISPOSING
        errors = []
        for row_id in reversed(self._plan.order):
            slot = self._slots[row_id]
            if slot.state in (RowState.STARTING, RowState.RUNNING):
                error = await self._dispose_slot(slot, timeout)
                if error is not None:
                    errors.append(error)
            elif slot.state is RowState.LOADED:
                slot.state = RowState.DISPOSED
        self._install(())
        self._state = KernelState.DISPOSED
        return errors

    # -- steps ---------------------------------------------------------------------------

    def _require(self, action: str, *states: KernelState) -> None:
        if self._state not in states:
            raise PluginError(f"cannot {action}: kernel is {self._state.value}")

    def _config(self, manifest: Manifest, spec: RowSpec) -> dict[str, Any]:
        return schema.validate(manifest.config_schema or {}, spec.config, row_id=spec.id)

    def _load_slot(self, spec: RowSpec) -> _Slot:
        """Resolve, validate, instantiate and apply one row; no side effects."""
        factory = resolve(spec.id, spec.name)
        manifest = factory.manifest
        config = self._config(manifest, spec)
        registrar = RowRegistrar(spec.id, manifest, self._context.env)
        try:
            plugin = factory(spec.id, config)
            plugin.apply(registrar)
        except DshError:
            raise
        except Exception as exc:
            raise PluginError(f"row '{spec.id}' (plugin '{manifest.id}') failed to load: "
                              f"{type(exc).__name__}: {exc}", row_id=spec.id) from exc
        finally:
            registrar.close()
        return _Slot(spec, plugin, manifest, config, registrar.registration)

    def _check(self, slots: Mapping[str, _Slot]) -> StartPlan:
        """Whole-tree checks: services (ConfigError), then name clashes (PluginError)."""
        plan = plan_start({i: (s.registration.services, s.needs) for i, s in slots.items()})
        merge(slot.registration for slot in slots.values())
        return plan

    def _install(self, slots: Iterable[_Slot]) -> None:
        from dsh.runtime.kernel.envpolicy import declared_secrets

        slots = list(slots)
        registries = self._context._registries
        registries.install(merge(slot.registration for slot in slots))
        registries.secret_env = frozenset(
            name for slot in slots for name in declared_secrets(slot.manifest, slot.config))

    async def _start_slot(self, slot: _Slot) -> None:
        row_id = slot.spec.id
        slot.state = RowState.STARTING
        try:
            await slot.plugin.start(_RowContext(self._context, slot))
        except BaseException as exc:
            slot.state = RowState.FAILED
            self._context._services.withdraw(row_id)
            if isinstance(exc, Exception):
                raise _wrap(exc, f"row '{row_id}' failed to start", row_id) from exc
            raise
        slot.state = RowState.RUNNING
        missing = [s for s in slot.registration.services if s not in self._context._services]
        if missing:
            await self._dispose_slot(slot, DISPOSE_TIMEOUT)
            raise PluginError(f"row '{row_id}' declared service '{missing[0]}' but did not "
                              "publish it in start()", row_id=row_id)

    async def _dispose_slot(self, slot: _Slot, timeout: float) -> PluginError | None:
        """Dispose one row, bounded; an error is logged and returned, never raised."""
        row_id = slot.spec.id
        slot.state = RowState.DISPOSING
        error: PluginError | None = None
        try:
            await run_bounded(slot.plugin.dispose(), timeout)
        except BudgetExceededError:
            error = PluginError(f"row '{row_id}' did not dispose within {float(timeout)} s",
                                row_id=row_id)
        except Exception as exc:
            error = _wrap(exc, f"row '{row_id}' failed to dispose", row_id)
            error.__cause__ = exc
        finally:
            slot.state = RowState.DISPOSED
            self._context._services.withdraw(row_id)
        if error is not None:
            logger.error("%s", error)
        return error

    async def _update_slot(self, slot: _Slot, config: dict[str, Any]) -> bool:
        try:
            return await slot.plugin.update(config) is True
        except Exception as exc:
            raise _wrap(exc, f"row '{slot.spec.id}' failed to update", slot.spec.id) from exc

    async def _apply_changes(self, by_id: Mapping[str, RowSpec], old_slots: dict[str, _Slot],
                             old_plan: StartPlan, fresh: dict[str, _Slot],
                             configs: Mapping[str, dict[str, Any]], txn: _Transaction,
                             keep: frozenset[str] = frozenset()) -> StartPlan:
        """The side-effecting half of reconcile; ``txn`` records what to undo."""
        for row_id, config in configs.items():
            slot = old_slots[row_id]
            txn.updated.append((slot, slot.spec, slot.config))
            if await self._update_slot(slot, config):
                slot.spec, slot.config = by_id[row_id], config
            else:
                fresh[row_id] = self._load_slot(by_id[row_id])
        gone = {i for i in old_slots if i not in by_id or i in fresh}
        for row_id in old_plan.dependents(gone) - gone:
            fresh[row_id] = self._load_slot(by_id[row_id])
        _refuse_pinned(keep & (gone | fresh.keys()))
        plan = self._check(_merged(by_id, old_slots, fresh))
        for row_id in reversed(old_plan.order):
            if row_id in gone or row_id in fresh:
                await self._dispose_slot(old_slots[row_id], DISPOSE_TIMEOUT)
        self._install(s for i, s in old_slots.items() if s.state is RowState.RUNNING)
        for row_id in plan.order:
            if row_id in fresh:
                txn.started.append(fresh[row_id])
                await self._start_slot(fresh[row_id])
        return plan

    async def _restore(self, old_slots: dict[str, _Slot], old_plan: StartPlan,
                       txn: _Transaction, cause: BaseException) -> None:
        """Bring the previous tree back after a failed reconcile (state RUNNING), or
        mark the kernel FAILED and raise PluginError if even that fails."""
        try:
            for slot in reversed(txn.started):
                if slot.state in (RowState.STARTING, RowState.RUNNING):
                    await self._dispose_slot(slot, DISPOSE_TIMEOUT)
            broken = set()
            for slot, spec, config in reversed(txn.updated):
                slot.spec, slot.config = spec, config
                if slot.state is RowState.RUNNING and not await self._revert(slot, config):
                    broken.add(spec.id)
            restart = broken | old_plan.dependents(broken)
            for row_id in reversed(old_plan.order):
                slot = old_slots[row_id]
                if row_id in restart and slot.state is RowState.RUNNING:
                    await self._dispose_slot(slot, DISPOSE_TIMEOUT)
            for row_id in old_plan.order:
                if old_slots[row_id].state is not RowState.RUNNING:
                    old_slots[row_id] = self._load_slot(old_slots[row_id].spec)
                    await self._start_slot(old_slots[row_id])
        except Exception as exc:
            self._slots = old_slots
            self._state = KernelState.FAILED
            raise PluginError(f"reconcile failed ({cause}) and the previous tree could not "
                              f"be restored: {exc}") from exc
        self._slots = old_slots
        self._install(old_slots.values())
        self._state = KernelState.RUNNING

    async def _revert(self, slot: _Slot, config: dict[str, Any]) -> bool:
        try:
            return await slot.plugin.update(config) is True
        except Exception:
            logger.exception("row '%s' failed to take back its previous config", slot.spec.id)
            return False


def _refuse_pinned(rows: Iterable[str]) -> None:
    """Refuse a reconcile that would replace or dispose one of ``rows``."""
    pinned = sorted(rows)
    if pinned:
        raise PluginError(f"row '{pinned[0]}' would be replaced or disposed while it serves "
                          "this process: restart required")


def _merged(by_id: Mapping[str, RowSpec], old_slots: Mapping[str, _Slot],
            fresh: Mapping[str, _Slot]) -> dict[str, _Slot]:
    """The new tree's slots in tree order: fresh instances, else the running ones."""
    return {row_id: fresh.get(row_id) or old_slots[row_id] for row_id in by_id}


def _wrap(exc: Exception, what: str, row_id: str) -> PluginError:
    """A PluginError for a plugin phase that raised, keeping a DshError's exit code."""
    if isinstance(exc, DshError):
        return PluginError(f"{what}: {exc}", row_id=row_id, exit_code=exc.exit_code)
    return PluginError(f"{what}: {type(exc).__name__}: {exc}", row_id=row_id)
