"""The SDK server: the ``sdk`` and ``sdk-minimal`` applications' ``main`` command.

It speaks the SDK protocol (docs/contracts.md) on the process's stdio: the DeepSeek
Harness SDK runtime protocol, wire-compatible so that its published Python client can
drive dsh unchanged, plus dsh's own methods. It is a thin adapter: every method becomes
one call on the ``agent`` service, every agent notification becomes one frame. Framing,
concurrency and error answers belong to the peer (:mod:`.jsonrpc_server`), so nothing
here sees bytes.

The client must call ``initialize`` first; until then every other request but ``shutdown``
and ``runtime/status`` fails with -32002. ``shutdown`` answers ``{}`` and ends the command,
after which the runtime disposes everything and exits 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh._version import __version__
from dsh.core import jsonrpc
from dsh.core.errors import (
    DshError,
    JsonRpcError,
    NotInitializedError,
    PluginError,
    UsageError,
)
from dsh.core.jsonrpc import Params
from dsh.core.peer import Handler, Peer
from dsh.runtime.agent.toolrun import Approval
from dsh.runtime.kernel.plugin import (
    Capability,
    Command,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)
from dsh.runtime.servers import validation
from dsh.runtime.servers.jsonrpc_server import serve_stdio, server_peer
from dsh.runtime.servers.operations import Operations, RuntimeView
from dsh.runtime.servers.validation import params_object as _object
from dsh.runtime.servers.validation import session_id as _session_id
from dsh.runtime.servers.validation import string as _str

SERVER_NAME = "dsh-sdk-runtime"
PROTOCOL_VERSION = 1
DEFAULT_APPROVAL_TIMEOUT_S = 120.0

HELP = """\
usage: dsh --profile sdk [-h]

