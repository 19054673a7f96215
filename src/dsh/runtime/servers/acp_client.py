"""What an ACP client offers a session's tools: its files and its terminal.

A client that advertises them in ``initialize`` (``clientCapabilities.fs.readTextFile``,
``fs.writeTextFile``, ``terminal``; only ``true`` counts, as the spec's "false or not
present" means no) gets each session's tools' file reads and writes as
``fs/read_text_file`` / ``fs/write_text_file`` and the ``bash`` tool's commands as
``terminal/create`` → ``terminal/wait_for_exit`` (→ ``terminal/kill`` at the call's
timeout or its cancellation) → ``terminal/output`` → ``terminal/release``, the terminal
embedded in the tool call (``{type: terminal, terminalId}``) so the editor shows it live.
What the tools check first, and what the terminal is given, is theirs
(:mod:`dsh.runtime.tools.clientside`, :mod:`dsh.runtime.tools.terminal`).

Each request goes through the connection's one JSON-RPC peer, bounded: ``ask(method,
params, timeout)`` with the server's ``client_timeout_s``, the command's own timeout for
``wait_for_exit``. An error answer, a malformed one or no answer in time is a
:class:`~dsh.core.errors.DshError` the tool reports; a terminal is released whatever
happened, bounded too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

from dsh.core.errors import ProtocolError
from dsh.runtime.tools.clientside import TerminalRun

log = logging.getLogger("dsh.acp")

Ask = Callable[[str, dict[str, Any], float | None], Awaitable[Mapping[str, Any]]]
"""``ask(method, params, timeout)``: a request to the client, its object answer."""
Embed = Callable[[str, str], None]
"""``embed(call_id, terminal_id)``: show the terminal with the tool call."""

_CLEANUP_S = 5.0
"""The bound of a kill or release sent while the call is already ending."""


class Capabilities(NamedTuple):
    """The client methods a client advertised."""

    reads: bool = False
    writes: bool = False
    terminal: bool = False

    @classmethod
    def of(cls, advertised: Any) -> Capabilities:
        """From ``initialize``'s ``clientCapabilities``; anything but ``true`` is no."""
        caps = advertised if isinstance(advertised, Mapping) else {}
        fs = got if isinstance(got := caps.get("fs"), Mapping) else {}
        return cls(fs.get("readTextFile") is True, fs.get("writeTextFile") is True,
                   caps.get("terminal") is True)

    @property
    def any(self) -> bool:
        """Whether the client offers anything at all."""
        return self.reads or self.writes or self.terminal


class AcpClientSide:
    """One session's view of the client's offer (a :class:`ClientSide`)."""

    def __init__(self, session_id: str, caps: Capabilities, ask: Ask, embed: Embed,
                 timeout: float) -> None:
        self.reads, self.writes, self.terminal = caps
        self._session_id = session_id
        self._ask = ask
        self._embed = embed
        self._timeout = timeout

    async def read_text_file(self, path: str) -> str:
        """``fs/read_text_file``: the text the client has for ``path``."""
        answer = await self._ask("fs/read_text_file",
                                 {"sessionId": self._session_id, "path": path}, self._timeout)
        content = answer.get("content")
        if not isinstance(content, str):
            raise ProtocolError("fs/read_text_file answered without a string \"content\"")
        return content

    async def write_text_file(self, path: str, content: str) -> None:
        """``fs/write_text_file``: the client writes ``content`` to ``path``."""
        await self._ask("fs/write_text_file", {"sessionId": self._session_id, "path": path,
                                               "content": content}, self._timeout)

    async def run(self, argv: list[str], cwd: str, *, call_id: str, output_limit: int,
                  timeout: float) -> TerminalRun:
        """``argv`` in a terminal of the client (see the module doc)."""
        created = await self._ask("terminal/create", {
            "sessionId": self._session_id, "command": argv[0], "args": argv[1:], "cwd": cwd,
            "outputByteLimit": output_limit}, self._timeout)
        terminal_id = created.get("terminalId")
        if not isinstance(terminal_id, str) or not terminal_id:
            raise ProtocolError("terminal/create answered without a \"terminalId\"")
        ids = {"sessionId": self._session_id, "terminalId": terminal_id}
        if call_id:
            self._embed(call_id, terminal_id)
        try:
            timed_out = False
            try:
                exited: Mapping[str, Any] = await self._ask("terminal/wait_for_exit", ids,
                                                            timeout)
            except TimeoutError:
                timed_out, exited = True, {}
                await self._ask("terminal/kill", ids, self._timeout)
            shown = await self._ask("terminal/output", ids, self._timeout)
        except BaseException:
            await self._cleanup("terminal/kill", ids)
            raise
        finally:
            await self._cleanup("terminal/release", ids)
        return _ran(shown, exited, timed_out)

    async def _cleanup(self, method: str, ids: dict[str, Any]) -> None:
        """A kill or release that must go out even while the call is being cancelled;
        its failure is logged, never raised over the call's own outcome."""
        try:
            await asyncio.shield(self._ask(method, ids, _CLEANUP_S))
        except Exception as exc:
            log.info("%s of terminal %s: %s", method, ids["terminalId"], exc)


def _ran(shown: Mapping[str, Any], exited: Mapping[str, Any], timed_out: bool) -> TerminalRun:
    """A :class:`TerminalRun` from ``terminal/output`` and ``wait_for_exit``'s answers."""
    output = shown.get("output")
    if not isinstance(output, str):
        raise ProtocolError("terminal/output answered without a string \"output\"")
    status = exited or shown.get("exitStatus") or {}
    if not isinstance(status, Mapping):
        raise ProtocolError("the terminal's exit status is not an object")
    code, signal = status.get("exitCode"), status.get("signal")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        raise ProtocolError("the terminal's exitCode is not an integer")
    if signal is not None and not isinstance(signal, str):
        raise ProtocolError("the terminal's signal is not a string")
    return TerminalRun(output, shown.get("truncated") is True, code, signal, timed_out)


def terminal_content(terminal_id: str) -> dict[str, str]:
    """ACP tool call content embedding a client terminal."""
    return {"type": "terminal", "terminalId": terminal_id}
