"""The ``dsh`` command: the one launcher of every dsh application.

``main`` is the single exit point (click's habit): commands raise typed
:class:`~dsh.core.errors.DshError`\\ s and the handler here prints one line and exits with the
error's code. Error and warning lines often quote what dsh did not write (a patch file's
value, a peer's message), so they pass through :func:`dsh.core.termtext.visible` first.
Heavy modules (YAML, click, the runtime) are imported only on the paths that need them, so
``dsh --version`` and ``dsh -h`` stay fast.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

from dsh._version import __version__
from dsh.cli import argv as argv_mod
from dsh.core.errors import EXIT_INTERRUPTED, EXIT_USAGE, DshError, UsageError

SERVE_ENV = "DSH_SERVE"
"""Set by the SDK client for the runtimes it spawns (``dsh.sdk._launch.SERVE_ENV``): serve
the profile's protocol; a chat profile does not open the terminal chat then."""

HELP = """\
usage: dsh [--home DIR] --profile NAME [--patch FILE]... [APP ARGS...]
       dsh NAME [APP ARGS...]               shorthand for --profile NAME (e.g. `dsh web`)
       dsh --profile NAME --dump-config [--json]
       dsh --profile NAME --dump-default-config [--json]
       dsh --dump-config-schema
       dsh profile list [--json]
       dsh info [--json] | dsh doctor [--live] [--strict] [--json]
       dsh trust [PATH] | dsh trust --list | dsh trust --remove PATH
       dsh chat [--continue | --resume ID]       the terminal chat (`dsh` alone, on a terminal)
       dsh sessions list|show|rm [--profile NAME] [--json]   (the stored sessions)
       dsh sessions export|import --profile NAME [--patch FILE]...   (JSON Lines)
       dsh sandbox [--profile NAME] [--patch FILE]... -- COMMAND...  (as the model's shell)

Every dsh application starts as a named profile: chat, web, headless, sdk, sdk-minimal,
acp, or one of your own under $DSH_HOME/profiles/.

""" + argv_mod.LAUNCHER_OPTIONS + """
subcommands: dsh plugin --profile NAME add|remove|list|sync|order, dsh plugin new NAME
"""


def _emit_json(document: object) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")


def _run(argv: list[str]) -> int:
    inv = argv_mod.parse(argv)
    # Asked by an SDK client to serve: taken out at once, so nothing the runtime starts
    # inherits it.
    serve = os.environ.pop(SERVE_ENV, None) is not None
    if (not serve and inv.profile is None and not inv.app_args and inv.dump is None
            and inv.subcommand is None and not inv.version and not inv.help):
        from dsh.chat.launch import CHAT_PROFILE, on_terminal

        if on_terminal():  # `dsh` alone on a terminal: the chat
            inv.profile = CHAT_PROFILE
    if inv.version:
        sys.stdout.write(f"dsh {__version__}\n")
        return 0
    if inv.help:
        sys.stdout.write(HELP)
        return 0
    from dsh.core.carriers import launch_choice

    handover = launch_choice()
    if handover is not None and not serve and _chat_profile(inv):
        return _run_chat(inv)  # the chat is a client: it runs here, its runtime frozen
    if handover is not None:  # no python runtime here: the frozen one runs this instead
        if inv.subcommand == "plugin":  # pip installs for a Python: the frozen one is none
            from dsh.core.distribution import python_hint

            raise UsageError("dsh plugin installs plugins for this Python, which needs the "
                             f"python runtime's packages (hint: {python_hint()})")
        from dsh.core.process import hand_over

        return hand_over([handover.path, *argv])
    if inv.subcommand is not None:
        from dsh.cli.commands import run_subcommand

        return run_subcommand(inv)
    if inv.dump == "--dump-config-schema":
        from dsh.config.configschema import config_schema

        _emit_json(config_schema())
        return 0
    if inv.profile is None:
        if inv.app_args and inv.app_args[0].startswith("-"):
            near = argv_mod.near_flag(inv.app_args[0])
            guess = f"; did you mean {near}?" if near else " (see `dsh -h`)"
            raise UsageError(f"unknown launcher option {inv.app_args[0].partition('=')[0]}"
                             f"{guess}")
        sys.stderr.write(HELP)
        raise UsageError("no profile given (try `dsh --profile sdk` or `dsh web`)")
    # Booting allocates tens of thousands of long-lived objects and almost no garbage, so
    # cycle collections during it only rescan them (~7% of boot time). The runtime turns
    # the collector back on once its plugins are loaded (dsh.runtime.app.run).
    gc.disable()
    try:
        return _run_profile(inv, inv.profile, serve=serve)
    finally:
        gc.enable()


def _chat_profile(inv: argv_mod.Invocation) -> bool:
    """Whether ``inv`` runs a chat profile (read without seeding or composing it)."""
    if inv.profile is None or inv.subcommand is not None or inv.dump is not None:
        return False
    from dsh.chat.launch import is_chat
    from dsh.config.profiles import load_profile
    from dsh.core.home import resolve_home

    try:
        profile = load_profile(resolve_home(inv.home), inv.profile, seed=False)
    except DshError:
        return False  # the runtime reports it as it does for any profile
    return is_chat(profile.bundles)


