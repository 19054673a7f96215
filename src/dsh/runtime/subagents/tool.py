"""The ``subagent-dsh`` plugin: sub-agents, each a task run by a nested dsh runtime.

Tools: ``subagent`` and ``subagent_fork`` start one (here); ``list_agents``,
``send_message`` and ``interrupt_agent`` reach the running ones (:mod:`.messaging`);
:mod:`.registry` keeps them per parent session and :mod:`.child` watches each.

The child is started the way any embedding program starts dsh, through the SDK
(:class:`dsh.sdk.AsyncDshClient`), so it is a separate process tree with its own
protocol, guardrails and session log. What it gets from the parent is decided here:

* **Home**: an explicit absolute directory under the parent session's workspace,
  ``$DSH_HOME/workspaces/<parent session>/subagents/<random>/home``, never ``~/.dsh`` nor
  the parent's home. The workspace is acquired through the ``sessions`` service when the
  tree has one (held for the child session too while it runs, so it is never cleaned
  under it); it disappears with the workspace.
* **Environment**: the parent's snapshot, credential-scrubbed, plus the row's
  ``pass_env`` names (:mod:`.environment`); the SDK is told not to add the parent
  process's own environment (``inherit_env=False``).
* **Tree**: the row's ``profile`` (default ``sdk-minimal``, which has no sub-agent tool)
  plus its ``patches``. The model chooses only the task and a directory inside its own:
  a profile is a trust decision, made in config, not by the model.
* **Conversation**: ``subagent`` starts from nothing but ``prompt``; ``subagent_fork``
  starts from a copy of the parent's conversation (``session/new {history}``, made whole
  by :mod:`.fork`), then ``prompt``.
* **Runtime**: the same build as the parent (``sys.executable -m dsh``, or the frozen
  executable itself).

In the foreground the call waits for the child to answer, closes it and returns its final
text. With ``run_in_background`` it returns the agent id as soon as the child's first turn
runs; the child then lives on (``idle`` once its messages are answered, woken again by
``send_message``) until the parent session ends, the row is disposed, or room is needed.
Its answers reach the parent two ways: ``list_agents`` shows each sub-agent's status and
last answer at any time, and the ``subagents`` context section tells the model, at the
start of its next turn, which background sub-agents finished work since its last turn and
what they answered (a turn already running learns it at the next one, or by asking
``list_agents``).

The parent announces ``subagent.started {parentSessionId, childSessionId, agentId}``,
``subagent.status {..., status}`` whenever a live child turns ``running``, ``idle`` or
``failed``, and ``subagent.finished {..., status}`` (how its last turn ended, once its
runtime is gone) through the agent's listeners (the SDK server forwards them), and relays
the child's own ``session.event`` notifications and ``subagent.*`` ones the same way
(:mod:`.child`), so a client follows the whole tree by session id. Cancelling the
parent's turn cancels a foreground call and closes its child; closing a client kills the
child's whole process group; the parent session's end (``session_end``) and the row's
disposal close every child still running, and on Linux a killed parent takes its children
with it (the SDK's parent-death signal).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from dsh._version import __version__
from dsh.core.errors import DshError
from dsh.core.redact import withheld
from dsh.runtime.kernel.hooks import HookEvent
from dsh.runtime.kernel.plugin import (
    Capability,
    ContextRequest,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)
from dsh.runtime.subagents.child import LIVE, Child, Status
from dsh.runtime.subagents.environment import child_environment
from dsh.runtime.subagents.fork import fork_history
from dsh.runtime.subagents.messaging import InterruptAgentTool, ListAgentsTool, SendMessageTool
from dsh.runtime.subagents.registry import LimitReachedError, Registry
from dsh.runtime.tools import confine
from dsh.runtime.tools.base import ToolContext, ToolResult

logger = logging.getLogger("dsh.subagent")

STARTED = "subagent.started"
STATUS = "subagent.status"
FINISHED = "subagent.finished"
DEFAULT_PROFILE = "sdk-minimal"
T = TypeVar("T")

SHUTDOWN_TIMEOUT_S = 2.0
"""Each rung of a child's shutdown ladder: small, as closing runs in a budgeted hook."""
CONTEXT_SECTION = "subagents"


def _parameters(what: str) -> Mapping[str, Any]:
    return {
        "type": "object",
        "properties": {
            "description": {"type": "string", "minLength": 1,
                            "description": "A few words naming the task (shown by "
                                           "list_agents)."},
            "prompt": {"type": "string", "minLength": 1, "description": what},
            "cwd": {"type": "string",
                    "description": "Directory the sub-agent works in, relative to the "
                                   "working directory (default: the working directory)."},
            "run_in_background": {"type": "boolean", "default": False,
                                  "description": "Return the agent id at once and let it "
                                                 "work while you go on; its answer comes "
                                                 "with your next turn and in list_agents."},
        },
        "required": ["description", "prompt"],
        "additionalProperties": False,
    }


