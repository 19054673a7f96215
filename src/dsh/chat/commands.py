"""The chat's slash commands: their names, arguments and help, and reading a typed line.

Held as data so ``/help``, completion and the tests read one table. What each command
does is the app's (:mod:`dsh.chat.app`); here a line becomes a :class:`Command` or the
reason it is not one.
"""

from __future__ import annotations

from typing import NamedTuple


class Spec(NamedTuple):
    """One slash command: ``args`` as shown in help (empty: takes none)."""

    name: str
    args: str
    help: str


COMMANDS: tuple[Spec, ...] = (
    Spec("help", "", "this list, and the keys"),
    Spec("new", "", "start a new session in this workspace"),
    Spec("sessions", "", "pick a session to continue (title, age, turns, workspace, cost)"),
    Spec("resume", "[ID]", "continue session ID, or its start (without one: the picker)"),
    Spec("model", "[NAME | ROUTE/NAME]", "the model of the next turn (no argument: list)"),
    Spec("effort", "[LEVEL | default]", "the reasoning effort of the next turn"),
    Spec("provider", "[ROUTE]", "the provider route of the next turn (its default model)"),
    Spec("approval", "[workspace | ask | allow-all | deny-mutating | default | forget]",
         "the policy mode (which calls ask); forget: drop remembered answers"),
    Spec("compact", "", "summarise the older conversation now"),
    Spec("cost", "", "tokens, cache hits and cost of this session"),
    Spec("diff", "", "the files this session changed, with their diffs"),
    Spec("clear", "", "clear the screen (the session stays)"),
    Spec("theme", "[dark | light]", "switch the colours"),
    Spec("quit", "", "leave (Ctrl+D)"),
)
BY_NAME = {spec.name: spec for spec in COMMANDS}

KEYS: tuple[tuple[str, str], ...] = (
    ("Enter", "send (while a turn runs: queue)"),
    ("Shift+Enter, Ctrl+J", "new line"),
    ("Up / Down", "input history (at the first / last line)"),
    ("Tab", "complete a /command or an @path"),
    ("@path", "attach a file of the workspace (text, or an image)"),
    ("!command", "run it yourself in the session's sandbox; the model sees it"),
    ("Ctrl+C", "cancel the running turn; twice on an empty prompt: quit"),
    ("Ctrl+D", "quit"),
    ("Ctrl+O", "open or close the last tool call or reasoning"),
    ("Ctrl+F", "search the transcript"),
    ("PageUp / PageDown", "scroll the transcript"),
    ("a  A  d  n", "at an approval: allow once, allow always, deny, deny with a note"),
)


class Command(NamedTuple):
    """A typed slash command: its spec and the rest of the line."""

    spec: Spec
    argument: str


def parse(line: str) -> Command | str | None:
    """``line`` as a command; a string says why it is not a known one; None when the line
    is no command at all (``//`` starts a message with a slash)."""
    if not line.startswith("/") or line.startswith("//"):
        return None
    name, _, argument = line[1:].strip().partition(" ")
    spec = BY_NAME.get(name.lower())
    if spec is None:
        import difflib

        near = difflib.get_close_matches(name.lower(), BY_NAME, n=1, cutoff=0.5)
        hint = f" (did you mean /{near[0]}?)" if near else ""
        return f"unknown command /{name}{hint}: /help lists them"
    if not spec.args and argument.strip():
        return f"/{spec.name} takes no argument"
    return Command(spec, argument.strip())


def completions(prefix: str) -> list[str]:
    """The commands ``prefix`` (``/mo``) may complete to, as ``/name``."""
    typed = prefix[1:].lower()
    return [f"/{s.name}" for s in COMMANDS if s.name.startswith(typed)]


def help_text() -> str:
    """``/help``: every command, then the keys (markdown)."""
    rows = [f"| `/{s.name}{' ' + s.args if s.args else ''}` | {s.help} |" for s in COMMANDS]
    keys = [f"| {k} | {v} |" for k, v in KEYS]
    return "\n".join(["| command | what it does |", "|---|---|", *rows, "",
                      "| key | what it does |", "|---|---|", *keys])
