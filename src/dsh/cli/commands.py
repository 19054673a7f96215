"""The launcher's subcommands (``info``, ``doctor``, ``profile``, ``plugin``, ``trust``,
``sessions``, ``sandbox``), built with click.

They run under :func:`dsh.cli.main.main`'s single error handler, the one place that exits:
click's own usage errors are turned into :class:`~dsh.core.errors.UsageError` here, so
every failure leaves the same way, and a command whose outcome is already said (a failed
check, a refused import, a ``--json`` error document) raises click's ``Exit`` with its
code, which :func:`run_subcommand` returns. With ``--json`` a failure is still exactly one
JSON document on stdout (``ok: false``).
Help texts are given as ``help=``, never read from docstrings: the frozen runtime's
bytecode is compiled without docstrings (``wheels/hatch_build.py``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from dsh.cli import machine
from dsh.cli.argv import Invocation
from dsh.core.errors import DshError, UsageError
from dsh.core.home import resolve_home


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
    from dsh.cli import info as info_mod

    explicit = home or inv.home
    home_path = resolve_home(explicit)
    try:
        data = info_mod.collect(home_path, explicit)
    except DshError as exc:
        if not as_json:
            raise
        _fail_json("info", None, exc)
        raise click.exceptions.Exit(exc.exit_code) from exc
    _emit("info", None, as_json, data, info_mod.render)


@group.command(help="Check the home and a profile; exit 1 when a check fails.")
@_home_option
@click.option("--profile", "profile", default="sdk", show_default=True)
@click.option("--patch", "patches", multiple=True, help="Extra patch layers, in order.")
@click.option("--live", is_flag=True,
              help="Also boot the runtime, reach the model route in use (key, server, "
                   "model listed) and every MCP server.")
@click.option("--provider", "provider", metavar="ROUTE",
              help="With --live: check this model route (the one in use) instead of the "
                   "default.")
@click.option("--all-routes", is_flag=True,
              help="With --live: check every model route; one without its key is reported "
                   "as not configured unless it is in use.")
@click.option("--strict", is_flag=True, help="Warnings fail too.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def doctor(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
           live: bool, provider: str | None, all_routes: bool, strict: bool,
           as_json: bool) -> None:
    from dsh.cli import doctor as doctor_mod

    if as_json and strict:
        raise UsageError("--strict is for people; with --json, read each check's status")
    if (provider is not None or all_routes) and not live:
        raise UsageError("--provider and --all-routes reach the routes' servers: add --live")
    home_path = resolve_home(home or inv.home)
    runner = doctor_mod.Doctor(home_path, profile, list(patches), Path.cwd(), strict=strict,
                               provider=provider, all_routes=all_routes)
    data = runner.run(live=live)
    from dsh.core.termstyle import wants_color

    color = not as_json and wants_color("auto", sys.stdout.fileno())
    _emit("doctor", profile, as_json, data, lambda d: doctor_mod.render(d, color=color))
    if data["failed"]:
        raise click.exceptions.Exit(1)


@group.group(help="Profiles of the home and the shipped templates.")
def profile() -> None:
    pass


@profile.command("list", help="List every profile with its bundles and reload policy.")
@_home_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def profile_list(inv: Invocation, home: str | None, as_json: bool) -> None:
    from dsh.cli import info as info_mod

    home_path = resolve_home(home or inv.home)
    rows = info_mod.collect(home_path, home or inv.home)["profiles"]

    def render(data: dict[str, Any]) -> str:
        from dsh.core.termtext import visible  # a broken profile's error quotes its file

        return "".join(
            f"{r['id']}\tERROR {visible(r['error'], one_line=True)}\n" if "error" in r
            else f"{r['id']}\t{r['patchReload']}\t{', '.join(r['bundles'])}\n"
            for r in data["profiles"]
        )

    _emit("profile list", None, as_json, {"profiles": rows}, render)


@group.group(help="Each profile's own plugin environment (profiles/NAME/plugins), and new "
                   "plugin packages.")
@click.option("--profile", "profile_name", default=None,
              help="The profile to change or list (every command but `new`).")
@_home_option
@click.pass_context
def plugin(ctx: click.Context, profile_name: str | None, home: str | None) -> None:
    from dsh.core.carriers import running_frozen

    if running_frozen():
        # pip installs for a Python interpreter, which the frozen runtime is not; the
        # freeze leaves out the lock and TOML-editing libraries this command needs.
        raise UsageError("dsh plugin needs the python carrier (it installs with pip): run "
                         "it with the `dsh` launcher, not the frozen dsh-runtime")
    inv: Invocation = ctx.obj
    ctx.obj = _PluginArgs(resolve_home(home or inv.home), profile_name,
                          home_given=bool(home or inv.home))


def _target_options(fn: Any) -> Any:
    """``--profile`` and ``--home`` after a ``plugin`` subcommand as well as before it."""
    fn = click.option("--home", "sub_home", default=None, help="The dsh home.")(fn)
    return click.option("--profile", "sub_profile", default=None, metavar="NAME",
                        help="The profile (here or before the command).")(fn)


class _PluginArgs:
    """The ``plugin`` group's options, handed to its commands."""

    def __init__(self, home: Path, profile: str | None, *, home_given: bool = False) -> None:
        self.home = home
        self.profile = profile
        self._home_given = home_given  # by --home (either place), not the default

    def also(self, profile: str | None, home: str | None) -> _PluginArgs:
        """With ``--profile``/``--home`` given after the subcommand too (``dsh plugin add
        --profile P``, as ``dsh doctor`` takes them); given on both sides, they must agree."""
        if profile is not None and self.profile is not None and profile != self.profile:
            raise UsageError(f"dsh plugin: --profile given twice ({self.profile!r} before "
                             f"the command, {profile!r} after it)")
        where = self.home
        if home is not None:
            where = resolve_home(home)
            if self._home_given and where != self.home:
                raise UsageError(f"dsh plugin: --home given twice ({self.home} before the "
                                 f"command, {where} after it)")
        return _PluginArgs(where, profile if profile is not None else self.profile,
                           home_given=self._home_given or home is not None)

    def manager(self, command: str) -> Any:
        """The profile's plugin manager; a command without ``--profile`` is bad input."""
        from dsh.cli.plugins import PluginManager
        from dsh.config.profiles import validate_name

        if self.profile is None:
            raise UsageError(f"dsh plugin {command} needs a profile: dsh plugin --profile "
                             f"NAME {command} ...")
        return PluginManager(self.home, validate_name(self.profile))


