"""The launcher's subcommands (``info``, ``doctor``, ``profile``, ``plugin``, ``sessions``),
built with click.

They run under :func:`dsh.cli.main`'s single error handler: click's own usage errors are
turned into :class:`~dsh.errors.UsageError` here, so every failure leaves the same way.
With ``--json`` a failure is still exactly one JSON document on stdout (``ok: false``).
Help texts are given as ``help=``, never read from docstrings: the frozen runtime's
bytecode is compiled without docstrings (``wheels/hatch_build.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from dsh import machine
from dsh.argv import Invocation
from dsh.errors import DshError, UsageError
from dsh.home import resolve_home


def _emit(command: str, profile: str | None, as_json: bool, data: Any,
          render: Any) -> None:
    document = machine.envelope(command, profile, data=data)
    sys.stdout.write(machine.dumps(document) if as_json else render(data))


def _fail_json(command: str, profile: str | None, exc: DshError) -> None:
    error = {"code": exc.exit_code, "type": type(exc).__name__, "message": str(exc)}
    sys.stdout.write(machine.dumps(machine.envelope(command, profile, error=error)))


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             help="dsh launcher subcommands.")
@click.pass_context
def group(ctx: click.Context) -> None:
    pass


_home_option = click.option("--home", "home", default=None, help="The dsh home.")


@group.command(help="What this installation is: version, carriers, profiles.")
@_home_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def info(inv: Invocation, home: str | None, as_json: bool) -> None:
    from dsh import info as info_mod

    explicit = home or inv.home
    home_path = resolve_home(explicit)
    try:
        data = info_mod.collect(home_path, explicit)
    except DshError as exc:
        if not as_json:
            raise
        _fail_json("info", None, exc)
        sys.exit(exc.exit_code)
    _emit("info", None, as_json, data, info_mod.render)


@group.command(help="Check the home and a profile; exit 1 when a check fails.")
@_home_option
@click.option("--profile", "profile", default="sdk", show_default=True)
@click.option("--patch", "patches", multiple=True, help="Extra patch layers, in order.")
@click.option("--live", is_flag=True, help="Also boot the runtime (prints its help).")
@click.option("--strict", is_flag=True, help="Warnings fail too.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def doctor(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
           live: bool, strict: bool, as_json: bool) -> None:
    from dsh import doctor as doctor_mod

    if as_json and strict:
        raise UsageError("--strict is for people; with --json, read each check's status")
    home_path = resolve_home(home or inv.home)
    runner = doctor_mod.Doctor(home_path, profile, list(patches), Path.cwd(), strict=strict)
    data = runner.run(live=live)
    _emit("doctor", profile, as_json, data, doctor_mod.render)
    if data["failed"]:
        sys.exit(1)


@group.group(help="Profiles of the home and the shipped templates.")
def profile() -> None:
    pass


@profile.command("list", help="List every profile with its bundles and reload policy.")
@_home_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def profile_list(inv: Invocation, home: str | None, as_json: bool) -> None:
    from dsh import info as info_mod

    home_path = resolve_home(home or inv.home)
    rows = info_mod.collect(home_path, home or inv.home)["profiles"]

    def render(data: dict[str, Any]) -> str:
        return "".join(
            f"{r['id']}\tERROR {r['error']}\n" if "error" in r
            else f"{r['id']}\t{r['patchReload']}\t{', '.join(r['bundles'])}\n"
            for r in data["profiles"]
        )

    _emit("profile list", None, as_json, {"profiles": rows}, render)


@group.group(help="Each profile's own plugin environment (profiles/NAME/plugins).")
@click.option("--profile", "profile_name", required=True, help="The profile to change.")
@_home_option
@click.pass_context
def plugin(ctx: click.Context, profile_name: str, home: str | None) -> None:
    from dsh.carriers import running_frozen

    if running_frozen():
        # pip installs for a Python interpreter, which the frozen runtime is not; the
        # freeze leaves out the lock and TOML-editing libraries this command needs.
        raise UsageError("dsh plugin needs the python carrier (it installs with pip): run "
                         "it with the `dsh` launcher, not the frozen dsh-runtime")
    from dsh.plugins import PluginManager
    from dsh.profiles import validate_name

    inv: Invocation = ctx.obj
    ctx.obj = PluginManager(resolve_home(home or inv.home), validate_name(profile_name))


def _locked(manager: Any, action: Any) -> Any:
    """Run ``action`` holding the profile's lock; an unwritable profile is bad input."""
    from dsh.errors import ConfigError

    try:
        with manager.lock():
            return action()
    except PermissionError as exc:
        raise ConfigError(f"{exc.filename or manager.path}: read-only; `dsh plugin` cannot "
                          "change this profile") from exc


