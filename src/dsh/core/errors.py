"""The one exception tree shared by the launcher, the runtime and the SDK client.

Every error knows how it leaves the CLI: ``exit_code`` (one top-level handler in
:mod:`dsh.cli.main.main` prints the message and exits with it). How an error leaves a protocol
server is one table in the servers (:mod:`dsh.runtime.servers.errors`), so the agent and
the plugins raise what went wrong, never a wire code; only the JSON-RPC protocol's own
errors (:class:`ProtocolError` and below) carry their ``rpc_code``. Foreign exceptions
(YAML, TOML, JSON, ``OSError``, import errors) are translated into these where they
enter, with the cause chained.

    DshError                      exit 1
    ├── UsageError                exit 2  bad command line
    ├── ConfigError               exit 2  a file or field of the configuration is wrong
    │   ├── ProfileNotFoundError
    │   ├── PatchError            a patch file or operation is malformed
    │   └── EnvFileError          a malformed or refused ``.env``
    ├── PluginError               exit 1  a plugin failed to load, apply, start or stop
    │   └── CapabilityError       registered what its manifest did not declare
    ├── InvalidArgumentError      a request's argument the runtime cannot take (``code``)
    │   └── SessionNotFoundError  no session of that id, live or stored
    ├── SessionBusyError          the session cannot take it now; retrying later may work
    │   ├── SessionHeldError      another runtime holds the session's lease
    │   └── StoreUnavailableError the session store cannot be reached now
    ├── CompactionError           a session's history could not be summarised (``code``)
    ├── ProtocolError             rpc -32600 (subclasses carry their own code)
    │   ├── ParseError            rpc -32700  a frame is not UTF-8 JSON
    │   ├── InvalidMessageError   rpc -32600  JSON, but not a JSON-RPC 2.0 message
    │   ├── FrameTooLargeError    rpc -32600
    │   └── JsonRpcError          an error answer from the peer (code, message, data)
    │       └── BusyError         rpc -32001  the peer is busy; retrying later may succeed
    ├── DuplicateEventError       a session event's seq is already stored (never overwritten)
    ├── RuntimeNotFoundError      exit 2  no runtime carrier could be found
    └── ClientError               a client of dsh's and its peer: the SDK client and its
        │                         runtime process (stderr tail kept), the MCP client
        ├── SpawnError            the runtime process could not be started
        ├── RuntimeExitedError    the runtime exited (exit_code, stderr_tail)
        ├── ConnectionClosedError the peer exited or dropped the connection (MCP server)
        ├── RequestTimeoutError   no answer in time; also a ``TimeoutError``
        │   └── InitializeTimeoutError
        └── ClientClosedError     the client is not running: not started yet, or closed
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class DshError(Exception):
    """Base of every error dsh raises on purpose."""

    exit_code: int = EXIT_FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message} (hint: {self.hint})"


class UsageError(DshError):
    """The command line is wrong."""

    exit_code = EXIT_USAGE


class ConfigError(DshError):
    """A configuration file or field is wrong; the message names the file and field."""

    exit_code = EXIT_USAGE


class ProfileNotFoundError(ConfigError):
    """No profile of that name exists in the home and no shipped template has it."""


class PatchError(ConfigError):
    """A patch file, or one operation in it, is malformed."""


class EnvFileError(ConfigError):
    """A ``.env`` file is malformed or sets a bootstrap-only name."""


class PluginError(DshError):
    """A plugin failed to load, validate, apply, start or dispose."""

    def __init__(
        self,
        message: str,
        *,
        row_id: str | None = None,
        hint: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.row_id = row_id
        if exit_code is not None:
            self.exit_code = exit_code


class CapabilityError(PluginError):
    """A plugin registered something its manifest did not declare."""


class InvalidArgumentError(DshError):
    """A request's argument the runtime cannot take: a route, model or effort it does not
    know, a directory that is not one, a session id already in use, a malformed history.

    ``code`` names the kind for programs (``unknown-model``), when there is one.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class SessionNotFoundError(InvalidArgumentError):
    """No session of that id, neither live in this runtime nor stored."""

    def __init__(self, session_id: str, message: str | None = None) -> None:
        super().__init__(message or f"unknown session '{session_id}'")
        self.session_id = session_id