def _show_bundles(profile: Any) -> None:
    sys.stdout.write(f"bundles: {', '.join(profile.bundles)}\n")


@plugin.command("add", help="Install requirements (names or local paths) into the profile; "
                "a new profile starts from a shipped template.")
@click.argument("specs", nargs=-1, required=True)
@click.option("--from", "template", default=None, metavar="TEMPLATE",
              help="The shipped template a new profile starts from (default: headless).")
@click.option("--no-bundle", "plain", is_flag=True,
              help="Accept a package without a dsh.bundles entry point (a plain library).")
@_target_options
@click.pass_obj
def plugin_add(args: _PluginArgs, specs: tuple[str, ...], template: str | None,
               plain: bool, sub_profile: str | None, sub_home: str | None) -> None:
    manager = args.also(sub_profile, sub_home).manager("add")
    _show_bundles(manager.add(list(specs), Path.cwd(), template=template, plain=plain))


@plugin.command("remove",
                help="Remove requirements (by requirement text, path or distribution name).")
@click.argument("names", nargs=-1, required=True)
@_target_options
@click.pass_obj
def plugin_remove(args: _PluginArgs, names: tuple[str, ...], sub_profile: str | None,
                  sub_home: str | None) -> None:
    manager = args.also(sub_profile, sub_home).manager("remove")
    _show_bundles(manager.remove(list(names), Path.cwd()))


@plugin.command("sync", help="Reinstall exactly the requirements recorded in profile.toml.")
@_target_options
@click.pass_obj
def plugin_sync(args: _PluginArgs, sub_profile: str | None, sub_home: str | None) -> None:
    _show_bundles(args.also(sub_profile, sub_home).manager("sync").sync())


@plugin.command("order", help="Rewrite the profile's bundle order.")
@click.argument("bundles", nargs=-1, required=True)
@_target_options
@click.pass_obj
def plugin_order(args: _PluginArgs, bundles: tuple[str, ...], sub_profile: str | None,
                 sub_home: str | None) -> None:
    _show_bundles(args.also(sub_profile, sub_home).manager("order").order(list(bundles)))


