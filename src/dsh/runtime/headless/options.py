"""The headless runner's own command line, read by click into :class:`Options`.

The parser never prints or exits (:mod:`dsh.runtime.servers.cmdline`): a bad command line is a
:class:`~dsh.core.errors.UsageError` (exit 2, one ``dsh: error: ...`` line from the
launcher's single handler), and ``-h`` is answered by the application runner from
:data:`HELP` before anything starts. Options may come before or after the task's words;
``--`` ends them, so a word that looks like an option can still be part of the task.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from dsh.core.errors import UsageError
from dsh.runtime.servers import cmdline

STDIN_TASK = "-"
APPROVALS = ("auto", "never")
JSON_FORMATS = ("dsh", "codex")
COLORS = ("auto", "always", "never")  # dsh.core.termstyle.CHOICES, not imported on a pipe

HELP = """\
usage: dsh --profile headless [-h] [--json [--json-format dsh|codex]]
                              [--session-id ID | --continue] [--compact]
                              [--approval auto|never] [--model M] [--provider R]
                              [--effort LEVEL] [--color auto|always|never] TASK... | -

Run one task to completion and exit. TASK's words are joined with spaces; `-` reads the
task from stdin instead (UTF-8, up to 16 MiB), as does no TASK at all when stdin is not a
terminal (`dsh --profile headless < task.md`).

options:
  --json             stream the session's events on stdout, one JSON object per line:
                     each is a protocol event object ({type, seq, time, data, ...}) with
                     its "sessionId" added; the last one is the task's turn/end
  --json-format F    dsh (the default, above) or codex: the events `codex exec --json`
                     prints (thread.started, turn.started, item.started/updated/
                     completed, turn.completed with usage, turn.failed); implies --json
  --session-id ID    continue a persisted session, named whole or by its first 4+
                     characters (an unknown or ambiguous id exits 2)
  --continue         continue the session of this workspace (the current directory)
                     updated last (none yet exits 2)
  --compact          with --session-id or --continue: summarise the session's older
                     turns into one message before running the task (as the SDK's
                     session/compact)
  --approval MODE    guarded tool calls (those the policy would ask about): `auto`
                     allows them, `never` denies them; default: the profile policy's
                     unattended answer (shipped: deny). `ask` needs an interactive
                     client and is refused here
  --model M          the model to use (default: the provider route's default model)
  --provider R       the provider route (default: the agent row's default_route)
  --effort LEVEL     reasoning effort: none (thinking off), minimal, low, medium, high,
                     xhigh, max (default: the route's; the route may take fewer)
  --color WHEN       colour stderr: auto (only a terminal, and not when NO_COLOR is
                     set), always or never; default auto
  -h, --help         this help

output:
  stdout             the final answer (or, with --json, only the JSON event lines); the
                     model's reasoning is never part of it. On a terminal the answer
                     streams as it is written; otherwise it is written once, at the end
  stderr             progress: the session id, tool calls, tool results, errors. On a
                     terminal also a spinner with the time spent, the model's reasoning
                     as one line, and a last line of usage: model, steps, tokens, cost,
                     time. Text from the model, files and tools never reaches a
                     terminal raw: its control characters are shown, not obeyed

exit status:
  0  the turn completed      1  the agent or model failed (turn ended in error,
  2  usage error                max-tokens or cancellation; the message is on stderr)
  130  interrupted (SIGINT cancels the running turn first)
"""


@dataclass(frozen=True)
class Options:
    """The parsed command line; ``task`` is ``"-"`` when the task comes from stdin, and
    ``stdin_implied`` when that is because no task was given (read only from a stdin that
    is not a terminal, which the runner checks)."""

    task: str
    json: bool = False
    session_id: str | None = None
    approval: str | None = None
    model: str | None = None
    provider: str | None = None
    compact: bool = False
    effort: str | None = None
    json_format: str = "dsh"
    color: str = "auto"
    continue_last: bool = False
    stdin_implied: bool = False

    @property
    def task_from_stdin(self) -> bool:
        """Whether the task must be read from the application's stdin."""
        return self.task == STDIN_TASK


_COMMAND = cmdline.command("dsh --profile headless", [
    click.Option(["--json"], is_flag=True),
    click.Option(["--session-id", "session_id"], metavar="ID"),
    click.Option(["--approval"], metavar="MODE"),
    click.Option(["--model"], metavar="M"),
    click.Option(["--provider"], metavar="R"),
    click.Option(["--effort"], metavar="LEVEL"),
    click.Option(["--compact"], is_flag=True),
    click.Option(["--json-format", "json_format"], metavar="F"),
    click.Option(["--color"], metavar="WHEN"),
    click.Option(["--continue", "continue_last"], is_flag=True),
    click.Argument(["task"], nargs=-1),
])
HINT = "dsh --profile headless -h"
NO_TASK = "no task given (words, - to read it from stdin, or a task piped in)"


def parse(argv: list[str]) -> Options:
    """Parse the application's argv, or raise :class:`UsageError` saying what is wrong."""
    try:
        given = cmdline.parse(_COMMAND, argv)
    except click.NoSuchOption as exc:
        raise UsageError(f"unrecognized arguments: {exc.option_name}", hint=HINT) from None
    except click.BadOptionUsage as exc:
        raise UsageError(exc.format_message(), hint=HINT) from None
    approval = given["approval"]
    if approval == "ask":
        raise UsageError("--approval ask needs an interactive client; use auto or never")
    if approval is not None and approval not in APPROVALS:
        raise UsageError(f"--approval must be auto or never (got {approval!r})")
    for name in ("session_id", "model", "provider", "effort"):
        value = given[name]
        if value is not None and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} must not be empty")
    json_format = given["json_format"]
    if json_format is not None and json_format not in JSON_FORMATS:
        raise UsageError(f"--json-format must be dsh or codex (got {json_format!r})")
    color = given["color"]
    if color is not None and color not in COLORS:
        raise UsageError(f"--color must be auto, always or never (got {color!r})")
    if given["continue_last"] and given["session_id"] is not None:
        raise UsageError("--continue and --session-id both name the session: give one")
    if given["compact"] and given["session_id"] is None and not given["continue_last"]:
        raise UsageError("--compact needs --session-id or --continue (a new session has "
                         "nothing to compact)")
    words = list(given["task"]) or [STDIN_TASK]
    if STDIN_TASK in words and len(words) > 1:
        raise UsageError("- reads the task from stdin and cannot be combined with task words")
    task = " ".join(words)
    if not task.strip():
        raise UsageError("the task is empty")
    return Options(task=task, json=given["json"] or json_format is not None,
                   session_id=given["session_id"], approval=approval, model=given["model"],
                   provider=given["provider"], compact=given["compact"],
                   effort=given["effort"], json_format=json_format or "dsh",
                   color=color or "auto", continue_last=given["continue_last"],
                   stdin_implied=not given["task"])
