"""The ``headless-runner`` plugin: the ``headless`` application's ``main`` command.

``dsh --profile headless TASK...`` sends one prompt to one session through the ``agent``
service and waits for that turn's ``turn/end``:

* stdout (the application's reserved stdout) gets the final answer, the text of the
  turn's last assistant message; with ``--json`` it gets instead every event of the
  session from the prompt on, one JSON object per line (the protocol's event object with
  its ``sessionId`` added), ending with the ``turn/end``, and with ``--json-format
  codex`` the events ``codex exec --json`` prints. Nothing else is ever written there,
  so the output can be piped.
* stderr gets the session id and one line per tool call, tool result and error
  (:mod:`dsh.runtime.headless.progress`); with ``--json`` only the failure message. On a
  terminal it also gets a live status line and a last line of usage.

How the run is shown is a view (:mod:`dsh.runtime.headless.views`), chosen from the
options and from which of stdout and stderr are terminals; the terminal's view
(:mod:`dsh.runtime.headless.live`) and its styling are imported only when stderr is one.
* Exit 0 when the turn completed; 1 when it ended in ``error``, ``max-tokens`` or
  ``cancelled`` (the message on stderr); 2 for usage errors, raised as
  :class:`~dsh.core.errors.UsageError` for the launcher's one handler. An unknown
  ``--session-id``, route or model is a usage error too: it is a wrong command-line value,
  found before any model call; a route that cannot be used for a new session (no key,
  a base URL that is no URL) is a configuration error (exit 2), and no session is left
  behind. SIGINT cancels the turn (bounded wait for its ``turn/end``) and the
  application runner exits 130.

Guarded tool calls follow ``--approval``: an approver answering ``allow`` (``auto``) or
``deny`` (``never``) is installed on the agent; without the option none is, and the
profile's policy answers unattended calls itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from dsh._version import __version__
from dsh.core import idprefix, jsonrpc
from dsh.core.errors import (
    ConfigError,
    ConnectionClosedError,
    DshError,
    InvalidArgumentError,
    SessionBusyError,
    UsageError,
)
from dsh.core.termtext import visible
from dsh.runtime.agent import events
from dsh.runtime.headless.options import HELP, HINT, NO_TASK, Options, parse
from dsh.runtime.headless.progress import has_tool_calls, message_text, plain
from dsh.runtime.headless.views import JsonView, QuietView, TerminalOut, View
from dsh.runtime.kernel.plugin import (
    Capability,
    Command,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)

MAX_STDIN_TASK_BYTES = 16 * 1024 * 1024
CANCEL_BOUND = 2.0
"""Seconds SIGINT waits for the cancelled turn's ``turn/end`` before giving up on it."""
FLUSH_BOUND = 2.0

EXIT_OK = 0
EXIT_FAILED = 1

_FAILURES = {
    "max-tokens": "the model stopped at its output token limit",
    "cancelled": "the turn was cancelled",
}


class HeadlessRunner(Plugin):
    """Registers the ``main`` command that runs one task and exits with its outcome."""

    manifest = Manifest(
        id="headless-runner",
        version=__version__,
        capabilities=frozenset({Capability.COMMAND}),
        description="One task from the command line, run to completion (headless).",
        config_schema={"type": "object", "properties": {}, "additionalProperties": False},
        requires=("agent",),
    )

    def apply(self, reg: Registrar) -> None:
        """Register ``main``; nothing runs until the launcher starts the application."""
        reg.command(Command("main", HELP, self._main))

    async def _main(self, rt: RuntimeContext, argv: list[str]) -> int:
        """Parse the command line (usage errors before any I/O), then run the task."""
        options = parse(argv)
        from dsh.runtime.transports.stdio import app_stdio

        fds = app_stdio()
        task = await _task_from_stdin(fds.read_fd, options) if options.task_from_stdin \
            else options.task
        out_terminal = _terminal(fds.write_fd)
        # A terminal is written to directly: the loop's transport would make it (and the
        # stderr it usually shares) non-blocking, and let stderr overtake stdout.
        out: _Stdout | TerminalOut = (TerminalOut(fds.write_fd) if out_terminal
                                      else await _Stdout.open(fds.write_fd))
        view = choose_view(options, out, out_terminal=out_terminal)
        try:
            return await HeadlessTask(rt.service("agent"), options, rt.cwd, view).run(task)
        finally:
            view.close()
            if isinstance(out, _Stdout):
                await out.close()


