"""The user's own shell command in a session (the chat's ``!command``).

A person at a chat often wants to run something themselves (``!git status``) and have the
model see it. The command runs with the session's shell tool (``bash``), so exactly as
the model's own commands do: in the session's working directory, inside its sandbox, with
its limits and output cap. No guardrail is asked: the person typing it is who guardrails
ask. It is logged as ``user/shell {command, output, isError}`` and added to the
conversation as a user message (``source.kind: "user-shell"``), so the model reads it
with the next prompt, and a restored session still has it.

One thing at a time: a command is refused while a turn runs or prompts wait, and a
prompt queued while the command runs waits for it (:attr:`Session.user_command`), so its
message never lands inside a turn. The session is taken here before the command runs (the
agent's ``shell``), and the command holds it (:meth:`Session.keep`) until it is logged, so
its lease is given back only once the command's record is stored. ``cancel`` stops it
(its process group killed by the tool).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from dsh.core.errors import InvalidArgumentError, SessionBusyError
from dsh.runtime.agent import events
from dsh.runtime.agent.journal import Journal
from dsh.runtime.agent.session import Session
from dsh.runtime.tools.base import ToolContext, ToolResult, check_arguments

if TYPE_CHECKING:
    from dsh.runtime.agent.turns import TurnRunner

SHELL_TOOL = "bash"
MAX_COMMAND_CHARS = 64 * 1024
SOURCE_KIND = "user-shell"


async def run(session: Session, command: Any, turns: TurnRunner,
              journal: Journal) -> dict[str, Any]:
    """Run ``command`` for the user, record it, answer ``{output, isError}``."""
    if not isinstance(command, str) or not command.strip():
        raise InvalidArgumentError('"command" must be a non-empty string')
    if len(command) > MAX_COMMAND_CHARS:
        raise InvalidArgumentError(f'"command" is longer than {MAX_COMMAND_CHARS} characters')
    if session.turn is not None or session.inbox or session.user_command is not None:
        raise SessionBusyError("session busy: a turn is running; run the command when it ends")
    tool = turns.tools_for(session.id).get(SHELL_TOOL)
    if tool is None:
        raise InvalidArgumentError(f"this profile has no shell tool ('{SHELL_TOOL}')",
                                   code="no-shell")
    args = check_arguments(tool, {"command": command})
    cancelled = asyncio.Event()
    context = ToolContext(session.id, turns.env, cancelled, lambda: session.cwd,
                          session.change_cwd, emit=session.emit,
                          boundary=turns.boundary(session), keep=session.keep)
    done_with = session.keep()  # the command is work: the lease stays until it is logged
    try:
        task = asyncio.ensure_future(tool.call(args, context))
        session.user_command = (task, cancelled)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            session.user_command = None
        result = _result(task)
        session.emit(events.USER_SHELL, {"command": command, "output": result.text,
                                         "isError": result.is_error})
        message = events.user_message([events.text_block(said(command, result.text))],
                                      events.new_id())
        message["source"] = {"kind": SOURCE_KIND, "command": command}
        session.messages.append(message)
        session.emit(events.USER_MESSAGE, message, events.APPEND)
        journal.save(session.record)
    finally:
        done_with()
    return {"output": result.text, "isError": result.is_error}


def cancel(session: Session) -> bool:
    """Stop the user's command, if one runs; True when one did."""
    running = session.user_command
    if running is None:
        return False
    task, cancelled = running
    cancelled.set()
    task.cancel()
    return True


def said(command: str, output: str) -> str:
    """What the model reads of the user's command."""
    return (f"I ran this shell command myself in the workspace:\n$ {command}\n{output}")


def _result(task: asyncio.Future[Any]) -> ToolResult:
    if task.cancelled():
        return ToolResult("[cancelled by the user]", is_error=True)
    error = task.exception()
    if error is not None:
        return ToolResult(f"Error: {type(error).__name__}: {error}", is_error=True)
    result = task.result()
    return result if isinstance(result, ToolResult) else ToolResult(str(result), True)