class SubagentTool:
    """``subagent {description, prompt, cwd?, run_in_background?}``: a fresh sub-agent.

    Mutating (the child may change files) with ``cwd`` as its path argument: the
    workspace policy runs it unasked when ``cwd`` stays inside the working directory, and
    the tool refuses a ``cwd`` that escapes it.
    """

    name = "subagent"
    description = (
        "Delegate a self-contained task to a sub-agent: a separate agent with its own "
        "conversation and tools, working in the current directory (or `cwd`). It sees only "
        "`prompt`, so include everything it needs. The answer is its final message; with "
        "run_in_background you get its agent id at once (see list_agents, send_message, "
        "interrupt_agent)."
    )
    parameters = _parameters("The complete instructions for the sub-agent.")
    mutating = True
    path_arguments: tuple[str, ...] = ("cwd",)
    fork = False

    def __init__(self, plugin: SubagentPlugin) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Start the child; answer its result, or its id when it runs in the background."""
        return await self._plugin.launch(args, ctx, fork=self.fork)


class ForkTool(SubagentTool):
    """``subagent_fork``: like ``subagent``, but the child starts with a copy of this
    conversation, so the prompt can rely on everything said so far."""

    name = "subagent_fork"
    description = (
        "Fork a sub-agent that starts with a copy of this whole conversation, then works on "
        "`prompt` separately (in the current directory, or `cwd`). The answer is its final "
        "message; with run_in_background you get its agent id at once."
    )
    parameters = _parameters("What the forked sub-agent should do next.")
    fork = True


class SubagentPlugin(Plugin):
    """Plugin row ``subagent-dsh``: the sub-agent tools, the context section, the hook."""

    manifest = Manifest(
        id="subagent-dsh",
        version=__version__,
        capabilities=frozenset({Capability.TOOL, Capability.PROMPT, Capability.LIFECYCLE}),
        description="Sub-agents: tasks run by nested dsh runtimes (isolated home, scrubbed "
                    "environment), in the foreground or the background, with messaging.",
        config_schema={
            "type": "object",
            "properties": {
                "profile": {"type": "string", "default": DEFAULT_PROFILE,
                            "description": "The child runtime's profile."},
                "patches": {"type": "array", "items": {"type": "string"}, "default": [],
                            "description": "Patch files for the child (relative paths "
                                           "from the launch directory)."},
                "pass_env": {"type": "array", "items": {"type": "string"}, "default": [],
                             "description": "Environment names passed to the child "
                                            "despite the credential scrub."},
                "provider": {"type": "string",
                             "description": "The child's provider route (its default "
                                            "route when absent)."},
                "model": {"type": "string", "description": "The child's model."},
                "initialize_timeout_s": {"type": "number", "minimum": 0.1, "default": 60,
                                         "description": "Seconds each startup step of "
                                                        "the child may take."},
                "max_agents": {"type": "integer", "minimum": 1, "default": 4,
                               "description": "Live sub-agents per session; one more "
                                              "closes the longest-idle one."},
            },
            "additionalProperties": False,
        },
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._rt: RuntimeContext | None = None
        self.registry = Registry(self._finished, self._changed)
        self._keeps: dict[Child, Callable[[], Callable[[], None]]] = {}
        self._holds: dict[Child, Callable[[], None]] = {}

    def apply(self, reg: Registrar) -> None:
        """Register the five tools, the ``subagents`` context section and the hook."""
        reg.tool(SubagentTool(self))
        reg.tool(ForkTool(self))
        reg.tool(ListAgentsTool(self.registry))
        reg.tool(SendMessageTool(self.registry, self.bound))
        reg.tool(InterruptAgentTool(self.registry))
        reg.context(CONTEXT_SECTION, self._context)
        reg.hook("session_end", "close-session-subagents", self._session_end)

    async def start(self, rt: RuntimeContext) -> None:
        """Keep the runtime context: the agent, the sessions service and the home."""
        self._rt = rt

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New settings apply to the next sub-agent; running ones keep theirs."""
        self.config = config
        return True

    async def dispose(self) -> None:
        """Close every child still running: none outlives its parent runtime."""
        await self.registry.close_all()

    def bound(self) -> float:
        """Seconds one request to a child may take (its startup steps' bound)."""
        return float(self.config.get("initialize_timeout_s", 60))

    # -- starting a child -----------------------------------------------------------------

    async def launch(self, args: Mapping[str, Any], ctx: ToolContext, *,
                     fork: bool) -> ToolResult:
        """The ``subagent``/``subagent_fork`` call: see the module docstring."""
        from dsh.sdk import AsyncDshClient

        rt = self._rt
        if rt is None:
            return ToolResult("Error: the subagent tool is not started", is_error=True)
        try:
            root, cwd = _child_root(ctx, args.get("cwd") or ".")
        except confine.PathError as exc:
            return ToolResult(f"Error: cwd {exc}", is_error=True)
        if not os.path.isdir(cwd):
            return ToolResult(f"Error: cwd is not a directory: {args['cwd']}", is_error=True)
        history = fork_history(ctx.history(), ForkTool.name) if fork else None
        background = bool(args.get("run_in_background"))
        try:
            child = await self.registry.add(
                ctx.session_id, description=args["description"], cwd=cwd,
                background=background, forked=fork,
                max_agents=int(self.config.get("max_agents", 4)))
        except LimitReachedError as exc:
            return ToolResult(f"Error: {exc}", is_error=True)
        self._keeps[child] = ctx.keep
        self._hold(child)
        store = self._store()
        try:
            home = self._child_home(rt, store, ctx.session_id, confine.of(ctx).protected)
            await child.start(AsyncDshClient(self._client_config(cwd, ctx.env, home)),
                              history=history, relay=rt.service("agent").announce,
                              root=root)
            if store is not None:
                store.acquire_workspace(child.session_id, ctx.session_id)
        except BaseException as exc:
            await self.registry.close(child)
            if not isinstance(exc, Exception):
                raise
            # The child may quote the provider route it was given: one from a patch's
            # !env is named by its variable instead (it may be a secret).
            problem = withheld(str(exc), self.config.get("provider"))
            logger.warning("sub-agent of session %s did not start: %s", ctx.session_id,
                           problem)
            child.error = f"did not start: {problem}"
            return ToolResult(f"Error: the sub-agent did not start: {problem}", is_error=True)
        rt.service("agent").announce(STARTED, _note(child))
        try:
            target = await unless_cancelled(child.prompt(args["prompt"], bound=self.bound()),
                                            ctx.cancelled)
            if background:
                return ToolResult(f"Started sub-agent {child.id} in the background "
                                  f"(status: {child.status.value}). Its answer comes with "
                                  "your next turn; list_agents shows it meanwhile.")
            await unless_cancelled(child.settled(target), ctx.cancelled)
        except (asyncio.TimeoutError, DshError) as exc:
            await self.registry.close(child)
            logger.warning("sub-agent %s failed", child.id, exc_info=True)
            return ToolResult(f"Error: the sub-agent failed: {exc or 'no answer in time'}",
                              is_error=True)
        except BaseException:
            await self.registry.close(child)
            raise
        await self.registry.close(child)
        return _answer(child)

    def _hold(self, child: Child) -> None:
        """A child starting or running holds its parent session in this runtime (the
        parent's lease is kept: its answer comes back here); an idle or gone one not."""
        working = child.status in (Status.STARTING, Status.RUNNING)
        if working and child not in self._holds and child in self._keeps:
            self._holds[child] = self._keeps[child]()
        elif not working and child in self._holds:
            self._holds.pop(child)()
        if child.status not in LIVE:
            self._keeps.pop(child, None)

    def _finished(self, child: Child, outcome: str) -> None:
        """A child's runtime is gone: release its workspace hold, announce it."""
        self._hold(child)
        if child.session_id is None or self._rt is None:
            return
        store = self._store()
        if store is not None:
            try:
                store.release_workspace(child.session_id, child.parent)
            except Exception:
                logger.warning("releasing the workspace of %s failed", child.id, exc_info=True)
        self._rt.service("agent").announce(FINISHED, {**_note(child), "status": outcome})

    def _changed(self, child: Child) -> None:
        """A live child's status changed: tell the clients (``subagent.status``)."""
        self._hold(child)
        if child.session_id is not None and self._rt is not None:
            self._rt.service("agent").announce(STATUS, {**_note(child),
                                                        "status": child.status.value})

    def _store(self) -> Any:
        rt = self._rt
        return rt.service("sessions") if rt and "sessions" in rt.service_names() else None

    def _child_home(self, rt: RuntimeContext, store: Any, parent: str,
                    protected: tuple[str, ...]) -> Path:
        """A fresh, private home under the parent session's workspace."""
        if store is not None:
            workspace = Path(store.acquire_workspace(parent))
        else:
            workspace = Path(rt.home) / "workspaces" / parent
        # os.urandom rather than uuid or secrets: neither may load at boot.
        home = workspace / "subagents" / os.urandom(6).hex() / "home"
        os.makedirs(home, mode=0o700)
        self._confine(rt, home, protected)
        return home.resolve()

    @staticmethod
    def _confine(rt: RuntimeContext, home: Path, protected: tuple[str, ...]) -> None:
        """Give the child no more reach than the parent: the child home's patch.

        The child's tools get the parent's protected directories (its dsh home among
        them: the child's home lies inside it) as ``protected_paths`` of the ``agent``
        row. The parent's ``bash`` sandbox policy is the child's too, with the parent's
        home hidden as well (``$DSH_HOME/../..`` would otherwise reach the parent's
        ``.env``), and so are its resource limits; a parent without ``bash`` gets a child
        without one. The row's own ``patches`` come later in the child's layers, so
        explicit config wins. (The parent's ``env`` policy is not copied: its ``set``
        values may be secrets, which this file must not hold.)
        """
        parent_home = os.path.realpath(rt.home)
        paths = list(dict.fromkeys([*protected, parent_home]))
        operations: list[dict[str, Any]] = [
            {"id": "agent", "merge": {"config": {"protected_paths": paths}}}]
        bash = rt.tools.get("bash")
        policy = getattr(bash, "sandbox", None)
        if bash is None:
            operations.append({"id": "tools:shell", "disabled": True})
        elif policy is not None:  # else a shell of another plugin: nothing to inherit
            sandbox = policy.to_config()
            sandbox["hide"] = [*sandbox["hide"], parent_home]
            config: dict[str, Any] = {"sandbox": sandbox}
            limits = getattr(bash, "limits", None)
            if limits is not None:
                config["limits"] = limits._asdict()
            operations.append({"id": "tools:shell", "merge": {"config": config}})
        staging = home / ".patch.yml.tmp"
        staging.write_text("# Written by the parent runtime: the sub-agent's confinement.\n"
                           + json.dumps(operations) + "\n", encoding="utf-8")
        os.replace(staging, home / "patch.yml")

    def _client_config(self, cwd: str, env: Mapping[str, str], home: Path) -> Any:
        from dsh.core.carriers import running_frozen
        from dsh.sdk import ClientConfig

        config, rt = self.config, self._rt
        assert rt is not None
        patches = [os.path.join(rt.cwd, p) for p in config.get("patches", ())]
        return ClientConfig(
            dsh_bin=sys.executable if running_frozen() else None,
            carrier="exe" if running_frozen() else "python",
            profile=config.get("profile", DEFAULT_PROFILE),
            patches=patches,
            dsh_home=str(home),
            cwd=cwd,
            env=child_environment(env, config.get("pass_env", ()), rt.secret_env),
            inherit_env=False,
            provider=config.get("provider"),
            model=config.get("model"),
            initialize_timeout=self.bound(),
            request_timeout=self.bound(),
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            stderr=lambda line: logger.debug("[subagent] %s", line),
        )

    # -- the parent's session -------------------------------------------------------------

    def _context(self, request: ContextRequest) -> str | None:
        """The ``subagents`` section: background sub-agents' reports since the last turn."""
        reports = self.registry.take_reports(request.session_id)
        if not reports:
            return None
        return "Sub-agent reports since your last turn:\n" + "\n".join(reports)

    async def _session_end(self, event: HookEvent) -> None:
        """The parent session ended: close its children."""
        if event.session_id is not None:
            await self.registry.end_session(event.session_id)


