"""The ACP server: the ``acp`` application's ``main`` command (Agent Client Protocol v1).

An editor (the ACP *client*) spawns ``dsh --profile acp`` and speaks JSON-RPC 2.0 on its
stdio, one message per line. Like the SDK server this is a thin adapter over the
``agent`` service: each ACP method is one or two agent calls, each agent event becomes
zero or more ``session/update`` notifications (the mapping is :mod:`.acp_mapping`), and
framing, concurrency and error answers belong to the peer (:mod:`.jsonrpc_server`), whose
``request`` (with its timeout) is also how the client is asked anything.

Where ACP and the agent differ in shape:

* ``session/prompt`` answers when its turn ends (``{stopReason}``), where the agent
  answers a message id at once; the server waits for the session's ``turn/end``. One
  prompt per session at a time: a second one while a turn runs is -32001 (retryable).
* ``session/cancel`` is a notification. The turn ends with ``stopReason: "cancelled"``;
  a cancel that arrives before the queued turn has started is applied at its
  ``turn/start``, so it is never lost.
* Guarded tool calls go to the client as ``session/request_permission``; "always"
  answers are remembered per session and tool by the agent (:mod:`dsh.runtime.agent.
  choices`, shared with the SDK's and the web's approvals); a cancelled outcome, an
  error answer, a timeout or a lost client all deny. A call that reaches outside the
  workspace root (``outside`` in the agent's request) is the exception: the tool memory
  never answers it, and its ``allow_always`` option ("Always allow access to DIR in this
  session") grants those directories to the session instead, so one "always" for
  ``../lib`` does not open every other path to the same tool.
* Events are forwarded only for sessions this connection created or loaded, so a
  session being restored does not leak half its log before ``session/load`` replays it.

* A client that advertises ``fs.readTextFile``, ``fs.writeTextFile`` or ``terminal`` in
  ``initialize`` does that work for its sessions' tools (:mod:`.acp_client`): file reads
  and writes go through ``fs/*`` after dsh's own path checks, so an unsaved buffer is
  what the model reads; ``bash`` runs in the client's terminal as ``dsh sandbox ... --
  bash -c COMMAND`` (the shell policy's launcher, never the raw command), embedded in
  the tool call. Without them, dsh does it all itself.
* A permission answer that is not ``{outcome: {outcome: "selected", optionId: <one of
  the options offered>}}`` denies the call (and is logged), whatever its shape.

MCP servers given to ``session/new`` or ``session/load`` (stdio and http) are connected
for that session by the ``mcp-servers`` row (:mod:`dsh.runtime.mcp`); without that row
they are -32602.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh._version import __version__
from dsh.core import jsonrpc
from dsh.core.errors import (
    DshError,
    JsonRpcError,
    PluginError,
    ProtocolError,
    SessionBusyError,
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
from dsh.runtime.providers.base import EFFORTS
from dsh.runtime.servers import validation
from dsh.runtime.servers.acp_client import AcpClientSide, Capabilities, terminal_content
from dsh.runtime.servers.acp_mapping import (
    UpdateMapper,
    clipped,
    prompt_blocks,
    selected_option,
    stop_reason,
    text_content,
    tool_call_update,
)
from dsh.runtime.servers.jsonrpc_server import serve_stdio, server_peer
from dsh.runtime.servers.validation import params_object as _object
from dsh.runtime.tools import confine
from dsh.runtime.tools.policy import MODES as POLICY_MODES


def _str(params: Mapping[str, Any], name: str) -> str:
    return validation.string(params, name)  # type: ignore[return-value]

PROTOCOL_VERSION = 1
AGENT_NAME = "dsh"
DEFAULT_PERMISSION_TIMEOUT_S = 600.0
DEFAULT_CLIENT_TIMEOUT_S = 30.0

log = logging.getLogger("dsh.acp")

HELP = """\
usage: dsh --profile acp [-h]

An Agent Client Protocol (ACP) v1 agent on stdin/stdout: JSON-RPC 2.0, one UTF-8 message
per line (frames up to 16 MiB by default, config `max_frame_bytes`); stdout carries only
frames, logs go to stderr. It is meant to be spawned by an ACP client (an editor), not
used by hand.