def _terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def choose_view(options: Options, out: Any, *, out_terminal: bool,
                err_fd: int = 2) -> View:
    """The view for this run: JSON (dsh's or Codex's), live on a terminal, else quiet.

    The terminal's modules (the live view, :mod:`dsh.core.termstyle`) are imported only
    when stderr is a terminal or colour is forced, so a piped run loads none of them.
    """
    if options.json:
        if options.json_format == "codex":
            from dsh.runtime.headless.codexjson import CodexView

            return CodexView(out, _stderr, out_terminal=out_terminal)
        return JsonView(out, _stderr, out_terminal=out_terminal)
    err_terminal = _terminal(err_fd) and os.environ.get("TERM") != "dumb"
    if not err_terminal and options.color != "always":
        return QuietView(out, _stderr, plain, out_terminal=out_terminal)
    from dsh.core.termstyle import Style, escape_codes_work, wants_color

    # A console that cannot redraw a line (an old Windows one) gets the quiet lines.
    err_terminal = err_terminal and escape_codes_work(err_fd)
    style = Style(wants_color(options.color, err_fd))
    if not err_terminal:  # --color always on a pipe: the quiet lines, coloured
        return QuietView(out, _stderr, style.paint, out_terminal=out_terminal)
    from dsh.runtime.headless.live import LiveView

    return LiveView(out, style, answer_to_terminal=out if out_terminal else None,
                    err_fd=err_fd)


class HeadlessTask:
    """One headless run: configure the agent, open the session, prompt, await the end."""

    def __init__(self, agent: Any, options: Options, cwd: str, view: View) -> None:
        self._agent = agent
        self._options = options
        self._cwd = cwd
        self._view = view
        self._session_id: str | None = None
        self._early: list[dict[str, Any]] | None = []
        """Events that came before the view was told the session (None: it was told)."""
        self._answer = ""
        self._end: dict[str, Any] | None = None
        self._ended = asyncio.Event()

    async def run(self, task: str) -> int:
        """Run ``task`` and return the exit code; usage errors are raised."""
        self._configure()
        # Listening before the session exists: its first events (an MCP server failing at
        # once, say) come while it is being created.
        unsubscribe = self._agent.add_listener(self._on_notification)
        if self._options.approval is not None:
            self._agent.set_approver(_approver(self._options.approval))
        try:
            session_id = await self._open_session()
            if self._options.compact:  # after subscribing: --json streams its event too
                await self._compact(session_id)
            try:
                await self._agent.prompt(session_id, [{"type": "text", "text": task}],
                                         cwd=self._cwd)
            except InvalidArgumentError as exc:  # the route cannot be used: nothing created
                raise ConfigError(exc.message + (f" ({exc.code})" if exc.code else "")
                                  ) from exc
            self._view.started(session_id)
            early, self._early = self._early or [], None
            for event in early:  # the prompt's own first events, sent while it was queued
                self._view.event(event)
            await self._wait_for_end(session_id)
        finally:
            unsubscribe()
            if self._options.approval is not None:
                self._agent.set_approver(None)
        return self._finish()

    def _configure(self) -> None:
        options = self._options
        if options.model is None and options.provider is None and options.effort is None:
            return
        try:
            self._agent.configure(provider=options.provider, model=options.model,
                                  reasoning_effort=options.effort)
        except InvalidArgumentError as exc:
            raise UsageError(exc.message) from exc

    async def _compact(self, session_id: str) -> None:
        """Compact the resumed session before the task; a failure ends the run (exit 1)."""
        try:
            done = await self._agent.compact(session_id)
        except DshError as exc:
            raise DshError(f"compaction of session {session_id!r} failed: {exc.message}"
                           ) from exc
        self._view.note(f"dsh: compacted {done['removedCount']} message(s), "
                        f"~{done['tokensBefore']} -> ~{done['tokensAfter']} tokens"
                        if done["compacted"] else "dsh: nothing to compact")

    async def _open_session(self) -> str:
        """The persisted session ``--session-id`` names or ``--continue`` finds, resumed;
        else a new id, whose session the prompt creates in the launch's cwd once it knows
        the model can be reached (a refused run leaves no session behind)."""
        session_id = self._options.session_id
        if session_id is not None:  # --session-id: whole, or its start
            matches = self._agent.sessions_named(session_id)
            if len(matches) > 1:
                raise UsageError(visible(idprefix.ambiguous(session_id, matches),
                                         one_line=True))
            session_id = matches[0] if matches else session_id  # none: resume says so
        if self._options.continue_last:
            root = os.path.realpath(self._cwd)
            session_id = self._agent.latest_session(root)
            if session_id is None:
                raise UsageError(f"no session to continue in {visible(root, one_line=True)}"
                                 " (run a task there without --continue first)")
        if session_id is None:
            self._session_id = events.new_id()
            return self._session_id
        self._session_id = session_id
        try:
            await self._agent.resume(session_id)
        except SessionBusyError as exc:
            raise DshError(f"session {session_id!r} is busy: {exc.message}") from exc
        except InvalidArgumentError as exc:
            raise UsageError(exc.message) from exc
        return session_id

    async def _wait_for_end(self, session_id: str) -> None:
        """Wait for ``turn/end``; on cancellation (SIGINT) cancel the turn, then re-raise."""
        try:
            await self._ended.wait()
        except asyncio.CancelledError:
            self._view.note("dsh: interrupted; cancelling the turn", error=True)
            with contextlib.suppress(asyncio.TimeoutError, DshError):
                await asyncio.wait_for(self._cancel(session_id), CANCEL_BOUND)
            raise

    async def _cancel(self, session_id: str) -> None:
        if await self._agent.cancel(session_id):
            await self._ended.wait()

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        """Hand this session's events to the view, and keep the answer and the end."""
        if method != "session.event" or params.get("sessionId") != self._session_id:
            return
        event = params.get("event")
        if not isinstance(event, dict) or self._ended.is_set():
            return
        if self._early is None:
            self._view.event(event)
        else:  # the view hears of the session once its prompt was taken
            self._early.append(event)
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "assistant/message":
            message = data.get("message") or {}
            if not has_tool_calls(message):
                self._answer = message_text(message)
        elif kind == "turn/end":
            self._end = data.get("reason") or {"kind": "error"}
            self._ended.set()

    def _finish(self) -> int:
        """Let the view show the end (the answer, the error) and turn ``turn/end``'s reason
        into the exit code."""
        reason = self._end or {"kind": "error"}
        kind = reason.get("kind")
        if kind != "completed":
            error = reason.get("error") or {}
            message = error.get("message") or _FAILURES.get(str(kind),
                                                            f"the turn ended: {kind}")
            code = error.get("code")
            self._view.note(visible(f"dsh: error: {message}" + (f" ({code})" if code else ""),
                                    one_line=True), error=True)
        self._view.finished(reason, self._answer)
        return EXIT_OK if kind == "completed" else EXIT_FAILED