def _child_root(ctx: ToolContext, path: str) -> tuple[str, str]:
    """The child's workspace root and working directory (real paths) for ``path``.

    A sub-agent shares its parent's root: the root when ``path`` lies in it, the granted
    root holding it, or the directory this call was approved for. Raises
    :class:`~dsh.runtime.tools.confine.PathError` for a protected or unapproved path.
    """
    target = confine.of(ctx).target(ctx.cwd, path)
    return target.anchor.path, target.real


async def unless_cancelled(awaitable: Awaitable[T], cancelled: asyncio.Event) -> T:
    """``await awaitable``, but raise CancelledError as soon as the turn is cancelled.

    The turn's cancellation also cancels this task, yet ``asyncio.wait_for`` (inside the
    child's waits) can swallow a cancellation that lands as its inner wait completes
    (Python < 3.12); the child's next wait may be its whole turn. The turn's ``cancelled``
    event cannot be lost that way, so the call ends on whichever comes first.
    """
    work = asyncio.ensure_future(awaitable)
    stop = asyncio.ensure_future(cancelled.wait())
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
    if work.cancelled():
        raise asyncio.CancelledError
    return work.result()


def _note(child: Child) -> dict[str, Any]:
    """The fields every ``subagent.*`` notification carries."""
    return {"parentSessionId": child.parent, "childSessionId": child.session_id,
            "agentId": child.id}


def _answer(child: Child) -> ToolResult:
    """A foreground child's result: its final text, or why it stopped."""
    if child.stop_reason == "completed":
        return ToolResult(child.last_text)
    text = f"Error: the sub-agent stopped ({child.stop_reason or 'error'})"
    if child.error:
        text += f": {child.error}"
    if child.last_text:
        text += f"\nIts last message: {child.last_text}"
    return ToolResult(text, is_error=True)
