"""The ``subagent-dsh`` plugin: the ``subagent`` tool, a task run by a nested dsh runtime.

The child is started the way any embedding program starts dsh, through the SDK
(:class:`dsh.sdk.AsyncDshClient`), so it is a separate process tree with its own
protocol, guardrails and session log. What it gets from the parent is decided here:

* **Home**: an explicit absolute directory under the parent session's workspace,
  ``$DSH_HOME/workspaces/<parent session>/subagents/<n>/home``, never ``~/.dsh`` nor the
  parent's home. The workspace is acquired through the ``sessions`` service when the tree
  has one (held for the child session too while it runs, so it is never cleaned under
  it); it disappears with the workspace.
* **Environment**: the parent's snapshot, credential-scrubbed, plus the row's
  ``pass_env`` names (:mod:`.environment`); the SDK is told not to add the parent
  process's own environment (``inherit_env=False``).
* **Tree**: the row's ``profile`` (default ``sdk-minimal``, which has no sub-agent tool)
  plus its ``patches``. The model chooses only the task: a profile is a trust decision,
  made in config, not by the model.
* **Runtime**: the same build as the parent (``sys.executable -m dsh``, or the frozen
  executable itself).

The parent announces ``subagent.started {parentSessionId, childSessionId}`` and
``subagent.finished {parentSessionId, childSessionId, status}`` through the agent's
listeners (the SDK server forwards them). The tool result is the child's final text.
Cancelling the parent's turn cancels the call, and closing the client kills the child's
whole process group; disposing the row closes any child still running, and on Linux a
killed parent takes its children with it (the SDK's parent-death signal).
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsh._version import __version__

from dsh_runtime.plugin import Capability, Manifest, Plugin, Registrar, RuntimeContext
from dsh_runtime.subagents.environment import child_environment
from dsh_runtime.tools.base import ToolContext, ToolResult

logger = logging.getLogger("dsh.subagent")

STARTED = "subagent.started"
FINISHED = "subagent.finished"
DEFAULT_PROFILE = "sdk-minimal"


class SubagentTool:
    """``subagent {task}``: run ``task`` in a fresh sub-agent session, answer its result.

    Mutating (the child may change files) with no path arguments: the child works in the
    parent session's directory under its own workspace policy, so the parent's policy
    treats the call as confined to the working directory.
    """

    name = "subagent"
    description = (
        "Delegate a self-contained task to a sub-agent: a separate agent with its own "
        "conversation, working in the current directory with its own tools. It sees only "
        "`task`, so include everything it needs; the answer is its final message."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1,
                     "description": "The complete instructions for the sub-agent."},
        },
        "required": ["task"],
        "additionalProperties": False,
    }
    mutating = True
    path_arguments: tuple[str, ...] = ()

    def __init__(self, plugin: SubagentPlugin) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Start the child, run the task in one session, report, close the child."""
        return await self._plugin.run(args["task"], ctx)


class SubagentPlugin(Plugin):
    """Plugin row ``subagent-dsh``: registers the ``subagent`` tool."""

    manifest = Manifest(
        id="subagent-dsh",
        version=__version__,
        capabilities=frozenset({Capability.TOOL}),
        description="The subagent tool: runs a task in a nested dsh runtime (isolated home, "
                    "scrubbed environment) and answers its final text.",
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
            },
            "additionalProperties": False,
        },
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._rt: RuntimeContext | None = None
        self._clients: set[Any] = set()

    def apply(self, reg: Registrar) -> None:
        """Register the tool."""
        reg.tool(SubagentTool(self))

    async def start(self, rt: RuntimeContext) -> None:
        """Keep the runtime context: the agent, the sessions service and the home."""
        self._rt = rt

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New settings apply to the next sub-agent; running ones keep theirs."""
        self.config = config
        return True

    async def dispose(self) -> None:
        """Close every child still running: none outlives its parent runtime."""
        for client in list(self._clients):
            await client.close()

    # -- one call ------------------------------------------------------------------------

    async def run(self, task: str, ctx: ToolContext) -> ToolResult:
        """The tool call: see the module docstring for what the child gets."""
        from dsh.sdk import AsyncDshClient

        rt = self._rt
        if rt is None:
            return ToolResult("Error: the subagent tool is not started", is_error=True)
        agent = rt.service("agent")
        store = rt.service("sessions") if "sessions" in rt.service_names() else None
        parent = ctx.session_id
        home = self._child_home(rt, store, parent)
        client = AsyncDshClient(self._client_config(ctx, home))
        child: str | None = None
        status = "error"
        self._clients.add(client)
        try:
            try:
                await client.start()
                session = await client.new_session(cwd=ctx.cwd)
            except Exception as exc:
                logger.warning("sub-agent of session %s did not start", parent, exc_info=True)
                return ToolResult(f"Error: the sub-agent did not start: {exc}", is_error=True)
            child = session.id
            if store is not None:
                store.acquire_workspace(child, parent)
            agent.announce(STARTED, {"parentSessionId": parent, "childSessionId": child})
            status = "cancelled"  # until the run returns
            result = await session.run(task)
            status = result.stop_reason or "error"
            if status == "completed":
                return ToolResult(result.final_text)
            return ToolResult(_failure(status, result), is_error=True)
        except Exception as exc:
            status = "error"
            logger.warning("sub-agent %s of session %s failed", child, parent, exc_info=True)
            return ToolResult(f"Error: the sub-agent failed: {exc}", is_error=True)
        finally:
            try:
                await client.close()
            finally:
                self._clients.discard(client)
                if child is not None:
                    if store is not None:
                        store.release_workspace(child, parent)
                    agent.announce(FINISHED, {"parentSessionId": parent,
                                              "childSessionId": child, "status": status})

    def _child_home(self, rt: RuntimeContext, store: Any, parent: str) -> Path:
        """A fresh, private home under the parent session's workspace."""
        if store is not None:
            workspace = Path(store.acquire_workspace(parent))
        else:
            workspace = Path(rt.home) / "workspaces" / parent
        home = workspace / "subagents" / uuid.uuid4().hex[:12] / "home"
        os.makedirs(home, mode=0o700)
        return home.resolve()

    def _client_config(self, ctx: ToolContext, home: Path) -> Any:
        from dsh.carriers import running_frozen
        from dsh.sdk import ClientConfig

        config, rt = self.config, self._rt
        assert rt is not None
        patches = [os.path.join(rt.cwd, p) for p in config.get("patches", ())]
        timeout = float(config.get("initialize_timeout_s", 60))
        return ClientConfig(
            dsh_bin=sys.executable if running_frozen() else None,
            carrier="exe" if running_frozen() else "python",
            profile=config.get("profile", DEFAULT_PROFILE),
            patches=patches,
            dsh_home=str(home),
            cwd=ctx.cwd,
            env=child_environment(ctx.env, config.get("pass_env", ())),
            inherit_env=False,
            provider=config.get("provider"),
            model=config.get("model"),
            initialize_timeout=timeout,
            stderr=lambda line: logger.debug("[subagent] %s", line),
        )


def _failure(status: str, result: Any) -> str:
    """The tool error for a child run that did not complete, with the child's reason."""
    reason = ""
    for event in reversed(result.events):
        if event.type == "turn/end":
            error = (event.data.get("reason") or {}).get("error") or {}
            reason = error.get("message", "")
            break
    text = f"Error: the sub-agent stopped ({status})"
    if reason:
        text += f": {reason}"
    if result.final_text:
        text += f"\nIts last message: {result.final_text}"
    return text