def _show_bundles(profile: Any) -> None:
    sys.stdout.write(f"bundles: {', '.join(profile.bundles)}\n")


@plugin.command("add", help="Install requirements (names or local paths) into the profile.")
@click.argument("specs", nargs=-1, required=True)
@click.pass_obj
def plugin_add(manager: Any, specs: tuple[str, ...]) -> None:
    _show_bundles(_locked(manager, lambda: manager.add(list(specs), Path.cwd())))


@plugin.command("remove",
                help="Remove requirements (by requirement text, path or distribution name).")
@click.argument("names", nargs=-1, required=True)
@click.pass_obj
def plugin_remove(manager: Any, names: tuple[str, ...]) -> None:
    _show_bundles(_locked(manager, lambda: manager.remove(list(names), Path.cwd())))


@plugin.command("sync", help="Reinstall exactly the requirements recorded in profile.toml.")
@click.pass_obj
def plugin_sync(manager: Any) -> None:
    _show_bundles(_locked(manager, manager.sync))


@plugin.command("order", help="Rewrite the profile's bundle order.")
@click.argument("bundles", nargs=-1, required=True)
@click.pass_obj
def plugin_order(manager: Any, bundles: tuple[str, ...]) -> None:
    _show_bundles(_locked(manager, lambda: manager.order(list(bundles))))


@plugin.command("list", help="Requirements, installed versions and bundles.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def plugin_list(manager: Any, as_json: bool) -> None:
    try:
        data = _locked(manager, manager.describe)
    except DshError as exc:
        if not as_json:
            raise
        _fail_json("plugin list", manager.name, exc)
        sys.exit(exc.exit_code)

    def render(d: dict[str, Any]) -> str:
        lines = [f"bundles: {', '.join(d['bundles'])}"]
        for r in d["requirements"]:
            state = f"{r['distribution']} {r['version']}" if r["installed"] else "not installed"
            extra = f" (bundles: {', '.join(r['bundles'])})" if r["bundles"] else ""
            lines.append(f"{r['requirement']}\t{state}{extra}")
        return "\n".join(lines) + "\n"

    _emit("plugin list", manager.name, as_json, data, render)


@group.group(help="Move a profile's sessions between stores (SQLite, PostgreSQL) as JSON "
                  "Lines.")
def sessions() -> None:
    pass


_profile_option = click.option("--profile", "profile", default="sdk", show_default=True,
                               help="The profile whose sessions row is used.")
_patch_option = click.option("--patch", "patches", multiple=True,
                             help="Extra patch layers, in order (e.g. the PostgreSQL one).")


@sessions.command("export", help="Write every session (or each --session) with its events "
                                 "and goals.")
@_home_option
@_profile_option
@_patch_option
@click.option("--session", "session_ids", multiple=True, help="Only this session (repeatable).")
@click.option("-o", "--output", default="-", show_default=True,
              help="The file to write ('-': stdout); replaced only once complete.")
@click.pass_obj
def sessions_export(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
                    session_ids: tuple[str, ...], output: str) -> None:
    from dsh.sessionio import export_sessions

    summary = export_sessions(resolve_home(home or inv.home), profile, list(patches),
                              Path.cwd(), output, list(session_ids))
    sys.stderr.write(summary + "\n")


@sessions.command("import", help="Read an export into the profile's store; exit 1 when a "
                                 "session is refused (held, or its log differs).")
@_home_option
@_profile_option
@_patch_option
@click.argument("source", default="-")
@click.pass_obj
def sessions_import(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
                    source: str) -> None:
    from dsh.sessionio import import_sessions

    summary, complete = import_sessions(resolve_home(home or inv.home), profile, list(patches),
                                        Path.cwd(), source)
    sys.stdout.write(summary)
    if not complete:
        sys.exit(1)


def run_subcommand(inv: Invocation) -> int:
    """Run ``inv.subcommand`` with its arguments; click errors become UsageError."""
    try:
        group.main([inv.subcommand, *inv.app_args], prog_name="dsh", obj=inv,
                   standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx else "")
        return 0
    except click.UsageError as exc:
        raise UsageError(exc.format_message()) from exc
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort as exc:
        raise KeyboardInterrupt from exc
    return 0
