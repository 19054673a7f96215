"""dsh.sdk: run dsh agents from Python, over a spawned runtime's JSON-RPC stdio.

    from dsh.sdk import ClientConfig, DshClient

    config = ClientConfig(profile="sdk-minimal", dsh_home="/tmp/agent-home",
                          patches=["examples/offline/patch.yml"])
    with DshClient(config) as client:
        print(client.new_session().run("hello").final_text)

:class:`AsyncDshClient` is the asyncio client; :class:`DshClient` the blocking facade
over it. Every error is a :class:`DshError` (the tree is drawn in :mod:`dsh.core.errors`).

This module only re-exports. The client classes are loaded on first use (PEP 562
``__getattr__`` over a fixed table), and asyncio (whose import alone costs more than the
rest of this package) later still: the async client imports it, the blocking client loads
it on its loop thread at ``start()``, while the runtime it has just spawned boots. A
program that only builds a config or catches an error pays for neither.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from dsh.core.errors import (
    BusyError,
    ClientClosedError,
    ClientError,
    ConfigError,
    DshError,
    FrameTooLargeError,
    InitializeTimeoutError,
    JsonRpcError,
    ProtocolError,
    RequestTimeoutError,
    RuntimeExitedError,
    RuntimeNotFoundError,
    SpawnError,
)
from dsh.core.jsonrpc import Notification
from dsh.sdk._config import ClientConfig
from dsh.sdk._events import ApprovalAnswer, ApprovalRequest, Event, RunResult, SessionMoved
from dsh.sdk._lifecycle import ClientState, Readiness, Stage
from dsh.sdk._locate import RuntimeInfo

if TYPE_CHECKING:
    from dsh.sdk._client import AsyncDshClient
    from dsh.sdk._router import AsyncSubscription
    from dsh.sdk._session import AsyncSession
    from dsh.sdk._sync import DshClient, Session, Subscription

__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "AsyncDshClient",
    "AsyncSession",
    "AsyncSubscription",
    "BusyError",
    "ClientClosedError",
    "ClientConfig",
    "ClientError",
    "ClientState",
    "ConfigError",
    "DshClient",
    "DshError",
    "Event",
    "FrameTooLargeError",
    "InitializeTimeoutError",
    "JsonRpcError",
    "Notification",
    "ProtocolError",
    "Readiness",
    "RequestTimeoutError",
    "RunResult",
    "RuntimeExitedError",
    "RuntimeInfo",
    "RuntimeNotFoundError",
    "Session",
    "SessionMoved",
    "SpawnError",
    "Stage",
    "Subscription",
]

_LAZY = {
    "AsyncDshClient": "dsh.sdk._client",
    "AsyncSession": "dsh.sdk._session",
    "AsyncSubscription": "dsh.sdk._router",
    "DshClient": "dsh.sdk._sync",
    "Session": "dsh.sdk._sync",
    "Subscription": "dsh.sdk._sync",
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'dsh.sdk' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
