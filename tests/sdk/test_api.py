"""The public contract of ``dsh.sdk``: exported names, signatures, import weight, config."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import subprocess
import sys

import pytest

import dsh.core.errors
import dsh.sdk
from dsh.core import jsonrpc
from dsh.sdk import (
    AsyncDshClient,
    ClientClosedError,
    ClientConfig,
    ClientState,
    ConfigError,
    DshClient,
    InitializeTimeoutError,
    RuntimeExitedError,
)
from dsh.sdk._config import DEFAULT_MAX_FRAME_BYTES

EXPORTED = {
    "ApprovalAnswer", "ApprovalRequest", "AsyncDshClient", "AsyncSession",
    "AsyncSubscription", "BusyError",
    "ClientClosedError", "ClientConfig", "ClientError", "ClientState", "ConfigError",
    "DshClient", "DshError", "Event", "FrameTooLargeError", "InitializeTimeoutError",
    "JsonRpcError", "Notification", "ProtocolError", "Readiness", "RequestTimeoutError",
    "RunResult", "RuntimeExitedError", "RuntimeInfo", "RuntimeNotFoundError", "Session",
    "SessionMoved", "SpawnError", "Stage", "Subscription",
}


def test_all_is_exactly_the_curated_api() -> None:
    assert set(dsh.sdk.__all__) == EXPORTED
    assert len(dsh.sdk.__all__) == len(EXPORTED)
    for name in dsh.sdk.__all__:
        assert getattr(dsh.sdk, name) is not None
    assert sorted(dir(dsh.sdk)) == sorted(EXPORTED)
    with pytest.raises(AttributeError):
        _ = dsh.sdk.NoSuchThing  # type: ignore[attr-defined]


def test_config_fields_are_keyword_only_with_documented_defaults() -> None:
    fields = {f.name: f for f in dataclasses.fields(ClientConfig)}
    assert list(fields) == [
        "dsh_bin", "profile", "patches", "dsh_home", "cwd", "env", "provider", "model",
        "reasoning_effort", "max_tokens", "initialize_timeout", "request_timeout",
        "shutdown_timeout", "max_frame_bytes", "carrier", "inherit_env", "trace_context",
        "stderr",
    ]
    assert all(f.kw_only for f in fields.values())
    defaults = ClientConfig()
    assert (defaults.profile, defaults.carrier, defaults.patches) == ("sdk", "auto", ())
    assert defaults.initialize_timeout == 30.0
    assert defaults.request_timeout is None
    assert defaults.shutdown_timeout == 5.0
    assert defaults.max_frame_bytes == 16 * 1024 * 1024 == jsonrpc.DEFAULT_MAX_FRAME_BYTES
    assert DEFAULT_MAX_FRAME_BYTES == jsonrpc.DEFAULT_MAX_FRAME_BYTES
    with pytest.raises(TypeError):
        ClientConfig("sdk")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        defaults.profile = "x"  # type: ignore[misc]


SIGNATURES = {
    "AsyncDshClient": "(config: 'ClientConfig | None' = None, *, "
                      "on_approval: 'ApprovalCallback | None' = None) -> 'None'",
    "DshClient": "(config: 'ClientConfig | None' = None, *, "
                 "on_approval: 'SyncApprovalCallback | None' = None) -> 'None'",
    "request": "(self, method: 'str', params: 'Params | None' = None, *, "
               "timeout: 'float | None' = None) -> 'Any'",
    "notify": "(self, method: 'str', params: 'Params | None' = None) -> 'None'",
    "subscribe": "(self, predicate: 'Predicate | None' = None)",
    "new_session": "(self, *, cwd: 'str | os.PathLike[str] | None' = None, "
                   "mcp_servers: 'Sequence[Mapping[str, Any]] | None' = None, "
                   "history: 'Sequence[Mapping[str, Any]] | None' = None)",
    "resume_session": "(self, session_id: 'str')",
    "history": "(self, session_id: 'str', *, page_size: 'int | None' = None)",
    "moves": "(self, session_id: 'str | None' = None)",
    "sessions": "(self, *, session_id: 'str | None' = None, workspace: 'str | None' = None, "
                "limit: 'int | None' = None)",
}


@pytest.mark.parametrize("cls", [AsyncDshClient, DshClient])
def test_client_signatures_are_pinned(cls: type) -> None:
    assert str(inspect.signature(cls)) == SIGNATURES[cls.__name__]
    for method in ("request", "notify", "subscribe", "new_session", "resume_session",
                   "history", "moves", "sessions"):
        text = str(inspect.signature(getattr(cls, method)))
        assert text.startswith(SIGNATURES[method]), (cls.__name__, method, text)
    public = {n for n in vars(cls) if not n.startswith("_")}
    assert public == {"config", "state", "runtime", "server_info", "pid", "exit_code",
                      "stderr_tail",
                      "start", "close", "readiness", "request", "notify", "subscribe",
                      "new_session", "resume_session", "sessions", "tools", "models",
                      "history", "moves"}


def _modules(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(list(sys.modules)))"],
        capture_output=True, text=True, check=True,
    ).stdout
    return set(json.loads(out))


def _modules_after(code: str) -> set[str]:
    """The modules ``code`` loads beyond the interpreter's own start: a site's ``.pth``
    files may load some (CI's image loads ``shutil``), and those are not dsh's weight."""
    return _modules(code) - _modules("pass")


HEAVY = ("yaml", "httpx", "pydantic", "dsh.runtime", "click", "dotenv")


def _has(loaded: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in loaded)


def test_import_weight_no_heavy_module_and_no_asyncio_until_a_client_is_used() -> None:
    loaded = _modules_after("import dsh.sdk")
    for name in (*HEAVY, "asyncio", "subprocess", "ctypes", "shutil"):
        assert not _has(loaded, name), name
    # dsh.core.process imports asyncio in its async flavour alone: the blocking client spawns
    # its runtime through it before the loop exists (dsh.sdk._launch.HeadStart).
    loaded = _modules_after("import dsh.core.process")
    for name in (*HEAVY, "asyncio"):
        assert not _has(loaded, name), name
    # The blocking client loads asyncio on its loop thread at start(), while the runtime
    # it just spawned boots; the async client needs it at import.
    loaded = _modules_after("from dsh.sdk import DshClient, Session, Subscription")
    for name in (*HEAVY, "asyncio", "ssl"):
        assert not _has(loaded, name), name
    loaded = _modules_after("from dsh.sdk import AsyncDshClient")
    for name in HEAVY:
        assert not _has(loaded, name), name
    assert _has(loaded, "asyncio")  # the check above sees asyncio where it is imported
    loaded = _modules_after("from dsh.sdk import DshClient\n"
                            "import os, sys\n"
                            "from dsh.sdk import ClientConfig\n"
                            "DshClient(ClientConfig(dsh_bin='/nonexistent/dsh')).close()")
    assert not _has(loaded, "asyncio")  # a client never started never loads it


def test_error_tree_drawing_lists_every_error_class() -> None:
    drawn = set(re.findall(r"[─└├]── (\w+)", dsh.core.errors.__doc__ or "")) | {"DshError"}
    defined = {name for name, value in vars(dsh.core.errors).items()
               if isinstance(value, type) and issubclass(value, dsh.core.errors.DshError)}
    assert drawn == defined


def test_sdk_errors_sit_in_the_one_tree() -> None:
    e = dsh.core.errors
    assert issubclass(e.BusyError, e.JsonRpcError)
    assert e.BusyError("busy").code == jsonrpc.SERVER_BUSY and e.BusyError.retryable
    for cls in (e.SpawnError, e.RuntimeExitedError, e.RequestTimeoutError,
                e.ClientClosedError):
        assert issubclass(cls, e.ClientError) and issubclass(cls, e.DshError)
    assert issubclass(InitializeTimeoutError, TimeoutError)
    exited = RuntimeExitedError(3, ["first", "last"])
    assert exited.exit_code == 3 and exited.stderr_tail == ("first", "last")
    assert "code 3" in str(exited) and "  | last" in str(exited)
    assert "SIGKILL" in str(RuntimeExitedError(-9))


@pytest.mark.parametrize(("options", "fragment"), [
    ({"profile": ""}, "profile"),
    ({"profile": "a/b"}, "profile"),
    ({"carrier": "java"}, "carrier"),
    ({"dsh_bin": "/bin/true", "carrier": "python"}, "carrier='python'"),
    ({"patches": "one.yml"}, "sequence"),
    ({"initialize_timeout": 0}, "initialize_timeout"),
    ({"request_timeout": -1}, "request_timeout"),
    ({"max_frame_bytes": 0}, "max_frame_bytes"),
    ({"max_tokens": True}, "max_tokens"),
    ({"env": {"A": 1}}, "env"),
    ({"dsh_home": "  "}, "dsh_home"),
    ({"model": ""}, "model"),
])
def test_bad_config_fails_where_it_is_written(options: dict[str, object],
                                              fragment: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        ClientConfig(**options)  # type: ignore[arg-type]


def test_config_copies_what_it_is_given() -> None:
    env = {"A": "1"}
    patches = ["a.yml"]
    config = ClientConfig(env=env, patches=patches)
    env["A"], patches[0] = "2", "b.yml"
    assert config.env == {"A": "1"} and config.patches == ("a.yml",)


def test_misuse_gets_precise_lifecycle_errors() -> None:
    async def scenario() -> None:
        client = AsyncDshClient(ClientConfig())
        assert client.state is ClientState.NEW
        with pytest.raises(ClientClosedError, match="not started"):
            await client.request("tools/list")
        await client.close()
        assert client.state is ClientState.CLOSED
        with pytest.raises(ClientClosedError, match="client is closed"):
            await client.new_session()
        with pytest.raises(ClientClosedError, match="client is closed"):
            await client.start()
        readiness = await client.readiness()
        assert (readiness.stage, readiness.reload_required) == (None, None)

    asyncio.run(scenario())
    sync = DshClient()
    sync.close()
    sync.close()
    with pytest.raises(ClientClosedError, match="client is closed"):
        sync.tools()
