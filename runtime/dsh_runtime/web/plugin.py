"""The ``web-server`` plugin: the ``web`` application's ``main`` command.

``dsh web [--host HOST] [--port PORT]`` serves the HTTP API of :mod:`dsh_runtime.web.routes`
and its page until SIGTERM/SIGINT. Only the command line parsing and the help live here,
so loading the plugin (``-h``, ``--dump-config``, doctor) never imports Starlette or
uvicorn; :mod:`dsh_runtime.web.server` does, when ``main`` runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsh._version import __version__
from dsh.core.errors import ConfigError, UsageError

from dsh_runtime.plugin import Capability, Command, Manifest, Plugin, Registrar, RuntimeContext

LOOPBACK = "127.0.0.1"
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_APPROVAL_TIMEOUT_S = 300.0

HELP = """\
usage: dsh web [-h] [--host HOST] [--port PORT]

The web application: an HTTP API over the agent and a page that drives it, on
127.0.0.1 only. Every API call needs the per-launch token printed at start
(`Authorization: Bearer TOKEN`, or `?token=TOKEN` for the page and event streams).

options
  --host HOST   listen on HOST instead of 127.0.0.1 (a warning is printed: anyone who
                can reach it and knows the token can run tools on this machine)
  --port PORT   TCP port; 0 (the default) picks a free one

output
  stderr: the start URL, once: http://127.0.0.1:PORT/?token=TOKEN
  stdout: one JSON line once listening, for programs: {"url", "host", "port", "token"}

HTTP API (JSON; errors are {"error": {"code", "message"}})
  GET  /api/sessions                      -> {sessions}
  POST /api/sessions {cwd?}               -> 201 {sessionId}
  POST /api/sessions/{id}/prompt {contentBlocks}  -> 202 {messageId}
  GET  /api/sessions/{id}/events?since=SEQ -> text/event-stream: session.event (id: seq),
                                              session.status, approval, config
  POST /api/sessions/{id}/cancel          -> {cancelled}
  POST /api/sessions/{id}/resume          -> {}
  GET  /api/sessions/{id}/history?cursor=&limit= -> {events, nextCursor} (a page; follow
                                              nextCursor until null)
  GET  /api/tools -> {tools}   GET /api/config -> {config, patchReload, reloadRequired}
  GET  /api/status -> {state, profile, patchReload, reloadRequired}
  GET  /api/approvals -> {approvals}      POST /api/approvals/{id} {decision: allow|deny}
  401 missing or wrong token, 403 foreign Host header, 404 unknown session or approval,
  400 malformed JSON or invalid parameters, 413 body over the size cap, 429 session busy
  (here, or held by another runtime on the same home: the message names it).

SIGTERM: clean exit 0; SIGINT: 130; a second signal exits at once.
"""


@dataclass(frozen=True)
class WebOptions:
    """Where to listen and the limits, from the row config and the command line."""

    host: str
    port: int
    explicit_host: bool
    max_body_bytes: int
    approval_timeout_s: float


def parse(argv: Sequence[str], config: Mapping[str, Any]) -> WebOptions:
    """The command line over the row config; a bad value is a UsageError (exit 2).

    A non-loopback host in the row config is refused: only an explicit ``--host`` may
    widen the listener, so a stray patch can never expose the agent.
    """
    host: str | None = None
    port: str | None = None
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name not in ("--host", "--port"):
            raise UsageError(f"dsh web: unknown argument {arg!r} (see dsh web -h)")
        if not eq:
            if not args:
                raise UsageError(f"dsh web: {name} needs a value")
            value = args.pop(0)
        if name == "--host":
            host = value
        else:
            port = value
    if host is not None and not host:
        raise UsageError("dsh web: --host must not be empty")
    configured = str(config.get("host", LOOPBACK))
    if host is None and configured != LOOPBACK:
        raise ConfigError(f"web-server config host {configured!r}: only 127.0.0.1 may be "
                          "configured; pass --host explicitly to listen elsewhere")
    return WebOptions(
        host=host or LOOPBACK,
        port=_port(port) if port is not None else int(config.get("port", 0)),
        explicit_host=host is not None,
        max_body_bytes=int(config.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES)),
        approval_timeout_s=float(config.get("approval_timeout_s", DEFAULT_APPROVAL_TIMEOUT_S)),
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(f"dsh web: --port must be an integer 0..65535 (got {text!r})")
    return port


class WebServer(Plugin):
    """Registers ``main``, which serves the HTTP API and page until a signal."""

    manifest = Manifest(
        id="web-server",
        version=__version__,
        capabilities=frozenset({Capability.COMMAND}),
        description="The loopback web application: HTTP API, event streams and a page.",
        config_schema={
            "type": "object",
            "properties": {
                "host": {"type": "string"},
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
                "max_body_bytes": {"type": "integer", "minimum": 1024},
                "approval_timeout_s": {"type": "number", "minimum": 0},
            },
            "additionalProperties": False,
        },
        requires=("agent",),
    )

    def apply(self, reg: Registrar) -> None:
        """Register ``main``; nothing listens until the launcher runs it."""
        reg.command(Command("main", HELP, self._main))

    async def _main(self, rt: RuntimeContext, argv: list[str]) -> int:
        """Parse (usage errors before any I/O), then serve until cancelled by a signal."""
        options = parse(argv, self.config)
        from dsh_runtime.web.server import serve

        return await serve(rt, options)
