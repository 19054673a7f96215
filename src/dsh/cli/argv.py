"""Splitting a ``dsh`` command line into launcher flags and the application's arguments.

The launcher owns a short prefix of flags; the first token it does not know starts the
application's arguments, which are passed on verbatim (``dsh --profile headless --json
"task"`` gives the headless runner its own ``--json``). A scanner this small is clearer
than bending an option parser into stopping at the right token, and it is a pure
function, so it is tested directly.
"""

from __future__ import annotations

from dsh.core import optionvalue
from dsh.core.errors import UsageError

SUBCOMMANDS = ("doctor", "info", "plugin", "profile", "sandbox", "sessions", "trust")
DUMP_FLAGS = ("--dump-config", "--dump-default-config", "--dump-config-schema")
_VALUE_FLAGS = ("--profile", "--patch", "--home", "--from-default-profile")
_FLAGS = (*_VALUE_FLAGS, *DUMP_FLAGS, "--json", "--version", "--help")

LAUNCHER_OPTIONS = """\
launcher options (they come before the application's arguments):
  --profile NAME               the profile to run
  --patch FILE                 an extra patch layer, applied last (repeatable, in order)
  --home DIR                   the dsh home (default: $DSH_HOME, else ~/.dsh)
  --from-default-profile TPL   create profile NAME as a copy of shipped template TPL
  --dump-config                print the composed config tree with provenance
  --dump-default-config        the same, bundle layers only
  --dump-config-schema         print the JSON Schema of rows and patch operations
  --json                       JSON output for the --dump-* flags
  -V, --version                print the version
  -h, --help                   this help; `dsh --profile NAME -h` is the application's help
"""


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
            value, i = optionvalue.take(argv, i, flag, inline if eq else None)
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


def misplaced(inv: Invocation, problem: str) -> str | None:
    """Say where launcher options among the application's arguments belong.

    Called when the application refused its arguments (``problem`` is what it said): a
    launcher option after the task (``dsh --profile headless hi --patch F``) gets the
    command line with it moved in front; an option the application refused that is
    close to a launcher option (``--pach``) gets "did you mean" and the same command line
    with the option corrected. None when neither fits.
    """
    moved: list[str] = []
    rest: list[str] = []
    args, guessed = list(inv.app_args), None
    for index, token in enumerate(args):
        near = near_flag(token)
        flag = token.partition("=")[0]
        if near is not None and flag in problem:  # the application refused a near miss
            guessed = flag
            args[index] = near + token[len(flag):]
            break
    i = 0
    while i < len(args):
        token = args[i]
        flag, eq, _ = token.partition("=")
        if flag in _VALUE_FLAGS and (eq or i + 1 < len(args)):
            moved += [token] if eq else [token, args[i + 1]]
            i += 1 if eq else 2
            continue
        if token in DUMP_FLAGS:
            moved.append(token)
        else:
            rest.append(token)
        i += 1
    if not moved:
        return None
    import shlex

    command = ["dsh", *(["--home", inv.home] if inv.home else []),
               "--profile", str(inv.profile),
               *(a for p in inv.patches for a in ("--patch", p)), *moved, *rest]
    flag = moved[0].partition("=")[0]
    said = f"{guessed}: did you mean {flag}? It" if guessed else flag
    return (f"{said} is a launcher option: put it before the application's arguments: "
            f"{shlex.join(command)}")


def near_flag(token: str) -> str | None:
    """The launcher option ``token`` is probably a misspelling of, if any."""
    import difflib

    flag = token.partition("=")[0]
    if not flag.startswith("--") or flag in _FLAGS:
        return None
    near = difflib.get_close_matches(flag, _FLAGS, n=1, cutoff=0.75)
    return near[0] if near else None
