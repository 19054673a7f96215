"""Where ``dsh web`` listens and its limits, from the row config and its command line.

``dsh web [--host HOST] [--port PORT]``, read by click (:mod:`dsh.runtime.servers.cmdline`). A
non-loopback host in the row config is refused: only an explicit ``--host`` may widen the
listener, so a stray patch can never expose the agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from dsh.core.errors import ConfigError, UsageError
from dsh.runtime.servers import cmdline

LOOPBACK = "127.0.0.1"
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_APPROVAL_TIMEOUT_S = 300.0
DEFAULT_REQUEST_TIMEOUT_S = 10.0

_COMMAND = cmdline.command("dsh web", [click.Option(["--host"]), click.Option(["--port"]),
                                       click.Argument(["extra"], nargs=-1)])


@dataclass(frozen=True)
class WebOptions:
    """Where to listen and the limits, from the row config and the command line."""

    host: str
    port: int
    explicit_host: bool
    max_body_bytes: int
    approval_timeout_s: float
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    """A request's head must arrive within it (from the connection's start, or the end of
    the previous response), and its body within it of the head."""


def parse(argv: Sequence[str], config: Mapping[str, Any]) -> WebOptions:
    """The command line over the row config; a bad value is a UsageError (exit 2)."""
    try:
        given = cmdline.parse(_COMMAND, argv)
    except click.NoSuchOption as exc:
        raise UsageError(f"dsh web: unknown argument {exc.option_name!r} "
                         "(see dsh web -h)") from None
    except click.BadOptionUsage as exc:
        raise UsageError(f"dsh web: {exc.option_name} needs a value") from None
    if given["extra"]:  # dsh web takes no positional argument
        raise UsageError(f"dsh web: unknown argument {given['extra'][0]!r} (see dsh web -h)")
    host, port = given["host"], given["port"]
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
        request_timeout_s=float(config.get("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)),
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(f"dsh web: --port must be an integer 0..65535 (got {text!r})")
    return port
