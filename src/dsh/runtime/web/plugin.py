"""The ``web-server`` plugin: the ``web`` application's ``main`` command.

``dsh web [--host HOST] [--port PORT]`` serves the HTTP API of :mod:`dsh.runtime.web.routes`
and its page until SIGTERM/SIGINT. Only the help lives here, so loading the plugin
(``-h``, ``--dump-config``, doctor) never imports Starlette or uvicorn; the options
(:mod:`dsh.runtime.web.options`) and :mod:`dsh.runtime.web.server` are imported when
``main`` runs.
"""

from __future__ import annotations

from dsh._version import __version__
from dsh.runtime.kernel.plugin import (
    Capability,
    Command,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)

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
  400 malformed JSON (or nested over 64 levels) or invalid parameters, 408 body not sent
  in time, 413 body over the size cap, 429 session busy (here, or held by another
  runtime on the same home: the message names it). A connection that has not sent a
  whole request head within request_timeout_s (10 s; from its start or the previous
  response) is closed.

SIGTERM: clean exit 0; SIGINT: 130; a second signal exits at once.
"""


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
                "request_timeout_s": {
                    "type": "number", "minimum": 0.1, "default": 10,
                    "description": "Seconds a request's head may take to arrive (from "
                                   "the connection's start or the previous response), "
                                   "and its body after it; the connection is closed, "
                                   "or the request answered 408."},
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
        from dsh.runtime.web.options import parse

        options = parse(argv, self.config)
        from dsh.runtime.web.server import serve

        return await serve(rt, options)
