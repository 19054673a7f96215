"""The SDK methods in-process, over real pipes, against a recording stand-in agent.

The stand-in follows the ``agent`` service contract (briefs/agent-api.md) only as far as
these tests need; the real agent is driven end to end by the process and snapshot tests.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from peerkit import PipeClient, serving_peer

from dsh.core.errors import JsonRpcError
from dsh.core.peer import Peer
from dsh.runtime.agent.store import HistoryPage
from dsh.runtime.agent.toolrun import Approval
from dsh.runtime.kernel.layerfiles import LayerFingerprint
from dsh.runtime.servers.sdk import HELP, RuntimeView, SdkProtocol, SdkServer


class StandInAgent:
    """Records calls; emits the notifications a turn would, on demand."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self.approver: Callable[[str, dict[str, Any]], Awaitable[str]] | None = None
        self.cwds: dict[str, str] = {}

    def configure(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("configure", kwargs))
        if kwargs["provider"] == "nope":
            raise JsonRpcError(-32602, "unknown provider route 'nope' (registered: scripted)")
        return {"provider": kwargs["provider"] or "scripted", "model": "m"}

    def add_listener(self, fn: Callable[[str, dict[str, Any]], None]) -> Callable[[], None]:
        self.listeners.append(fn)
        return lambda: self.listeners.remove(fn)

    def emit(self, method: str, params: dict[str, Any]) -> None:
        for fn in list(self.listeners):
            fn(method, params)

    async def prompt(self, session_id: str, blocks: list[Any], *, cwd: str | None) -> str:
        self.calls.append(("prompt", (session_id, blocks, cwd)))
        self.cwds.setdefault(session_id, cwd or "/")
        self.emit("session.status", {"sessionId": session_id, "status": "running"})
        return "msg-1"

    async def new_session(self, *, cwd: str | None = None) -> str:
        self.cwds["s-new"] = cwd or "/"
        return "s-new"

    async def open_session(self, session_id: str, *, cwd: str | None = None) -> None:
        self.calls.append(("open_session", (session_id, cwd)))
        self.cwds.setdefault(session_id, cwd or "/")

    async def cancel(self, session_id: str) -> bool:
        return session_id in self.cwds

    async def resume(self, session_id: str) -> None:
        if session_id not in self.cwds:
            raise JsonRpcError(-32602, f"unknown session: {session_id}")

    def get_cwd(self, session_id: str) -> str:
        if session_id not in self.cwds:
            raise JsonRpcError(-32602, f"unknown session: {session_id}")
        return self.cwds[session_id]

    def set_cwd(self, session_id: str, path: str) -> str:
        self.cwds[session_id] = path
        return path

    def list_sessions(self, **narrow: Any) -> list[dict[str, Any]]:
        self.calls.append(("list_sessions", narrow))
        return [{"sessionId": s, "cwd": c} for s, c in sorted(self.cwds.items())]

    def history(self, session_id: str) -> list[dict[str, Any]]:
        self.get_cwd(session_id)
        return [{"type": "turn/start"}]

    def history_page(self, session_id: str, **window: int) -> HistoryPage:
        self.calls.append(("history_page", (session_id, window)))
        self.get_cwd(session_id)
        return HistoryPage([{"type": "turn/start", "seq": window["start_seq"]}],
                           None if window["start_seq"] else 1)

    def set_approver(self, fn: Any) -> None:
        self.approver = fn


def make_view(tmp_path: Path) -> RuntimeView:
    layer = tmp_path / "patch.yml"
    layer.write_text("- {id: agent, merge: {config: {}}}\n")
    tool = SimpleNamespace(name="bash", description="Run a command", parameters={"type": "object"})
    return RuntimeView(
        profile="sdk",
        patch_reload="startup",
        effective_config={"profile": "sdk", "rows": [{"id": "agent", "config": {"key": "***"}}]},
        fingerprint=LayerFingerprint([layer]),
        tools=lambda: [{"name": tool.name, "description": tool.description,
                        "parameters": tool.parameters}],
    )


Scenario = Callable[[Peer, PipeClient, StandInAgent], Awaitable[None]]


def run_sdk(tmp_path: Path, scenario: Scenario, *, approval_timeout: float = 5.0) -> StandInAgent:
    agent = StandInAgent()

    async def main() -> None:
        protocol: SdkProtocol | None = None

        def setup(peer: Peer) -> None:
            nonlocal protocol
            protocol = SdkProtocol(peer, agent, make_view(tmp_path), approval_timeout)
            peer.methods(protocol.table())

        async with serving_peer(setup) as (peer, client):
            await scenario(peer, client, agent)
        assert protocol is not None
        protocol.close()

    asyncio.run(asyncio.wait_for(main(), 20))
    return agent


async def initialize(client: PipeClient, cwd: Path, **extra: Any) -> dict[str, Any]:
    return await client.call("initialize", {"cwd": str(cwd), **extra})