The SDK runtime: JSON-RPC 2.0 on stdin/stdout, one UTF-8 message per line (frames up to
16 MiB by default, config `max_frame_bytes`); stdout carries only frames, logs go to
stderr. It is meant to be spawned by an SDK client (dsh.sdk, or the DeepSeek Harness
SDK's client given `dsh` as its runtime), not used by hand.

client -> server requests
  initialize {cwd, provider?, model?, reasoningEffort?, maxTokens?, clientInfo?,
              capabilities?: {approvals?}}   -> {serverInfo, protocolVersion, profile}
      reasoningEffort: none|off (thinking off), minimal, low, medium, high, xhigh, max,
      ultra; an unknown level, or one the route cannot send, is -32602
  session/prompt {sessionId, contentBlocks, _meta?}  -> {messageId}; the turn runs in
      background (``_meta.traceparent``/``tracestate``: the turn's W3C trace parent)
  session/new {cwd?, history?} -> {sessionId}  (history: messages the session starts with)
      mcpServers?: [{name, command, args, env: [{name, value}]} | {type: "http", name,
      url, headers: [{name, value}]}]  (ACP's shape; needs an mcp-servers row)
  session/cancel {sessionId} -> {cancelled}
  session/resume {sessionId} -> {}
  session/list {sessionId?, workspace?, limit?} -> {sessions}   (summaries; sorted by id,
      or with limit the ones updated last, newest first)
  session/history {sessionId, cursor?, limit?} -> {events, nextCursor}  (pages of at
      most limit events, default 1000, and 4 MiB; nextCursor null at the end)
  session/working-directory/get {sessionId}
  session/compact {sessionId} -> {compacted, removedCount, keptCount, tokensBefore, ...}
  session/working-directory/set {sessionId, path} -> {cwd}
  session/mode/get {sessionId} -> {mode, availableModes}
  session/mode/set {sessionId, mode: "default" | "plan"} -> {mode}   (with a tools-plan row)
  session/settings/get {sessionId} -> {provider, model, reasoningEffort, contextWindow,
      policy, policyDefault, policyModes, remembered}
  session/model/set {sessionId, provider?, model?, reasoningEffort?} -> settings
      (from the session's next turn; checked now like initialize; null: the default)
  session/policy/set {sessionId, mode: workspace|ask|allow-all|deny-mutating|null}
      -> settings          session/approvals/forget {sessionId} -> settings
  session/changes {sessionId} -> {changes: [{path, tool, callId, turn, seq, diff?}], files}
  session/usage {sessionId} -> {inputTokens, outputTokens, cacheHitTokens, ..., costUsd,
      turns, contextTokens, contextWindow}
  session/shell {sessionId, command} -> {output, isError}  (the user's own command, run
      by the session's shell tool and sandbox; the model reads it with the next prompt)
  tools/list -> {tools}   config/get -> {config}   runtime/status -> {state, ...}
  models/list -> {routes: [{provider, models}]}  (each route, the models it names)
  shutdown -> {} and the runtime exits 0
server -> client
  notifications: session.event {sessionId, event}, session.status {sessionId, status},
                 (the model's reasoning: event assistant/reasoning-delta, and a
                 "reasoning" block of assistant/message, never in its text)
                 subagent.started, subagent.status, subagent.finished,
                 config.reloaded {diff}, config.reload_failed {file?, message}
                 (live profiles, when the profile's or the home's patch.yml changes)
  request: approval/request {sessionId, toolCall} -> {decision: "allow" | "deny",
           remember?: "session", note?}   (only to clients that declared
           capabilities.approvals; timeout -> deny; remember: the same answer for the
           tool's later calls in the session; note: what the model reads of a denial)

Every request but shutdown and runtime/status before initialize fails with -32002.
stdin EOF or SIGTERM: clean exit 0; SIGINT: 130; a second signal exits at once.
"""

_UNGATED = frozenset({"initialize", "shutdown", "runtime/status"})


# -- the plugin ----------------------------------------------------------------------------


class SdkServer(Plugin):
    """Registers the ``main`` command that serves the SDK protocol until EOF or shutdown."""

    manifest = Manifest(
        id="sdk-jsonrpc-server",
        version=__version__,
        capabilities=frozenset({Capability.COMMAND}),
        description="The SDK JSON-RPC server on stdio (DeepSeek Harness SDK compatible).",
        config_schema={
            "type": "object",
            "properties": {
                "max_frame_bytes": {"type": "integer", "minimum": 1024},
                "approval_timeout_s": {"type": "number", "minimum": 0},
            },
            "additionalProperties": False,
        },
        requires=("agent",),
    )

    def apply(self, reg: Registrar) -> None:
        """Register ``main``; nothing starts until the launcher runs it."""
        reg.command(Command("main", HELP, self._main))

    async def _main(self, rt: RuntimeContext, argv: list[str]) -> int:
        """Serve one client on the reserved stdio until EOF, ``shutdown`` or a signal."""
        if argv:
            raise UsageError(f"the SDK runtime takes no arguments (got {argv[0]!r})")
        from dsh.runtime.servers.terminal import FOR_PEOPLE  # said only at a terminal

        view = RuntimeView.of(rt)
        max_frame = int(self.config.get("max_frame_bytes", jsonrpc.DEFAULT_MAX_FRAME_BYTES))
        peer = server_peer()
        timeout = float(self.config.get("approval_timeout_s", DEFAULT_APPROVAL_TIMEOUT_S))
        protocol = SdkProtocol(peer, rt.service("agent"), view, timeout,
                               config_state=getattr(rt, "config_state", None),
                               services=rt.service, max_frame_bytes=max_frame)
        peer.methods(protocol.table())
        try:
            await serve_stdio(peer, max_frame, hint=(
                f"dsh --profile {rt.profile} speaks JSON-RPC on stdin, for programs (the "
                f"Python SDK, dsh.sdk); {FOR_PEOPLE}"))
        finally:
            protocol.close()
        return 0


def _no_services(name: str) -> Any:
    raise PluginError(f"no service '{name}'")


class SdkProtocol:
    """The SDK methods of one connection, each a thin call on the ``agent`` service."""

    def __init__(
        self, peer: Peer, agent: Any, view: RuntimeView, approval_timeout: float,
        *, config_state: Any = None, services: Callable[[str], Any] | None = None,
        max_frame_bytes: int = jsonrpc.DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self._peer = peer
        self._max_frame_bytes = max_frame_bytes  # history pages fit in one frame
        # Looked up only for a session/new with mcpServers (the mcp-servers row's service).
        self._services = services
        # Live reload events (dsh.runtime.kernel.configstate) are forwarded once initialized.
        self._config_state = config_state
        self._agent = agent
        self._ops = Operations(agent, view)
        self._view = view
        self._approval_timeout = approval_timeout
        self._cwd: str | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._unsubscribe_config: Callable[[], None] | None = None
        self._approver_installed = False
        self._state = "uninitialized"

    def table(self) -> dict[str, Handler]:
        """The method table, with the -32002 gate in front of everything that needs it."""
        methods: dict[str, Handler] = {
            "initialize": self.initialize,
            "shutdown": self.shutdown,
            "runtime/status": self.status,
            "session/prompt": self.prompt,
            "session/resume": self.resume,
            "session/working-directory/get": self.get_cwd,
            "session/working-directory/set": self.set_cwd,
            "session/new": self.new_session,
            "session/cancel": self.cancel,
            "session/list": self.list_sessions,
            "session/history": self.history,
            "session/compact": self.compact,
            "session/mode/get": self.get_mode,
            "session/mode/set": self.set_mode,
            "session/settings/get": self.get_settings,
            "session/model/set": self.set_model,
            "session/policy/set": self.set_policy,
            "session/approvals/forget": self.forget_decisions,
            "session/changes": self.changes,
            "session/usage": self.usage,
            "session/shell": self.shell,
            "tools/list": self.tools,
            "models/list": self.models,
            "config/get": self.config,
        }
        return {
            name: self._checked(fn, gated=name not in _UNGATED) for name, fn in methods.items()
        }

    def _checked(self, fn: Handler, *, gated: bool) -> Handler:
        """``fn`` behind the -32002 gate (unless ungated) and the params-object check, so
        no method sees positional params (every method here takes named ones)."""
        async def checked(params: Params | None) -> Any:
            if gated and self._cwd is None:
                raise NotInitializedError("not initialized: call initialize")
            _object(params)
            return await fn(params)

        return checked

    def close(self) -> None:
        """Detach from the agent: no more frames to a connection that is gone."""
        for unsubscribe in (self._unsubscribe, self._unsubscribe_config):
            if unsubscribe is not None:
                unsubscribe()
        self._unsubscribe = self._unsubscribe_config = None
        if self._approver_installed:
            self._agent.set_approver(None)
            self._approver_installed = False

    # -- lifecycle -----------------------------------------------------------------------

    async def initialize(self, params: Params | None) -> dict[str, Any]:
        """Configure the agent (validated now, so a bad route fails before any prompt)."""
        if self._cwd is not None:
            raise JsonRpcError(jsonrpc.INVALID_REQUEST, "already initialized")
        p = _object(params)
        cwd = validation.directory(p.get("cwd"))
        max_tokens = p.get("maxTokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise JsonRpcError(jsonrpc.INVALID_PARAMS, '"maxTokens" must be a positive integer')
        for name in ("clientInfo", "capabilities"):
            if p.get(name) is not None and not isinstance(p[name], dict):
                raise JsonRpcError(jsonrpc.INVALID_PARAMS, f'"{name}" must be an object')
        self._agent.configure(
            provider=_str(p, "provider", required=False),
            model=_str(p, "model", required=False),
            reasoning_effort=_str(p, "reasoningEffort", required=False),
            max_tokens=max_tokens,
        )
        self._cwd = cwd
        self._state = "ready"
        self._unsubscribe = self._agent.add_listener(self._forward)
        if self._config_state is not None:
            self._unsubscribe_config = self._config_state.add_listener(self._forward)
        if (p.get("capabilities") or {}).get("approvals") is True:
            self._agent.set_approver(self._ask_client)
            self._approver_installed = True
        return {
            "serverInfo": {"name": SERVER_NAME, "version": __version__},
            "protocolVersion": PROTOCOL_VERSION,
            "profile": {"name": self._view.profile, "patchReload": self._view.patch_reload},
        }

    def _forward(self, method: str, params: dict[str, Any]) -> None:
        """An agent or reload notification to the client; one it cannot get (gone, or
        too large a frame) is dropped, never raised into the agent."""
        self._peer.notify(method, params, quiet=True)

    async def shutdown(self, params: Params | None) -> dict[str, Any]:
        """Answer ``{}``; the peer stops once this answer is out."""
        self._state = "shutting-down"
        self._peer.stop()
        return {}

    async def status(self, params: Params | None) -> dict[str, Any]:
        """Readiness, and whether a layer file changed since boot (a restart applies it)."""
        return self._ops.status(self._state)

    # -- sessions ------------------------------------------------------------------------

    async def prompt(self, params: Params | None) -> dict[str, Any]:
        """Queue the message and answer with its id at once; the turn runs in background."""
        p = _object(params)
        message_id = await self._ops.prompt(_session_id(p), p.get("contentBlocks"), self._cwd,
                                            p.get("_meta"))
        return {"messageId": message_id}

    async def new_session(self, params: Params | None) -> dict[str, Any]:
        """Create a session now (``session/prompt`` also creates one on first use);
        ``history`` seeds it with a copy of another conversation (a forked sub-agent)."""
        p = _object(params)
        cwd = _str(p, "cwd", required=False)
        attach = None
        if p.get("mcpServers") is not None:
            from dsh.runtime.mcp.plugin import attach_servers

            attach = attach_servers(self._services or _no_services, p["mcpServers"])
        session_id = await self._ops.new_session(cwd, self._cwd, history=p.get("history"))
        if attach is not None:
            attach(session_id, self._agent.get_cwd(session_id))
        return {"sessionId": session_id}

    async def resume(self, params: Params | None) -> dict[str, Any]:
        """Restore persisted history; missing or busy sessions fail."""
        await self._ops.resume(_session_id(params))
        return {}

    async def cancel(self, params: Params | None) -> dict[str, Any]:
        """Cancel the running turn (its ``turn/end`` says ``cancelled``)."""
        return {"cancelled": await self._ops.cancel(_session_id(params))}

    async def get_cwd(self, params: Params | None) -> dict[str, Any]:
        """The session's working directory (a stored session is loaded, a new id created)."""
        session_id = _session_id(params)
        await self._ops.open_session(session_id, self._cwd)
        return {"cwd": self._agent.get_cwd(session_id)}

    async def set_cwd(self, params: Params | None) -> dict[str, Any]:
        """Change the session's working directory (relative paths from the current one);
        like ``get``, it loads a stored session or creates a new one first."""
        p = _object(params)
        session_id = _str(p, "sessionId")
        path = _str(p, "path")
        await self._ops.open_session(session_id, self._cwd)  # type: ignore[arg-type]
        return {"cwd": self._agent.set_cwd(session_id, path)}

    async def list_sessions(self, params: Params | None) -> dict[str, Any]:
        """Every known session, sorted by id (or narrowed: ``sessionId``, ``workspace``,
        ``limit`` newest first)."""
        return {"sessions": self._ops.list_sessions(_object(params))}

    async def compact(self, params: Params | None) -> dict[str, Any]:
        """Summarise the session's older history now (idle sessions only)."""
        return await self._agent.compact(_session_id(params))

    async def get_mode(self, params: Params | None) -> dict[str, Any]:
        """The session's mode and the modes there are."""
        return await self._ops.mode(_session_id(params))

    async def set_mode(self, params: Params | None) -> dict[str, Any]:
        """Switch the session between ``default`` and ``plan`` (read-only until approved)."""
        p = _object(params)
        return await self._ops.set_mode(_session_id(p), _str(p, "mode"))

    async def get_settings(self, params: Params | None) -> dict[str, Any]:
        """What the session's next turn and tool calls use."""
        return await self._ops.settings(_session_id(params))

    async def set_model(self, params: Params | None) -> dict[str, Any]:
        """Switch route, model or effort from the session's next turn on."""
        p = _object(params)
        return await self._ops.set_model(_session_id(p), p)

    async def set_policy(self, params: Params | None) -> dict[str, Any]:
        """Switch the session's policy mode (``mode`` null: the profile's)."""
        p = _object(params)
        if "mode" not in p:
            raise JsonRpcError(jsonrpc.INVALID_PARAMS, '"mode" is required (null: the '
                               "profile's own)")
        return await self._ops.set_policy(_session_id(p), p["mode"])

    async def forget_decisions(self, params: Params | None) -> dict[str, Any]:
        """Forget the session's remembered approvals."""
        return await self._ops.forget_decisions(_session_id(params))

    async def changes(self, params: Params | None) -> dict[str, Any]:
        """The files the session's tools changed, with their diffs."""
        return self._ops.changes(_session_id(params))

    async def usage(self, params: Params | None) -> dict[str, Any]:
        """The session's usage and cost so far."""
        return self._ops.usage(_session_id(params))

    async def shell(self, params: Params | None) -> dict[str, Any]:
        """Run the user's own shell command in the session."""
        p = _object(params)
        return await self._ops.shell(_session_id(p), p.get("command"))

    async def history(self, params: Params | None) -> dict[str, Any]:
        """A page of the session's log (``cursor``, ``limit``): ``{events, nextCursor}``."""
        p = _object(params)
        return self._ops.history(_session_id(p), p, max_frame_bytes=self._max_frame_bytes)

    # -- introspection -------------------------------------------------------------------

    async def tools(self, params: Params | None) -> dict[str, Any]:
        """Name, description and JSON Schema parameters of every registered tool."""
        return {"tools": self._ops.tools()}

    async def models(self, params: Params | None) -> dict[str, Any]:
        """Each provider route and the models it names (its default first)."""
        return {"routes": self._ops.models()}

    async def config(self, params: Params | None) -> dict[str, Any]:
        """The effective tree as composed, secret-looking values masked by the launcher."""
        return {"config": self._ops.config()}

    # -- approvals -----------------------------------------------------------------------

    async def _ask_client(self, session_id: str, tool_call: dict[str, Any]) -> Approval:
        """Ask the client; no answer in time, a bad answer or a lost client all deny."""
        try:
            answer = await self._peer.request(
                "approval/request",
                {"sessionId": session_id, "toolCall": tool_call},
                timeout=self._approval_timeout,
            )
        except DshError:  # RequestTimeoutError included
            return Approval("deny")
        return validation.approval_answer(answer)