@plugin.command("list", help="Requirements, installed versions and bundles (writes nothing).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@_target_options
@click.pass_obj
def plugin_list(args: _PluginArgs, as_json: bool, sub_profile: str | None,
                sub_home: str | None) -> None:
    args = args.also(sub_profile, sub_home)
    try:
        manager = args.manager("list")
        data = manager.describe()
    except DshError as exc:
        if not as_json:
            raise
        _fail_json("plugin list", args.profile, exc)
        raise click.exceptions.Exit(exc.exit_code) from exc

    def render(d: dict[str, Any]) -> str:
        lines = [f"bundles: {', '.join(d['bundles'])}"]
        for r in d["requirements"]:
            state = f"{r['distribution']} {r['version']}" if r["installed"] else "not installed"
            extra = f" (bundles: {', '.join(r['bundles'])})" if r["bundles"] else ""
            lines.append(f"{r['requirement']}\t{state}{extra}")
        return "\n".join(lines) + "\n"

    _emit("plugin list", manager.name, as_json, data, render)


@plugin.command("new", help="Write a new plugin package NAME (one tool, its bundle, a test) "
                "to start from; see docs/plugins.md.")
@click.argument("name")
@click.option("--dir", "where", default=".", show_default=True,
              help="The folder to create NAME in.")
@click.option("--backend", type=click.Choice(["setuptools", "hatchling"]),
              default="setuptools", show_default=True, help="The package's build backend.")
@_target_options
@click.pass_obj
def plugin_new(args: _PluginArgs, name: str, where: str, backend: str,
               sub_profile: str | None, sub_home: str | None) -> None:
    from dsh.cli import scaffold

    args = args.also(sub_profile, sub_home)
    if args.profile is not None:
        raise UsageError("dsh plugin new writes a package and takes no --profile; add it to "
                         f"a profile afterwards: dsh plugin --profile {args.profile} add "
                         f"./{name}")
    folder = scaffold.create(name, Path(where), backend=backend)
    shown = str(folder) if Path(where).is_absolute() else os.path.join(
        ".", os.path.relpath(folder))
    sys.stdout.write(f"created {shown}/ (plugin {name}, {backend})\n"
                     f"next: pip install -e '{shown}[test]' && python -m pytest -q {shown}\n"
                     f"      dsh plugin --profile mine add {shown}\n")


@group.command(help="Trust a project folder (default: the current one): its own .env may "
                    "then set provider base URLs, proxies, CA bundles and DSH_POSTGRES_DSN "
                    "as they are now (dsh otherwise ignores them there; a later change needs "
                    "dsh trust again). Recorded in $DSH_HOME/trusted.toml.")
@click.argument("path", required=False)
@click.option("--list", "show", is_flag=True, help="List the trusted folders.")
@click.option("--remove", "remove", metavar="PATH", default=None,
              help="Stop trusting PATH.")
@_home_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def trust(inv: Invocation, path: str | None, show: bool, remove: str | None,
          home: str | None, as_json: bool) -> None:
    from dsh.config import trust as trust_mod

    if sum((show, remove is not None, path is not None)) > 1:
        raise UsageError("give one of PATH, --list or --remove PATH")
    home_path = resolve_home(home or inv.home)
    if show:
        data: dict[str, Any] = {"folders": trust_mod.folders(home_path)}
        _emit("trust", None, as_json, data,
              lambda d: "".join(f"{f}\n" for f in d["folders"]))
        return
    if remove is not None:
        trust_mod.remove(home_path, Path(remove))
        data = {"folder": os.path.realpath(remove), "trusted": False}
        _emit("trust", None, as_json, data, lambda d: f"no longer trusted: {d['folder']}\n")
        return
    folder = Path(path) if path is not None else Path.cwd()
    change = trust_mod.add(home_path, folder)
    data = {"folder": os.path.realpath(folder), "trusted": True, "change": change}
    words = {"added": "trusted", "updated": "trusted (its .env's routing settings as they "
             "are now)", "unchanged": "already trusted"}
    _emit("trust", None, as_json, data, lambda d: f"{words[d['change']]}: {d['folder']}\n")


@group.group(help="A profile's stored sessions: list, show and remove them, and move them "
                  "between stores (SQLite, PostgreSQL) as JSON Lines.")
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
    from dsh.cli.sessionio import export_sessions

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
    from dsh.cli.sessionio import import_sessions

    summary, complete = import_sessions(resolve_home(home or inv.home), profile, list(patches),
                                        Path.cwd(), source)
    sys.stdout.write(summary)
    if not complete:
        raise click.exceptions.Exit(1)


@group.command(
    help="Run one command under the profile's shell policy exactly as the model's would run "
         "(rung, network allow-list, limits, environment); say on stderr which sandbox "
         "applied, and exit with the command's status. Example: dsh sandbox -- bash -c "
         "'curl -sI https://pypi.org'.",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_home_option
@click.option("--profile", "profile", default="sdk", show_default=True)
@click.option("--patch", "patches", multiple=True, help="Extra patch layers, in order.")
@click.option("--row", "row", default=None, help="The shell row (default: the first "
                                                 "enabled tools-shell row).")
@click.option("--quiet", is_flag=True, help="No rung and policy lines (notes still shown).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.pass_obj
def sandbox(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
            row: str | None, quiet: bool, command: tuple[str, ...]) -> None:
    from dsh.cli import sandboxrun

    code = sandboxrun.run(resolve_home(home or inv.home), profile, list(patches), Path.cwd(),
                          list(command), row=row, quiet=quiet)
    raise click.exceptions.Exit(code)


@sessions.command("list", help="The stored sessions, newest first: id, when updated, turns, "
                               "cost, the runtime holding it (if one does), workspace, "
                               "title. Reads no log.")
@_home_option
@_profile_option
@_patch_option
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the N sessions updated last.")
@click.option("--here", is_flag=True, help="Only the sessions of this workspace (the current "
                                           "directory).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def sessions_list(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
                  limit: int | None, here: bool, as_json: bool) -> None:
    from dsh.cli.sessionview import list_sessions

    with _json_failure("sessions list", profile, as_json):
        list_sessions(resolve_home(home or inv.home), profile, list(patches), Path.cwd(),
                      limit=limit, here=here, as_json=as_json, out=sys.stdout)


@sessions.command("show", help="One session's transcript: prompts, answers (Markdown, rendered "
                               "on a terminal when rich is installed), tool calls and results, "
                               "each turn's usage and cost. Read a page at a time. ID may be "
                               "the start of one (4 characters or more).")
@_home_option
@_profile_option
@_patch_option
@click.argument("session_id", metavar="ID")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print Markdown source.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document: the session's summary and its events.")
@click.pass_obj
def sessions_show(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
                  session_id: str, as_markdown: bool, as_json: bool) -> None:
    from dsh.cli.sessionview import show_session

    if as_json and as_markdown:
        raise UsageError("give one of --json and --markdown")
    form = "json" if as_json else "markdown" if as_markdown else "plain"
    if form == "plain" and sys.stdout.isatty():
        import importlib.util

        if importlib.util.find_spec("rich") is not None:
            form = "rich"
    with _json_failure("sessions show", profile, as_json):
        show_session(resolve_home(home or inv.home), profile, list(patches), Path.cwd(),
                     session_id, form=form, out=sys.stdout)


@sessions.command("rm", help="Remove sessions (their logs, goals and workspaces). Asks first; "
                             "a session a running runtime holds is refused. An ID may be the "
                             "start of one (4 characters or more).")
@_home_option
@_profile_option
@_patch_option
@click.argument("session_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed without a terminal).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def sessions_rm(inv: Invocation, home: str | None, profile: str, patches: tuple[str, ...],
                session_ids: tuple[str, ...], yes: bool, as_json: bool) -> None:
    from dsh.cli.sessionview import remove_sessions

    with _json_failure("sessions rm", profile, as_json):
        refused = remove_sessions(resolve_home(home or inv.home), profile, list(patches),
                                  Path.cwd(), list(session_ids), yes=yes, as_json=as_json,
                                  ask=_ask, out=sys.stdout)
    if refused and as_json:  # the document lists them
        raise click.exceptions.Exit(1)
    if refused:
        raise DshError("not removed: " + "; ".join(refused))


@contextlib.contextmanager
def _json_failure(command: str, profile: str, as_json: bool) -> Iterator[None]:
    """With ``--json``, a failure is one JSON document (``ok: false``) and its exit code;
    without, it goes to the launcher's one handler."""
    try:
        yield
    except DshError as exc:
        if not as_json:
            raise
        _fail_json(command, profile, exc)
        raise click.exceptions.Exit(exc.exit_code) from exc


def _ask(question: str) -> bool:
    """Ask on the terminal (the question on stderr, so stdout stays the command's)."""
    sys.stderr.write(question)
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def run_subcommand(inv: Invocation) -> int:
    """Run ``inv.subcommand`` with its arguments and return its exit code (click hands
    back the code of an ``Exit``, raised or its own); click errors become UsageError."""
    assert inv.subcommand is not None  # dsh.cli.main runs only a named subcommand here
    try:
        code = group.main([inv.subcommand, *inv.app_args], prog_name="dsh", obj=inv,
                          standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx else "")
        return 0
    except click.UsageError as exc:
        raise UsageError(exc.format_message()) from exc
    except click.Abort as exc:
        raise KeyboardInterrupt from exc
    return code if isinstance(code, int) else 0
