"""The headless runner's own command line, parsed with argparse into :class:`Options`.

argparse is told never to print or exit: its errors become :class:`~dsh.errors.UsageError`
(exit 2, one ``dsh: error: ...`` line from the launcher's single handler), and ``-h`` is
answered by the application runner from :data:`HELP` before anything starts.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import NoReturn

from dsh.errors import UsageError

STDIN_TASK = "-"
APPROVALS = ("auto", "never")

HELP = """\
usage: dsh --profile headless [-h] [--json] [--session-id ID [--compact]]
                              [--approval auto|never] [--model M] [--provider R]
                              [--effort LEVEL] TASK... | -

Run one task to completion and exit. TASK's words are joined with spaces; `-` reads the
task from stdin instead (UTF-8, up to 16 MiB).

options:
  --json             stream the session's events on stdout, one JSON object per line:
                     each is a protocol event object ({type, seq, time, data, ...}) with
                     its "sessionId" added; the last one is the task's turn/end
  --session-id ID    continue a persisted session (an unknown id exits 2)
  --compact          with --session-id: summarise the session's older turns into one
                     message before running the task (as the SDK's session/compact)
  --approval MODE    guarded tool calls (those the policy would ask about): `auto`
                     allows them, `never` denies them; default: the profile policy's
                     unattended answer (shipped: deny). `ask` needs an interactive
                     client and is refused here
  --model M          the model to use (default: the provider route's default model)
  --provider R       the provider route (default: the agent row's default_route)
  --effort LEVEL     reasoning effort: none (thinking off), minimal, low, medium, high,
                     xhigh, max (default: the route's; the route may take fewer)
  -h, --help         this help

output:
  stdout             the final answer (or, with --json, only the JSON event lines); the
                     model's reasoning is never part of it
  stderr             progress: the session id, tool calls, tool results, errors

exit status:
  0  the turn completed      1  the agent or model failed (turn ended in error,
  2  usage error                max-tokens or cancellation; the message is on stderr)
  130  interrupted (SIGINT cancels the running turn first)
"""


@dataclass(frozen=True)
class Options:
    """The parsed command line; ``task`` is ``"-"`` when the task comes from stdin."""

    task: str
    json: bool = False
    session_id: str | None = None
    approval: str | None = None
    model: str | None = None
    provider: str | None = None
    compact: bool = False
    effort: str | None = None

    @property
    def task_from_stdin(self) -> bool:
        """Whether the task must be read from the application's stdin."""
        return self.task == STDIN_TASK


class _Parser(argparse.ArgumentParser):
    """An argparse parser that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, hint="dsh --profile headless -h")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dsh --profile headless", add_help=False, allow_abbrev=False)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--session-id", dest="session_id", metavar="ID")
    parser.add_argument("--approval", metavar="MODE")
    parser.add_argument("--model", metavar="M")
    parser.add_argument("--provider", metavar="R")
    parser.add_argument("--effort", metavar="LEVEL")
    parser.add_argument("--compact", action="store_true")
    parser.add_argument("task", nargs="*")
    return parser


def parse(argv: list[str]) -> Options:
    """Parse the application's argv, or raise :class:`UsageError` saying what is wrong."""
    ns = _parser().parse_args(argv)
    if ns.approval == "ask":
        raise UsageError("--approval ask needs an interactive client; use auto or never")
    if ns.approval is not None and ns.approval not in APPROVALS:
        raise UsageError(f"--approval must be auto or never (got {ns.approval!r})")
    for name in ("session_id", "model", "provider", "effort"):
        value = getattr(ns, name)
        if value is not None and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} must not be empty")
    if ns.compact and ns.session_id is None:
        raise UsageError("--compact needs --session-id (a new session has nothing to compact)")
    words: list[str] = ns.task
    if not words:
        raise UsageError("no task given (words, or - to read it from stdin)",
                         hint="dsh --profile headless -h")
    if STDIN_TASK in words and len(words) > 1:
        raise UsageError("- reads the task from stdin and cannot be combined with task words")
    task = " ".join(words)
    if not task.strip():
        raise UsageError("the task is empty")
    return Options(task=task, json=ns.json, session_id=ns.session_id, approval=ns.approval,
                   model=ns.model, provider=ns.provider, compact=ns.compact,
                   effort=ns.effort)