def test_requests_before_initialize_fail_with_32002(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        for method in ("session/prompt", "session/list", "tools/list", "config/get"):
            answer = await client.call(method, {"sessionId": "s"})
            assert answer["error"]["code"] == -32002, method
        status = (await client.call("runtime/status"))["result"]
        assert status["state"] == "uninitialized"

    run_sdk(tmp_path, scenario)


def test_initialize_answers_and_configures(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        answer = await initialize(client, tmp_path, provider="scripted", model="m",
                                  reasoningEffort="high", maxTokens=100,
                                  clientInfo={"name": "t"})
        from dsh import __version__

        assert answer["result"] == {
            "serverInfo": {"name": "dsh-sdk-runtime", "version": __version__},
            "protocolVersion": 1,
            "profile": {"name": "sdk", "patchReload": "startup"},
        }
        again = await initialize(client, tmp_path)
        assert again["error"]["code"] == -32600

    agent = run_sdk(tmp_path, scenario)
    assert agent.calls == [("configure", {"provider": "scripted", "model": "m",
                                          "reasoning_effort": "high", "max_tokens": 100})]


@pytest.mark.parametrize(
    "params",
    [
        None,
        [1],
        {},
        {"cwd": 3},
        {"cwd": "relative"},
        {"cwd": "/definitely/not/here"},
        {"cwd": "<tmp>", "maxTokens": "many"},
        {"cwd": "<tmp>", "maxTokens": True},
        {"cwd": "<tmp>", "provider": 7},
        {"cwd": "<tmp>", "capabilities": "approvals"},
    ],
)
def test_initialize_rejects_bad_params(tmp_path: Path, params: Any) -> None:
    if isinstance(params, dict) and params.get("cwd") == "<tmp>":
        params = {**params, "cwd": str(tmp_path)}

    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        assert (await client.call("initialize", params))["error"]["code"] == -32602
        assert (await initialize(client, tmp_path))["result"]["protocolVersion"] == 1

    run_sdk(tmp_path, scenario)


def test_unknown_route_fails_initialize_and_leaves_it_open(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        answer = await initialize(client, tmp_path, provider="nope")
        assert answer["error"] == {
            "code": -32602, "message": "unknown provider route 'nope' (registered: scripted)"
        }
        assert (await client.call("session/list"))["error"]["code"] == -32002
        assert "result" in await initialize(client, tmp_path)

    run_sdk(tmp_path, scenario)


def test_prompt_answers_message_id_and_forwards_notifications(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        await initialize(client, tmp_path)
        rid = client.request("session/prompt", {
            "sessionId": "s1", "contentBlocks": [{"type": "text", "text": "hi"}]})
        frames = [await client.recv(), await client.recv()]
        assert {"jsonrpc": "2.0", "method": "session.status",
                "params": {"sessionId": "s1", "status": "running"}} in frames
        assert {"jsonrpc": "2.0", "id": rid, "result": {"messageId": "msg-1"}} in frames
        agent.emit("subagent.started", {"parentSessionId": "s1", "childSessionId": "c"})
        assert (await client.recv())["method"] == "subagent.started"

    agent = run_sdk(tmp_path, scenario)
    assert agent.calls[-1] == ("prompt", ("s1", [{"type": "text", "text": "hi"}], str(tmp_path)))
    assert agent.listeners == []  # detached when the connection ended


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("session/prompt", {"sessionId": "s", "contentBlocks": []}),
        ("session/prompt", {"sessionId": "s", "contentBlocks": "hi"}),
        ("session/prompt", {"sessionId": "s", "contentBlocks": [{"text": "no type"}]}),
        ("session/prompt", {"contentBlocks": [{"type": "text", "text": "x"}]}),
        ("session/prompt", {"sessionId": "", "contentBlocks": [{"type": "text", "text": "x"}]}),
        ("session/resume", {}),
        ("session/resume", ["s"]),
        ("session/working-directory/set", {"sessionId": "s"}),
        ("session/new", {"cwd": "/definitely/not/here"}),
        ("session/history", {"sessionId": 5}),
    ],
)
def test_wrong_params_are_32602(tmp_path: Path, method: str, params: Any) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        await initialize(client, tmp_path)
        assert (await client.call(method, params))["error"]["code"] == -32602

    run_sdk(tmp_path, scenario)


def test_session_methods(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        await initialize(client, tmp_path)
        assert (await client.call("session/new"))["result"] == {"sessionId": "s-new"}
        sub = tmp_path / "sub"
        sub.mkdir()
        assert (await client.call("session/new", {"cwd": str(sub)}))["result"] == {
            "sessionId": "s-new"}
        wd = {"sessionId": "s-new"}
        assert (await client.call("session/working-directory/get", wd))["result"] == {
            "cwd": str(sub)}
        assert (await client.call("session/working-directory/set", {**wd, "path": "/tmp"}))[
            "result"] == {"cwd": "/tmp"}
        assert (await client.call("session/resume", wd))["result"] == {}
        assert (await client.call("session/cancel", wd))["result"] == {"cancelled": True}
        assert (await client.call("session/list"))["result"] == {
            "sessions": [{"sessionId": "s-new", "cwd": "/tmp"}]}
        await client.call("session/list", {"workspace": "/tmp/", "limit": 2})
        assert [c[1] for c in agent.calls if c[0] == "list_sessions"] == [
            {"session_id": None, "workspace": None, "limit": None},
            {"session_id": None, "workspace": os.path.realpath("/tmp"), "limit": 2}]
        assert (await client.call("session/history", wd))["result"] == {
            "events": [{"type": "turn/start", "seq": 0}], "nextCursor": "1"}
        assert (await client.call("session/history", {**wd, "cursor": "1", "limit": 50_000}))[
            "result"] == {"events": [{"type": "turn/start", "seq": 1}], "nextCursor": None}
        # pages: 1000 events by default, at most 10000, and 4 MiB (half a smaller frame cap)
        assert [c[1] for c in agent.calls if c[0] == "history_page"] == [
            ("s-new", {"start_seq": 0, "limit": 1000, "max_bytes": 4 * 1024 * 1024}),
            ("s-new", {"start_seq": 1, "limit": 10_000, "max_bytes": 4 * 1024 * 1024})]
        # Any id: a new one is created in the server's directory, without a turn.
        fresh = await client.call("session/working-directory/get", {"sessionId": "ghost"})
        assert fresh["result"] == {"cwd": str(tmp_path)}
        assert ("open_session", ("ghost", str(tmp_path))) in agent.calls
        moved = await client.call("session/working-directory/set",
                                  {"sessionId": "other", "path": str(sub)})
        assert moved["result"] == {"cwd": str(sub)}
        assert ("open_session", ("other", str(tmp_path))) in agent.calls

    run_sdk(tmp_path, scenario)


def test_introspection(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        await initialize(client, tmp_path)
        tools = (await client.call("tools/list"))["result"]["tools"]
        assert tools == [{"name": "bash", "description": "Run a command",
                          "parameters": {"type": "object"}}]
        config = (await client.call("config/get"))["result"]["config"]
        assert config["rows"][0]["config"] == {"key": "***"}
        status = (await client.call("runtime/status"))["result"]
        assert status == {"state": "ready", "profile": "sdk", "patchReload": "startup",
                          "reloadRequired": False}
        (tmp_path / "patch.yml").write_text("- {id: agent, disabled: true}\n")
        status = (await client.call("runtime/status"))["result"]
        assert status["reloadRequired"] is True

    run_sdk(tmp_path, scenario)


def test_shutdown_answers_then_ends_serving(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        await initialize(client, tmp_path)
        assert (await client.call("shutdown"))["result"] == {}
        assert await client.at_eof()
        assert peer.closed

    run_sdk(tmp_path, scenario)


def test_shutdown_is_allowed_before_initialize(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        assert (await client.call("shutdown"))["result"] == {}
        assert await client.at_eof()

    run_sdk(tmp_path, scenario)


@pytest.mark.parametrize(
    ("answer", "decision"),
    [
        ({"result": {"decision": "allow"}}, Approval("allow")),
        ({"result": {"decision": "deny"}}, Approval("deny")),
        ({"result": {"decision": "allow", "remember": "session"}}, Approval("allow", True)),
        ({"result": {"decision": "deny", "note": "not now"}}, Approval("deny", note="not now")),
        # a "remember" the runtime does not know must not widen what was allowed
        ({"result": {"decision": "allow", "remember": "forever"}}, Approval("deny")),
        ({"result": {"decision": "allow", "note": 5}}, Approval("deny")),
        ({"result": {"decision": "maybe"}}, Approval("deny")),
        ({"result": "allow"}, Approval("deny")),
        ({"error": {"code": -1, "message": "no"}}, Approval("deny")),
        (None, Approval("deny")),  # no answer within approval_timeout_s
    ],
)
def test_approvals_go_to_a_client_that_declared_them(
    tmp_path: Path, answer: Any, decision: Approval
) -> None:
    decisions: list[Approval] = []

    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        await initialize(client, tmp_path, capabilities={"approvals": True})
        assert agent.approver is not None
        pending = asyncio.ensure_future(agent.approver("s1", {"name": "bash"}))
        frame = await client.recv()
        assert frame["method"] == "approval/request"
        assert frame["params"] == {"sessionId": "s1", "toolCall": {"name": "bash"}}
        if answer is not None:
            client.send({"jsonrpc": "2.0", "id": frame["id"], **answer})
        decisions.append(await pending)

    agent = run_sdk(tmp_path, scenario, approval_timeout=0.2)
    assert decisions == [decision]
    assert agent.approver is None  # uninstalled when the connection ended


def test_no_approver_for_clients_without_the_capability(tmp_path: Path) -> None:
    async def scenario(peer: Peer, client: PipeClient, agent: StandInAgent) -> None:
        await initialize(client, tmp_path, capabilities={"approvals": False})
        assert agent.approver is None

    run_sdk(tmp_path, scenario)


def test_main_command_is_registered_with_help() -> None:
    registered: list[Any] = []
    reg = SimpleNamespace(command=registered.append)
    SdkServer("sdk-server", {}).apply(reg)  # type: ignore[arg-type]
    (command,) = registered
    assert command.name == "main"
    assert command.help is HELP
    for method in ("initialize", "session/prompt", "approval/request", "runtime/status"):
        assert method in HELP
