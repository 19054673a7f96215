"""Where the launcher hands a chat profile to the terminal chat, and what it checks first.

A profile whose bundles include ``dsh-chat-app`` (the shipped ``chat``, and any copy of
it) is a chat: ``dsh chat``, ``dsh --profile NAME`` for such a profile, and ``dsh`` alone
on a terminal open the terminal chat in this Python, as a client of the SDK protocol
(:mod:`dsh.chat.app`), which spawns the same profile as its runtime through
:mod:`dsh.sdk` (on either carrier). That runtime is told to serve (``DSH_SERVE``, set by
the SDK client), so the launcher it runs never comes back here.

Nothing here imports the UI: the checks (a terminal on both ends, the ``chat`` extra
installed, the chat's own options) cost a launch nothing else, and each failure is one
line and exit 2.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TextIO

from dsh.chat.options import ChatOptions
from dsh.core import optionvalue
from dsh.core.distribution import install_hint
from dsh.core.errors import UsageError

CHAT_BUNDLE = "dsh-chat-app"
CHAT_PROFILE = "chat"
CHAT_EXTRA = "chat"
UI_MODULES = ("textual", "rich")
"""The ``chat`` extra's top-level modules (``pyproject.toml`` keeps them in step)."""

HELP = """\
usage: dsh chat [--continue | --resume ID] [--model M] [--provider ROUTE] [--effort LEVEL]
       dsh                         (on a terminal: the same as `dsh chat`)

The agent in your terminal: a conversation with streamed, rendered answers, tool calls
you can open, diffs, approvals by key, and slash commands (/help lists them).

options
  --continue        continue this workspace's last session
  --resume ID       continue session ID (whole, or its first 4+ characters)
  --model M         the model of the first turn (`/model` switches later)
  --provider ROUTE  the provider route (`/provider`)
  --effort LEVEL    the reasoning effort (`/effort`)
  -h, --help        this help

It needs a terminal on stdin and stdout; for one task from a script use
`dsh headless "TASK"`, to embed the agent use the SDK (dsh.sdk).
"""


def is_chat(bundles: tuple[str, ...]) -> bool:
    """Whether a profile with ``bundles`` is a chat."""
    return CHAT_BUNDLE in bundles


def on_terminal(stdin: TextIO | None = None, stdout: TextIO | None = None) -> bool:
    """Whether stdin and stdout are both terminals (where bare ``dsh`` opens the chat)."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    try:
        return stdin.isatty() and stdout.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def parse(args: list[str], *, profile: str, home: Path, patches: list[str],
          cwd: Path) -> ChatOptions | None:
    """The chat's own options; None for ``-h`` (its help is printed). UsageError names a
    bad one."""
    values: dict[str, str | bool] = {}
    flags = {"--resume": "resume", "--model": "model", "--provider": "provider",
             "--effort": "effort"}
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, inline = token.partition("=")
        if token in ("-h", "--help"):
            sys.stdout.write(HELP)
            return None
        if token == "--continue":
            values["continue_last"] = True
        elif name in flags:
            value, i = optionvalue.take(args, i, name, inline if eq else None,
                                        said="dsh chat: ")
            values[flags[name]] = value
        else:
            raise UsageError(f"dsh chat: unknown option {token!r} (see `dsh chat -h`)")
        i += 1
    if values.get("continue_last") and "resume" in values:
        raise UsageError("dsh chat: --continue and --resume ID cannot be combined")
    return ChatOptions(profile, home, tuple(patches), cwd, **values)  # type: ignore[arg-type]


def check_ready() -> None:
    """Refuse, in one line each, what the chat cannot work without: a terminal on stdin
    and stdout, and the ``chat`` extra's packages."""
    if not on_terminal():
        raise UsageError("dsh chat needs a terminal (stdin and stdout); for one task from a "
                         "script use `dsh headless \"TASK\"`, to embed the agent use the SDK "
                         "(dsh.sdk)")
    missing = [m for m in UI_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"the terminal chat needs its packages ({', '.join(missing)} "
                         f"missing): {install_hint(CHAT_EXTRA)}")


def run(options: ChatOptions) -> int:
    """Open the chat (after :func:`check_ready`) and return its exit code."""
    check_ready()
    from dsh.chat.app import main

    return main(options)