def _approver(mode: str) -> Callable[[str, dict[str, Any]], Any]:
    """The fixed answer ``--approval`` gives every guarded call."""
    decision = "allow" if mode == "auto" else "deny"

    async def approve(session_id: str, tool_call: Mapping[str, Any]) -> str:
        return decision

    return approve


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


async def _task_from_stdin(fd: int, options: Options) -> str:
    """The task ``-`` (or no task, with stdin piped) reads; a terminal is never waited on
    for a task nobody named."""
    if options.stdin_implied and os.isatty(fd):
        raise UsageError(NO_TASK, hint=HINT)
    task = await _read_stdin(fd)
    if not task:
        raise (UsageError(NO_TASK, hint=HINT) if options.stdin_implied
               else UsageError("the task on stdin is empty"))
    return task


async def _read_stdin(fd: int) -> str:
    """The whole of stdin as the task, stripped ("" when it held nothing): read on a
    daemon thread so the loop (and SIGINT) stay live, and bounded so a runaway producer
    cannot exhaust memory."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()

    def read() -> None:
        chunks: list[bytes] = []
        size = 0
        try:
            while size <= MAX_STDIN_TASK_BYTES:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            result: bytes | BaseException = b"".join(chunks)
        except OSError as exc:
            result = exc
        loop.call_soon_threadsafe(_settle, done, result)

    threading.Thread(target=read, name="dsh-headless-stdin", daemon=True).start()
    data = await done
    if len(data) > MAX_STDIN_TASK_BYTES:
        raise UsageError(f"the task on stdin exceeds {MAX_STDIN_TASK_BYTES} bytes")
    try:
        task = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError("the task on stdin is not UTF-8") from exc
    return task.strip()


def _settle(future: asyncio.Future[bytes], result: bytes | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(UsageError(f"cannot read the task from stdin: {result}"))
    else:
        future.set_result(result)


class _Stdout:
    """The reserved stdout as a line sink that never blocks the loop.

    It reuses the SDK's :class:`~dsh.runtime.transports.stdio.StdioTransport` for the writing side
    (pipe, terminal or regular file alike); the transport also wants something to read,
    so it gets a private pipe that is at EOF at once. A reader that went away only stops
    the output: the run itself still finishes and reports its exit code.
    """

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._broken = False

    @classmethod
    async def open(cls, write_fd: int) -> _Stdout:
        from dsh.runtime.transports.stdio import StdioTransport

        read_fd, eof_fd = os.pipe()
        os.close(eof_fd)
        transport = StdioTransport(read_fd, write_fd,
                                   max_frame_bytes=jsonrpc.DEFAULT_MAX_FRAME_BYTES)
        await transport.start(None)
        return cls(transport)

    def write_line(self, line: str) -> None:
        """Queue one line (newline added)."""
        if self._broken:
            return
        try:
            self._transport.write(line.encode("utf-8") + b"\n")
        except ConnectionClosedError:
            self._broken = True

    async def close(self) -> None:
        """Flush what is queued, bounded, and release the fds."""
        await self._transport.close(FLUSH_BOUND)
