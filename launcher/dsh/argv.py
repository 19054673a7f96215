"""Splitting a ``dsh`` command line into launcher flags and the application's arguments.

The launcher owns a short prefix of flags; the first token it does not know starts the
application's arguments, which are passed on verbatim (``dsh --profile headless --json
"task"`` gives the headless runner its own ``--json``). A scanner this small is clearer
than bending an option parser into stopping at the right token, and it is a pure
function, so it is tested directly.
"""

from __future__ import annotations

from dsh.errors import UsageError

SUBCOMMANDS = ("doctor", "info", "plugin", "profile", "sessions")
DUMP_FLAGS = ("--dump-config", "--dump-default-config", "--dump-config-schema")
_VALUE_FLAGS = ("--profile", "--patch", "--home", "--from-default-profile")


class Invocation:
    """What the launcher was asked to do.

    A plain class, not a dataclass: every launch builds it, and generating a dataclass's
    methods costs more at import than the whole scan (spawn-to-``initialize`` is a
    benchmarked target, issue 3).
    """

    __slots__ = (
        "app_args",
        "dump",
        "from_template",
        "help",
        "home",
        "json",
        "patches",
        "profile",
        "subcommand",
        "version",
    )

    def __init__(self, *, profile: str | None = None, patches: list[str] | None = None,
                 home: str | None = None, dump: str | None = None, json: bool = False,
                 from_template: str | None = None, version: bool = False, help: bool = False,
                 subcommand: str | None = None, app_args: list[str] | None = None) -> None:
        self.profile = profile
        self.patches = patches if patches is not None else []
        self.home = home
        self.dump = dump
        self.json = json
        self.from_template = from_template
        self.version = version
        self.help = help
        self.subcommand = subcommand
        self.app_args = app_args if app_args is not None else []


def parse(argv: list[str]) -> Invocation:
    """Scan ``argv`` (without the program name) into an :class:`Invocation`."""
    inv = Invocation()
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, eq, inline = token.partition("=")
        if flag in _VALUE_FLAGS and (eq or token == flag):
            if eq:
                value = inline
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                raise UsageError(f"{flag} needs a value")
            if not value:
                raise UsageError(f"{flag} needs a non-empty value")
            if flag == "--profile":
                if inv.profile is not None:
                    raise UsageError("--profile given twice")
                inv.profile = value
            elif flag == "--patch":
                inv.patches.append(value)
            elif flag == "--home":
                inv.home = value
            else:
                inv.from_template = value
        elif token in DUMP_FLAGS:
            if inv.dump is not None and inv.dump != token:
                raise UsageError(f"{inv.dump} and {token} cannot be combined")
            inv.dump = token
        elif token == "--json" and (
            inv.dump is not None or (i + 1 < len(argv) and argv[i + 1] in DUMP_FLAGS)
        ):
            inv.json = True
        elif token in ("-V", "--version") and inv.profile is None:
            inv.version = True
        elif token in ("-h", "--help") and inv.profile is None:
            inv.help = True
        elif token == "--":
            inv.app_args = argv[i + 1:]
            break
        elif inv.profile is None and token in SUBCOMMANDS:
            inv.subcommand = token
            inv.app_args = argv[i + 1:]
            break
        elif inv.profile is None and not token.startswith("-"):
            inv.profile = token
        else:
            inv.app_args = argv[i:]
            break
        i += 1
    if inv.json and inv.dump is None:
        raise UsageError("--json belongs to the launcher only beside a --dump-* flag")
    return inv