client -> agent
  initialize {protocolVersion, clientCapabilities?, clientInfo?}
      -> {protocolVersion: 1, agentCapabilities, authMethods: [], agentInfo}
  authenticate {methodId} -> {}            (no authentication methods are offered)
  session/new {cwd (absolute), mcpServers} -> {sessionId}
  session/load {sessionId, cwd, mcpServers} -> {} after replaying the history
  session/prompt {sessionId, prompt: [content blocks]} -> {stopReason} when the turn ends
  session/cancel {sessionId}               (notification: the turn stops, "cancelled")
  session/set_mode {sessionId, modeId} -> {}   (modes "default" and "plan", with a
      tools-plan row: session/new and session/load then answer `modes` too)
  session/set_config_option {sessionId, configId, value} -> {configOptions}: "model"
      (ROUTE/MODEL), "thought_level" (the reasoning effort) and "policy" (workspace, ask,
      allow-all, deny-mutating), each "default" for the profile's; session/new and
      session/load answer `configOptions` too
agent -> client
  session/update {sessionId, update}       (message chunks, tool calls, usage, title)
  session/request_permission {sessionId, toolCall, options} for guarded tool calls
      (config `permission_timeout_s`, default 600; no answer in time denies)
  fs/read_text_file, fs/write_text_file   when the client advertised clientCapabilities.fs:
      the file tools read (unsaved buffers included) and write through the client
  terminal/create, /wait_for_exit, /output, /kill, /release   when it advertised terminal:
      bash runs there as `dsh sandbox ... -- bash -c COMMAND` (the shell policy's launcher)
      (config `client_timeout_s`, default 30, bounds each of these requests)

Prompts take text, resource links and embedded resources; not images or audio. MCP
servers (stdio, http) are connected per session. stdin EOF or SIGTERM: clean exit 0;
SIGINT: 130; a second signal exits at once.
"""

AGENT_CAPABILITIES = {
    "loadSession": True,
    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
    "mcpCapabilities": {"http": True, "sse": False},
}

PERMISSION_OPTIONS = (
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow this tool in this session",
     "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Always reject this tool in this session",
     "kind": "reject_always"},
)
_DECISIONS = {"allow_once": Approval("allow"), "allow_always": Approval("allow", True),
              "reject_once": Approval("deny"), "reject_always": Approval("deny", True)}
_UNGATED = frozenset({"initialize", "authenticate"})


DEFAULT_VALUE = "default"
"""A config option's value meaning "the profile's own" (the route's default effort...)."""


def _choice(value: str, name: str) -> dict[str, str]:
    return {"value": value, "name": name}


def _select(option_id: str, name: str, category: str | None, current: str,
            options: list[dict[str, str]]) -> dict[str, Any]:
    """An ACP select config option."""
    option: dict[str, Any] = {"id": option_id, "name": name, "type": "select",
                              "currentValue": current, "options": options}
    if category is not None:
        option["category"] = category
    return option


def _options(outside: Any) -> list[dict[str, str]]:
    """The permission options of one request; a call reaching outside the workspace root
    offers "always" for the directories it reaches, not for the tool."""
    options = [dict(o) for o in PERMISSION_OPTIONS]
    if outside:
        dirs = ", ".join(confine.grant_dirs(outside))
        options[1]["name"] = f"Always allow access to {dirs} in this session"
    return options


# -- params --------------------------------------------------------------------------------


def _cwd(params: Mapping[str, Any]) -> str:
    """ACP requires an absolute ``cwd``; it must also be an existing directory here."""
    return validation.directory(params.get("cwd"))


def _mcp_servers(params: Mapping[str, Any]) -> list[Any]:
    servers = params.get("mcpServers", [])
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise JsonRpcError(jsonrpc.INVALID_PARAMS, '"mcpServers" must be an array of objects')
    return servers


# -- the plugin ----------------------------------------------------------------------------


class AcpServer(Plugin):
    """Registers the ``main`` command that serves ACP until EOF or a signal."""

    manifest = Manifest(
        id="acp-server",
        version=__version__,
        capabilities=frozenset({Capability.COMMAND}),
        description="The Agent Client Protocol (ACP) v1 agent on stdio.",
        config_schema={
            "type": "object",
            "properties": {
                "max_frame_bytes": {"type": "integer", "minimum": 1024},
                "permission_timeout_s": {"type": "number", "minimum": 0},
                "client_timeout_s": {"type": "number", "minimum": 0.1,
                                     "description": "Bound of each fs/* and terminal/* "
                                                    "request to the client (default 30)."},
            },
            "additionalProperties": False,
        },
        requires=("agent",),
    )

    def apply(self, reg: Registrar) -> None:
        """Register ``main``; nothing starts until the launcher runs it."""
        reg.command(Command("main", HELP, self._main))

    async def _main(self, rt: RuntimeContext, argv: list[str]) -> int:
        """Serve one client on the reserved stdio until EOF or a signal."""
        if argv:
            raise UsageError(f"the ACP agent takes no arguments (got {argv[0]!r})")
        from dsh.runtime.servers.terminal import FOR_PEOPLE  # said only at a terminal

        max_frame = int(self.config.get("max_frame_bytes", jsonrpc.DEFAULT_MAX_FRAME_BYTES))
        peer = server_peer()
        timeout = float(self.config.get("permission_timeout_s", DEFAULT_PERMISSION_TIMEOUT_S))

        def modes() -> Any:
            try:
                return rt.service("modes")
            except PluginError:
                return None

        protocol = AcpProtocol(peer, rt.service("agent"), timeout, modes=modes,
                               services=rt.service,
                               client_timeout=float(self.config.get(
                                   "client_timeout_s", DEFAULT_CLIENT_TIMEOUT_S)))
        peer.methods(protocol.table())
        peer.on_notification("session/cancel", protocol.cancel)
        try:
            await serve_stdio(peer, max_frame, hint=(
                f"dsh --profile {rt.profile} is an ACP agent speaking JSON-RPC on stdin, for "
                f"editors (programs use the Python SDK, dsh.sdk); {FOR_PEOPLE}"))
        finally:
            protocol.close()
        return 0


@dataclass
class _Prompt:
    """The ``session/prompt`` waiting for its turn to end."""

    ended: asyncio.Future[Mapping[str, Any]]
    turn_started: bool = False
    cancel_requested: bool = False


@dataclass
class _Attached:
    """A session this connection created or loaded: what its updates and prompts need."""

    mapper: UpdateMapper
    mcp_servers: list[Any]
    prompt: _Prompt | None = None
    client: AcpClientSide | None = None  # what the client does for the tools, if anything
    terminals: dict[str, str] = field(default_factory=dict)  # call id -> terminal id


class AcpProtocol:
    """The ACP methods of one connection over the ``agent`` service."""

    def __init__(self, peer: Peer, agent: Any, permission_timeout: float, *,
                 modes: Callable[[], Any] = lambda: None,
                 services: Callable[[str], Any] | None = None,
                 client_timeout: float = DEFAULT_CLIENT_TIMEOUT_S) -> None:
        self._peer = peer
        self._client_timeout = client_timeout
        self._caps = Capabilities()
        self._services = services  # for the mcp-servers row's service, when mcpServers come
        self._agent = agent
        self._modes = modes  # the session-modes service of the running tree, or None
        self._permission_timeout = permission_timeout
        self._initialized = False
        self._sessions: dict[str, _Attached] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unsubscribe: Any = None

    def table(self) -> dict[str, Handler]:
        """The method table; everything but the handshake needs ``initialize`` first."""
        methods: dict[str, Handler] = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/prompt": self.prompt,
            "session/set_mode": self.set_mode,
            "session/set_config_option": self.set_config_option,
        }
        return {name: self._checked(fn, gated=name not in _UNGATED)
                for name, fn in methods.items()}

    def _checked(self, fn: Handler, *, gated: bool) -> Handler:
        """``fn`` behind the ``initialize`` gate (unless ungated) and the params-object
        check: every ACP method takes named params."""
        async def checked(params: Params | None) -> Any:
            if gated and not self._initialized:
                raise JsonRpcError(jsonrpc.INVALID_REQUEST, "not initialized: call initialize")
            _object(params)
            return await fn(params)

        return checked

    def close(self) -> None:
        """Detach from the agent: no more frames or questions to a connection that is gone."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
            self._agent.set_approver(None)
            self._agent.set_client_side(None)
        for task in self._tasks:
            task.cancel()

    # -- handshake -----------------------------------------------------------------------

    async def initialize(self, params: Params | None) -> dict[str, Any]:
        """Negotiate version 1 (the only one there is) and say what dsh really supports."""
        p = _object(params)
        version = p.get("protocolVersion")
        # An integer (uint16) in ACP v1; early drafts sent a version string, which the
        # reference SDKs still read (as version 0), so a string is answered with ours.
        if not (isinstance(version, str) or (isinstance(version, int) and not isinstance(
                version, bool) and 0 <= version <= 0xFFFF)):
            raise JsonRpcError(jsonrpc.INVALID_PARAMS, '"protocolVersion" is required: '
                               'an integer from 0 to 65535')
        if not isinstance(p.get("clientCapabilities", {}), dict):
            raise JsonRpcError(jsonrpc.INVALID_PARAMS, '"clientCapabilities" must be an object')
        if self._initialized:
            raise JsonRpcError(jsonrpc.INVALID_REQUEST, "already initialized")
        self._initialized = True
        self._unsubscribe = self._agent.add_listener(self._on_agent)
        self._agent.set_approver(self._ask_client)
        self._caps = Capabilities.of(p.get("clientCapabilities"))
        if self._caps.any:
            self._agent.set_client_side(self._client_side)
        return {
            # ACP: echo a supported version, otherwise answer the latest one supported.
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": AGENT_CAPABILITIES,
            "authMethods": [],
            "agentInfo": {"name": AGENT_NAME, "title": "dsh", "version": __version__},
        }

    async def authenticate(self, params: Params | None) -> dict[str, Any]:
        """Nothing to do: no authentication methods are advertised."""
        _object(params)
        return {}

    # -- sessions ------------------------------------------------------------------------

    async def new_session(self, params: Params | None) -> dict[str, Any]:
        """Create a session working in ``cwd``."""
        p = _object(params)
        cwd, servers = _cwd(p), _mcp_servers(p)
        connect = self._mcp(servers)
        session_id = await self._agent.new_session(cwd=cwd)
        if connect is not None:
            connect(session_id, cwd)
        self._attach(session_id, cwd, servers)
        return {"sessionId": session_id, **self._mode_state(session_id),
                "configOptions": await self._config_options(session_id)}

    async def load_session(self, params: Params | None) -> dict[str, Any]:
        """Restore a stored session and replay its whole conversation before answering."""
        p = _object(params)
        session_id, cwd, servers = _str(p, "sessionId"), _cwd(p), _mcp_servers(p)
        connect = self._mcp(servers)
        attached = self._sessions.get(session_id)
        if attached is not None and attached.prompt is not None:
            raise SessionBusyError(f"session busy: '{session_id}' is running a prompt")
        await self._agent.resume(session_id)
        if self._agent.get_cwd(session_id) != cwd:
            self._agent.set_cwd(session_id, cwd)
        if connect is not None:
            connect(session_id, cwd)
        self._sessions.pop(session_id, None)  # no live updates until the replay is out
        mapper = UpdateMapper(cwd)
        for update in mapper.replay(self._agent.history(session_id)):
            self._update(session_id, update)
        self._attach(session_id, cwd, servers, mapper)
        return {**self._mode_state(session_id),
                "configOptions": await self._config_options(session_id)}

    def _mode_state(self, session_id: str) -> dict[str, Any]:
        """``{modes: SessionModeState}`` when the tree has session modes, else nothing."""
        modes = self._modes()
        return {} if modes is None else {"modes": modes.state(session_id)}

    async def set_mode(self, params: Params | None) -> dict[str, Any]:
        """``session/set_mode``: the client switches the session's mode (no update follows:
        the client knows; ``current_mode_update`` reports the agent's own switches)."""
        p = _object(params)
        session_id, mode_id = _str(p, "sessionId"), _str(p, "modeId")
        self._attached(session_id)
        modes = self._modes()
        if modes is None:
            raise JsonRpcError(jsonrpc.INVALID_PARAMS, "this agent offers no session modes")
        modes.set(session_id, mode_id)  # an unknown mode: InvalidArgumentError (-32602)
        return {}

    async def set_config_option(self, params: Params | None) -> dict[str, Any]:
        """``session/set_config_option``: switch the session's model, reasoning effort or
        policy mode (``default``: the profile's), checked now; answers every option."""
        p = _object(params)
        session_id, config_id, value = (_str(p, "sessionId"), _str(p, "configId"),
                                        _str(p, "value"))
        self._attached(session_id)
        chosen = None if value == DEFAULT_VALUE else value
        if config_id == "model":
            route, slash, model = (chosen or "").partition("/")
            if chosen is not None and not (slash and route and model):
                raise JsonRpcError(jsonrpc.INVALID_PARAMS, 'a "model" value is ROUTE/MODEL '
                                   '(or "default")')
            await self._agent.set_model(session_id, provider=route or None,
                                        model=model or None)
        elif config_id == "thought_level":
            await self._agent.set_model(session_id, reasoning_effort=chosen)
        elif config_id == "policy":
            await self._agent.set_policy(session_id, chosen)
        else:
            raise JsonRpcError(jsonrpc.INVALID_PARAMS, f"unknown config option {config_id!r} "
                               "(options: model, thought_level, policy)")
        return {"configOptions": await self._config_options(session_id)}

    async def _config_options(self, session_id: str) -> list[dict[str, Any]]:
        """The session's config options: model, reasoning effort, and (with a policy row)
        its policy mode, each with its current value."""
        settings = await self._agent.settings(session_id)
        current = f"{settings['provider']}/{settings['model']}"
        models = [_choice(f"{r['provider']}/{m}", f"{m} ({r['provider']})")
                  for r in self._agent.catalogue() for m in r["models"]]
        if current not in [m["value"] for m in models]:
            models.insert(0, _choice(current, f"{settings['model']} ({settings['provider']})"))
        options = [
            _select("model", "Model", "model", current, models),
            _select("thought_level", "Reasoning effort", "thought_level",
                    settings["reasoningEffort"] or DEFAULT_VALUE,
                    [_choice(DEFAULT_VALUE, "The route's default"),
                     *(_choice(e, e) for e in EFFORTS)]),
        ]
        if self._agent.has_guardrail("policy"):
            options.append(_select(
                "policy", "Approvals", None, settings["policy"] or DEFAULT_VALUE,
                [_choice(DEFAULT_VALUE, "The profile's policy"),
                 *(_choice(m, m) for m in POLICY_MODES)]))
        return options

    def _attach(self, session_id: str, cwd: str, servers: list[Any],
                mapper: UpdateMapper | None = None) -> None:
        client = None
        if self._caps.any:
            client = AcpClientSide(session_id, self._caps, self._ask_json,
                                   lambda call, terminal: self._embed(session_id, call, terminal),
                                   self._client_timeout)
        self._sessions[session_id] = _Attached(mapper or UpdateMapper(cwd), servers,
                                               client=client)

    def _client_side(self, session_id: str) -> AcpClientSide | None:
        """The client's offer to ``session_id``'s tools: only sessions of this connection."""
        attached = self._sessions.get(session_id)
        return None if attached is None else attached.client

    async def _ask_json(self, method: str, params: dict[str, Any],
                        timeout: float | None) -> Mapping[str, Any]:
        """One request to the client through the connection's peer; its object answer.

        Raises what the peer raises (an error answer, the connection gone) and
        TimeoutError when no answer came in ``timeout``; an answer that is not an object
        is a ProtocolError, except ``null``, which the reference clients send for the
        methods whose answer carries nothing (``fs/write_text_file``, ``terminal/kill``,
        ``terminal/release``): an empty object."""
        answer = await self._peer.request(method, params, timeout=timeout)
        if answer is None:
            return {}
        if not isinstance(answer, dict):
            raise ProtocolError(f"{method} answered {type(answer).__name__}, not an object")
        return answer

    def _embed(self, session_id: str, call_id: str, terminal_id: str) -> None:
        """Show a call's terminal in the client, and keep it shown with its result."""
        attached = self._sessions.get(session_id)
        if attached is None:
            return
        attached.terminals[call_id] = terminal_id
        self._update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                                  "status": "in_progress",
                                  "content": [terminal_content(terminal_id)]})

    def _mcp(self, servers: list[Any]) -> Callable[[str, str], None] | None:
        """Check ``mcpServers`` before the session exists; connect them once it does."""
        if not servers:
            return None
        from dsh.runtime.mcp.plugin import attach_servers

        def missing(name: str) -> Any:
            raise PluginError(f"no service '{name}'")

        return attach_servers(self._services or missing, servers)

    def _attached(self, session_id: str) -> _Attached:
        attached = self._sessions.get(session_id)
        if attached is None:
            raise JsonRpcError(jsonrpc.INVALID_PARAMS, f"unknown session '{session_id}' "
                               "(create it with session/new or load it with session/load)")
        return attached

    # -- prompt turns --------------------------------------------------------------------

    async def prompt(self, params: Params | None) -> dict[str, Any]:
        """Run one turn; updates stream meanwhile; answers ``{stopReason}`` at its end."""
        p = _object(params)
        session_id = _str(p, "sessionId")
        attached = self._attached(session_id)
        blocks = prompt_blocks(p.get("prompt"))
        if attached.prompt is not None:
            raise SessionBusyError(f"session busy: '{session_id}' is running a prompt")
        pending = _Prompt(asyncio.get_running_loop().create_future())
        attached.prompt = pending
        try:
            trace = validation.trace_context(p.get("_meta"))
            await self._agent.prompt(session_id, blocks, **({"trace": trace} if trace else {}))
            reason = await pending.ended
        finally:
            attached.prompt = None
        answer = stop_reason(reason, cancel_requested=pending.cancel_requested)
        if isinstance(answer, JsonRpcError):
            raise answer
        return {"stopReason": answer}

    def cancel(self, params: Params | None) -> None:
        """``session/cancel``: stop the session's running prompt (a notification: no answer).

        Taken on the loop's next pass: a ``session/prompt`` read in the same chunk just
        before it has then registered its turn, so a cancel right behind a prompt is
        never lost.
        """
        asyncio.get_running_loop().call_soon(self._cancel, params)

    def _cancel(self, params: Params | None) -> None:
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        attached = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if attached is None or attached.prompt is None:
            log.info("session/cancel for %r: no prompt is running", session_id)
            return
        attached.prompt.cancel_requested = True
        if attached.prompt.turn_started:
            self._spawn(self._agent.cancel(session_id))
        # Otherwise the turn is still queued: _on_agent cancels it at its turn/start.

    # -- agent -> client -----------------------------------------------------------------

    def _on_agent(self, method: str, params: dict[str, Any]) -> None:
        """Forward an attached session's events as updates; end prompts at ``turn/end``."""
        if method != "session.event":
            return
        session_id = params["sessionId"]
        attached = self._sessions.get(session_id)
        if attached is None:
            return
        event = params["event"]
        kind = event.get("type")
        if kind == "tool/call":
            attached.mapper.cwd = self._agent.get_cwd(session_id)
        for update in attached.mapper.live(event):
            call_id = update.get("toolCallId")
            terminal = attached.terminals.pop(call_id, None) \
                if kind == "tool/result" and isinstance(call_id, str) else None
            if terminal is not None:  # the result's text beside the terminal, which stays
                update["content"] = [terminal_content(terminal), *update.get("content", ())]
            self._update(session_id, update)
        pending = attached.prompt
        if pending is None:
            return
        if kind == "turn/start":
            pending.turn_started = True
            if pending.cancel_requested:
                self._spawn(self._agent.cancel(session_id))
        elif kind == "turn/end" and not pending.ended.done():
            pending.ended.set_result(event.get("data", {}).get("reason") or {})

    def _update(self, session_id: str, update: dict[str, Any]) -> None:
        self._peer.notify("session/update", {"sessionId": session_id, "update": update},
                          quiet=True)

    async def _ask_client(self, session_id: str, tool_call: dict[str, Any]) -> Approval:
        """The approver: ask the client; anything but a selected allow option denies."""
        if session_id not in self._sessions:
            return Approval("deny")
        answer = await self._permission(session_id, tool_call)
        if answer.decision == "allow":
            self._update(session_id, {"sessionUpdate": "tool_call_update",
                                      "toolCallId": tool_call["callId"],
                                      "status": "in_progress"})
        return answer

    async def _permission(self, session_id: str, tool_call: dict[str, Any]) -> Approval:
        """``session/request_permission``; an "always" option answers an Approval to
        remember (the agent keeps it: for a call outside the root, an "always allow"
        grants its directories instead)."""
        name = tool_call["name"]
        outside = tool_call.get("outside") or ()
        update = tool_call_update(tool_call["callId"], name, tool_call["arguments"],
                                  cwd=tool_call.get("cwd"), status="pending")
        if tool_call.get("reason"):
            note = text_content(f"Needs approval: {tool_call['reason']}")
            update["content"] = [{"type": "content", "content": note}]
        try:
            answer = await self._peer.request(
                "session/request_permission",
                {"sessionId": session_id, "toolCall": update,
                 "options": _options(outside)},
                timeout=self._permission_timeout,
            )
        except DshError as exc:  # RequestTimeoutError included
            log.info("permission for %s in session %s denied: %s", name, session_id, exc)
            return Approval("deny")
        option = selected_option(answer, _DECISIONS)
        if option is None:
            log.info("permission for %s in session %s denied: the answer %s is not a "
                     "selected option", name, session_id, clipped(answer))
            return Approval("deny")
        return _DECISIONS[option]

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run agent work started from a synchronous callback; failures are logged."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("cancelling failed: %s", task.exception())