def _is_chat(bundles: tuple[str, ...]) -> bool:
    from dsh.chat.launch import is_chat

    return is_chat(bundles)


def _run_chat(inv: argv_mod.Invocation) -> int:
    """The terminal chat on ``inv``'s profile, home and patches (dsh.chat.launch)."""
    from dsh.chat.launch import parse, run
    from dsh.core.home import resolve_home

    assert inv.profile is not None
    # The launch turned the cycle collector off for a runtime's boot; the chat is a
    # long-lived UI whose widgets make cycles, so it runs with the collector on.
    gc.enable()
    options = parse(inv.app_args, profile=inv.profile, home=resolve_home(inv.home),
                    patches=inv.patches, cwd=Path.cwd())
    return 0 if options is None else run(options)


def _run_profile(inv: argv_mod.Invocation, name: str, *, serve: bool = False) -> int:
    """argv to a composed tree, in one direction: the profile is resolved once (created
    here from a template with ``--from-default-profile``) and handed down to the layers,
    the composition and the :class:`~dsh.core.launch.Launch`. A warm launch of an
    unchanged ``startup`` profile takes its composition from the launch cache
    (:mod:`dsh.config.launchcache`) and composes nothing. A chat profile opens the
    terminal chat here instead (unless an SDK client asked this launch to ``serve``)."""
    from dsh.config import launchcache, profiles
    from dsh.config.prepare import prepare
    from dsh.core.home import resolve_home

    if inv.dump is not None and inv.app_args:
        raise UsageError(f"{inv.dump} takes no application arguments "
                         f"(got {inv.app_args[0]!r})")
    home = resolve_home(inv.home)
    cwd = Path.cwd()
    default_only = inv.dump == "--dump-default-config"
    created = None
    composition = None
    if inv.from_template is not None:
        created = profiles.create_from_template(home, name, inv.from_template)
    elif not default_only:
        composition = launchcache.lookup(home, name, inv.patches, cwd)
    resolved = None

    def layers() -> Any:
        from dsh.config.resolve import resolve

        return resolved if resolved is not None else resolve(home, name, inv.patches, cwd)

    try:
        if composition is None:
            from dsh.config.resolve import composed, resolve

            # `dsh doctr` may mean a command, not a profile: the error says so.
            resolved = resolve(home, name, inv.patches, cwd, profile=created,
                               commands=argv_mod.SUBCOMMANDS, default_only=default_only)
            composition = composed(resolved)
        chat = inv.dump is None and not serve and _is_chat(composition.profile.bundles)
        prepared = None if inv.dump is not None or chat else prepare(
            composition, home, cwd, inv.app_args, help_footer=argv_mod.LAUNCHER_OPTIONS,
            plugin_dir=resolved.plugin_dir if resolved is not None else None, layers=layers)
    except DshError:
        if created is not None:  # bad input writes nothing: take the new profile back
            import contextlib
            import shutil

            shutil.rmtree(created.path, ignore_errors=True)
            with contextlib.suppress(OSError):
                created.path.parent.rmdir()  # the profiles folder, if this made it
        raise
    if resolved is not None:
        resolved.files.cache.save()
        if created is None and not default_only:
            from dsh.config.resolve import keep

            keep(resolved, composition)
    if chat:  # the chat's runtime, spawned by its SDK client, reports the warnings
        return _run_chat(inv)
    warnings = (*(prepared.env.warnings if prepared is not None else ()),
                *composition.warnings)
    if warnings:
        from dsh.core.termtext import visible  # they quote patch files, values, names

        for warning in warnings:
            sys.stderr.write(f"dsh: warning: {visible(warning)}\n")
    if prepared is None:
        if inv.json:
            _emit_json(composition.document)
        else:
            from dsh.config.dumptext import render

            sys.stdout.write(render(composition.document))
        return 0
    from dsh.runtime.app import run

    try:
        return run(prepared)
    except UsageError as exc:  # the application refused its arguments
        where = argv_mod.misplaced(inv, str(exc)) if inv.app_args else None
        if where is None:
            raise
        raise UsageError(where) from exc


def _fill_closed_stdio() -> None:
    """Point a closed fd 0, 1 or 2 at ``/dev/null`` (``dsh <&-``, a daemon's child).

    Otherwise the next file opened takes the number, and whatever later reads "stdin" or
    writes "stdout" (the application's frames) would read or overwrite that file.
    """
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, mode)  # the lowest free number: ``fd`` itself
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
            stream = ("stdin", "stdout", "stderr")[fd]
            if getattr(sys, stream) is None:
                # lives as long as the process, like the stream Python would have made
                setattr(sys, stream, open(fd, "r" if fd == 0 else "w",  # noqa: SIM115
                                          closefd=False))


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``dsh`` console script and ``python -m dsh``."""
    _fill_closed_stdio()
    args = sys.argv[1:] if argv is None else argv
    try:
        code = _run(args)
    except DshError as exc:
        from dsh.core.termtext import visible  # errors quote files, values and peers

        sys.stderr.write(f"dsh: error: {visible(str(exc))}\n")
        code = exc.exit_code
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``dsh ... | head``): nothing left to say to anyone.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.stdout.flush()
    sys.exit(code if isinstance(code, int) else EXIT_USAGE)