class SessionBusyError(DshError):
    """The session cannot take the request now (it is running a turn, its queue is full):
    the request is sound and retrying it later may succeed.

    ``data`` is what a client may read about it (``{"retryable": true, ...}``).
    """

    retryable = True

    def __init__(self, message: str, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data = {"retryable": True, **(data or {})}


class CompactionError(DshError):
    """A session's history could not be summarised (the summary request failed); nothing
    changed. ``code`` is the failure's kind (the provider's error code, when it had one)."""

    def __init__(self, message: str, *, code: str = "compaction-failed") -> None:
        super().__init__(message)
        self.code = code


class ProtocolError(DshError):
    """A peer broke the wire protocol (framing, JSON, JSON-RPC shape)."""

    rpc_code = -32600


class ParseError(ProtocolError):
    """A frame is not valid UTF-8 JSON; the answer carries a null id."""

    rpc_code = -32700


class InvalidMessageError(ProtocolError):
    """Valid JSON that is not a JSON-RPC 2.0 message; ``id`` is the one recovered, if any."""

    def __init__(self, message: str, *, id: str | int | None = None) -> None:
        super().__init__(message)
        self.id = id


class FrameTooLargeError(ProtocolError):
    """One frame exceeded the configured maximum size."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the {limit}-byte limit")
        self.size = size
        self.limit = limit


class JsonRpcError(ProtocolError):
    """An error answer: carries the JSON-RPC ``code``, ``message`` and optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.rpc_code = code
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The ``error`` member of a JSON-RPC response."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class RuntimeNotFoundError(DshError):
    """No runtime carrier was found; the message lists every place searched."""

    exit_code = EXIT_USAGE


class BusyError(JsonRpcError):
    """The peer answered -32001 busy (e.g. the session is mid-turn): the request is sound
    and retrying it later may succeed, which is why it is told apart from other answers."""

    retryable = True

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(-32001, message, data)


class SessionHeldError(SessionBusyError):
    """A session is leased by another runtime (``docs/contracts.md``, "One runtime per
    session").

    ``holder`` is ``{"host", "pid"}`` of the runtime holding it, or None when this runtime
    lost a lease it held and nobody holds it now. Retryable: the holder may end, or die and
    be taken over. ``lost`` says the session was this runtime's until another took it.
    """

    def __init__(self, session_id: str, holder: Mapping[str, Any] | None, *,
                 lost: bool = False) -> None:
        self.session_id = session_id
        self.holder = None if holder is None else {"host": str(holder["host"]),
                                                   "pid": int(holder["pid"])}
        self.lost = lost
        if self.holder is None:
            by = "another runtime"
        else:
            by = f"another runtime (pid {self.holder['pid']} on host {self.holder['host']})"
        if lost:
            message = f"session '{session_id}' was taken over by {by}"
        elif self.holder is None:
            message = f"session '{session_id}' is not leased by this runtime"
        else:
            message = (f"session busy: '{session_id}' is held by {by}; retry once it "
                       "exits (a dead holder's lease is taken over)")
        super().__init__(message, {"holder": self.holder})


class StoreUnavailableError(SessionBusyError):
    """The session store (a database server) cannot be reached right now: retryable.

    Raised by a store whose connection is down. An event it could not store was kept in
    the home's spool and is written once the store is back, so ``spooled`` tells the
    agent that what a client is sent is not lost. The message never holds a password.
    """

    def __init__(self, message: str, *, spooled: bool = False) -> None:
        super().__init__(message, {"reason": "store-unavailable"})
        self.spooled = spooled


class DuplicateEventError(DshError):
    """An append named a seq the session's log already holds: two writers, a bug.

    The stored event stays; the new one is refused loudly instead of replacing it or
    vanishing (the log is keyed by session and seq).
    """

    def __init__(self, session_id: str, seq: int) -> None:
        super().__init__(f"session '{session_id}' already has an event with seq {seq}; "
                         "refusing to overwrite or drop it")
        self.session_id = session_id
        self.seq = seq


class ClientError(DshError):
    """A failure of a client dsh runs (the SDK client, the MCP client) or of its peer.

    ``stderr_tail`` holds the runtime's last stderr lines (at most 200) at the time of the
    failure, and is printed with the message: the reason a runtime died is nearly always
    there, and an error that drops it sends the user hunting.
    """

    def __init__(
        self, message: str, *, stderr_tail: Sequence[str] = (), hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.stderr_tail = tuple(stderr_tail)

    def __str__(self) -> str:
        return super().__str__() + render_stderr_tail(self.stderr_tail)


class SpawnError(ClientError):
    """The operating system refused to start the runtime (exec failed, bad interpreter)."""


class RuntimeExitedError(ClientError):
    """The runtime process ended: every request waiting on it fails with this at once.

    ``exit_code`` is the process's status: negative for a signal, as in :mod:`subprocess`.
    """

    def __init__(
        self, exit_code: int, stderr_tail: Sequence[str] = (), *, hint: str | None = None
    ) -> None:
        if exit_code < 0:
            message = f"the runtime was killed by signal {_signal_name(-exit_code)}"
        else:
            message = f"the runtime exited with code {exit_code}"
        super().__init__(message, stderr_tail=stderr_tail, hint=hint)
        self.exit_code = exit_code


class ConnectionClosedError(ClientError):
    """The peer exited or dropped the connection before answering (an MCP server)."""


class RequestTimeoutError(ClientError, TimeoutError):
    """No answer within the request's timeout; the request is forgotten, the client lives.

    Also a :class:`TimeoutError`, so generic timeout handling catches it.
    """


class InitializeTimeoutError(RequestTimeoutError):
    """The runtime started but did not answer ``initialize`` within ``initialize_timeout``."""


class ClientClosedError(ClientError):
    """The client is not running: it was never started, or it was closed."""


def render_stderr_tail(lines: Sequence[str]) -> str:
    """The block an error message ends with to show a runtime's last stderr lines."""
    if not lines:
        return ""
    body = "\n".join(f"  | {line}" for line in lines)
    return f"\nruntime stderr (last {len(lines)} lines):\n{body}"


def _signal_name(number: int) -> str:
    import signal  # only on this rare path: ``dsh --version`` imports this module

    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
