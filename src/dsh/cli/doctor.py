"""``dsh doctor``: every check of a home and profile, as one document.

Checks never start plugins: they read files, compose, and import plugin classes to read
their manifests. What a row needs checked beyond that (a sandbox that must work here, a
server to reach under ``--live``) its plugin says itself, through the ``diagnose``
capability (:class:`dsh.runtime.kernel.plugin.Plugin`): the doctor names no plugin and imports
none of their modules. A check is ``ok``, ``warn`` (a failure only under ``--strict``)
or ``fail``; the command exits 1 when any check fails, 0 otherwise. Messages never
contain a secret value or an absolute path. Nothing is written: an interrupted ``dsh
plugin`` is reported, and repaired by ``dsh plugin``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.cli.machine import display_path
from dsh.core import carriers
from dsh.core.distribution import RUNTIME_DIST, python_hint, runtime_hint

if TYPE_CHECKING:
    from dsh.core.launch import EnvSnapshot
from dsh.core.errors import DshError


@dataclass
class Check:
    """One check result."""

    id: str
    status: str
    message: str

    def to_json(self) -> dict[str, str]:
        """The check as it appears in ``data.checks``."""
        return {"id": self.id, "status": self.status, "message": self.message}


class Doctor:
    """Runs the checks for one home and profile and collects the results."""

    def __init__(self, home: Path, profile: str, patches: list[str], cwd: Path,
                 *, strict: bool, provider: str | None = None,
                 all_routes: bool = False) -> None:
        self.home = home
        self.profile = profile
        self.patches = patches
        self.cwd = cwd
        self.strict = strict
        self.provider = provider
        self.all_routes = all_routes
        self.checks: list[Check] = []

    def add(self, check_id: str, status: str, message: str) -> None:
        """Record a check; credentials inside URLs (an MCP server's ``?key=``) are masked."""
        from dsh.core.redact import redact

        self.checks.append(Check(check_id, status, redact(message)))

    def scrub(self, text: str) -> str:
        """Replace absolute home/cwd prefixes in a message."""
        return text.replace(str(self.home), "$DSH_HOME").replace(str(self.cwd), "$CWD")

    def run(self, *, live: bool) -> dict[str, Any]:
        """Run every check; the ``data`` of the envelope."""
        if self.check_home():
            resolved = self.check_profile()
            if resolved is not None:
                env, plugins = self.check_plugins_and_env(resolved)
                if live:
                    self.check_live()
                self.check_rows(resolved, env, plugins, live=live)
        self.check_carriers()
        checks = sorted(self.checks, key=lambda c: c.id)
        failed = [c for c in checks if c.status == "fail" or (self.strict and c.status == "warn")]
        return {"checks": [c.to_json() for c in checks], "failed": len(failed),
                "strict": self.strict}

    def check_home(self) -> bool:
        """Whether the home can be written, creating nothing: a home that does not exist
        yet is fine when the first run can create it."""
        if not self.home.exists():
            parent = next((p for p in self.home.parents if p.exists()), None)
            if parent is not None and parent.is_dir() and os.access(parent, os.W_OK):
                self.add("home.writable", "ok", "not created yet; the first run creates it")
                return True
            self.add("home.writable", "fail", "does not exist and cannot be created "
                     f"(no writable {parent})")
            return False
        try:
            if not self.home.is_dir():
                raise OSError(f"{self.home}: exists and is not a directory")
            with tempfile.NamedTemporaryFile(dir=self.home, prefix=".doctor-"):
                pass
        except OSError as exc:
            self.add("home.writable", "fail", self.scrub(str(exc)))
            return False
        self.add("home.writable", "ok", "the home exists and is writable")
        return True

    def check_profile(self) -> Any:
        from dsh.config.resolve import resolve

        try:
            resolved = resolve(self.home, self.profile, self.patches, self.cwd,
                                      seed=False)
        except DshError as exc:
            self.add("profile.resolvable", "fail", self.scrub(str(exc)))
            return None
        self.add("profile.resolvable", "ok",
                 f"profile {self.profile!r} ({resolved.profile.patch_reload})")
        for name, path in resolved.files.bundles:
            self.add(f"bundle.{name}", "ok",
                     f"found at {display_path(path, self.home, self.cwd)}")
        for layer in resolved.tree.layers:
            label = layer.source if layer.kind == "bundle" else display_path(
                Path(layer.source), self.home, self.cwd)
            self.add(f"layer.{layer.kind}.{label}", "ok",
                     f"parses ({len(layer.operations)} operations)")
        self.check_interrupted(resolved.profile)
        if resolved.tree.warnings:
            self.add("patch.warnings", "warn",
                     self.scrub("; ".join(resolved.tree.warnings)))
        else:
            self.add("patch.warnings", "ok", "no unknown ids or skipped operations")
        return resolved

    def check_interrupted(self, profile: Any) -> None:
        """``profile.plugins``, only when a ``dsh plugin`` command was killed part-way:
        what it left is reported here and cleared by the next ``dsh plugin`` change (the
        doctor, like every reading command, repairs nothing)."""
        from dsh.cli.plugins import leftovers
        from dsh.config.profiles import set_aside

        retired = set_aside(profile.path)
        fix = f"`dsh plugin --profile {profile.name} sync`"
        if retired is not None:
            self.add("profile.plugins", "warn", "a `dsh plugin` command was killed while "
                     "swapping the plugin folder: the profile runs on its previous plugins "
                     f"({display_path(retired, self.home)}) until {fix} puts them back")
        elif found := leftovers(self.home, profile.name):
            self.add("profile.plugins", "warn", f"{len(found)} leftover(s) of an interrupted "
                     f"`dsh plugin` command (staging folders, temporary files); {fix} or the "
                     "next change removes them")

    def check_plugins_and_env(self, resolved: Any) -> tuple[Any, dict[str, Any]]:
        """``plugin.<row id>`` (each enabled row's plugin loads) and ``env.<NAME>`` (each
        variable a plugin requires is set); the environment snapshot (None when a
        ``.env`` is broken) and the loaded plugin classes by row id."""
        from dsh.config.envsnapshot import snapshot
        from dsh.runtime.kernel.loader import add_plugin_dir
        from dsh.runtime.kernel.loader import resolve as resolve_plugin

        # Plugins load from the profile's plugin environment, exactly as the runtime does.
        add_plugin_dir(resolved.plugin_dir)

        env: EnvSnapshot | None = None
        try:
            env = snapshot(self.home, self.cwd, routing=resolved.tree.routing_names())
        except DshError as exc:
            self.add("env.files", "fail", self.scrub(str(exc)))
        else:
            if env.warnings:
                self.add("env.files", "warn", self.scrub("; ".join(env.warnings)))
        required: dict[str, list[str]] = {}
        plugins: dict[str, Any] = {}
        for row, disabled in resolved.tree.walk():
            if row.children is not None:
                continue
            if disabled:
                self.add(f"plugin.{row.id}", "ok", f"{row.name} (disabled, not loaded)")
                continue
            try:
                plugin_class = resolve_plugin(row.id, row.name)
            except DshError as exc:
                self.add(f"plugin.{row.id}", "fail", self.scrub(str(exc)))
                continue
            plugins[row.id] = plugin_class
            manifest = plugin_class.manifest
            self.add(f"plugin.{row.id}", "ok", f"{row.name} {manifest.version}")
            for name, var in manifest.env.items():
                if var.required and var.default is None:
                    required.setdefault(name, []).append(row.id)
        for name, rows in sorted(required.items()):
            present = env is not None and bool(env.get(name))
            origin = env.origin(name) if present and env is not None else None
            self.add(f"env.{name}", "ok" if present else "fail",
                     f"set ({origin if origin in ('environment', 'default') else '.env'})"
                     if present else f"not set; needed by {', '.join(rows)} "
                     f"(export {name}=... or add it to $DSH_HOME/.env)")
        return env, plugins

    def check_rows(self, resolved: Any, env: Any, plugins: dict[str, Any], *,
                   live: bool) -> None:
        """``config.<row id>`` (failing) for each enabled row whose config its plugin's
        schema refuses, as the runtime checks it at start (the profile does not start),
        else ``config.rows`` (ok); then the row's
        own checks, asked of its plugin (``diagnose``) with the row's config as the
        runtime would get it (tags resolved); ``--live`` lets a plugin reach what it
        depends on (a route's server, MCP servers, a database). With a ``.env`` that does
        not load (``env.files`` fails) the configs are not judged: its values are
        unknown."""
        from dsh.runtime.kernel.plugin import Checkup
        from dsh.runtime.kernel.schema import validate

        rows = resolved.tree.flat_rows(env or {}, self.home)
        checkup = Checkup(home=str(self.home), cwd=str(self.cwd), profile=self.profile,
                          env=env or {}, live=live, rows=rows, provider=self.provider,
                          all_routes=self.all_routes)
        judged = refused = 0
        for row in rows:
            plugin_class = plugins.get(row["id"])
            if row["disabled"] or plugin_class is None:
                continue
            if env is not None:
                judged += 1
                try:
                    validate(plugin_class.manifest.config_schema or {}, row["config"],
                             row_id=row["id"])
                except DshError as exc:
                    refused += 1
                    self.add(f"config.{row['id']}", "fail", self.scrub(
                        f"{exc}: the profile cannot start"))
                    continue
            try:
                found = plugin_class.diagnose(row["id"], row["config"], checkup)
            except Exception as exc:  # a plugin's fault: reported, the others still run
                self.add(f"plugin.{row['id']}.diagnose", "fail", self.scrub(
                    f"{type(exc).__name__}: {exc}"))
                continue
            for item in found:
                self.add(item.check, item.status, self.scrub(item.message))
        if judged and not refused:
            self.add("config.rows", "ok", f"the config of each enabled row ({judged}) fits "
                     "its plugin's schema")

    def check_live(self) -> None:
        from dsh.core import process

        # In the frozen carrier sys.executable is the dsh runtime itself.
        carrier = ([sys.executable] if carriers.running_frozen()
                   else process.python_command("dsh"))
        argv = [*carrier, "--home", str(self.home), "--profile",
                self.profile, *(a for p in self.patches for a in ("--patch", p)), "-h"]
        try:
            proc = process.run(argv, text=True, timeout=60, cwd=str(self.cwd))
        except OSError as exc:
            self.add("runtime.boot", "fail", f"the runtime cannot be started: "
                                             f"{exc.strerror or exc}")
            return
        if proc.timed_out:
            self.add("runtime.boot", "fail", "the runtime did not answer -h within 60 s")
            return
        if proc.returncode == 0:
            self.add("runtime.boot", "ok", "the runtime loads every plugin and prints its help")
        else:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            self.add("runtime.boot", "fail", self.scrub(f"exit {proc.returncode}: {tail}"))

    def check_carriers(self) -> None:
        """``carrier.<id>``: each way to run dsh. The one running this is available by
        definition, so the other missing is not a fault (ok, saying what it would add):
        an installation needs one carrier, and ``dsh`` refuses to start with neither."""
        for carrier in carriers.describe():
            status = "ok"
            if carrier["available"]:
                message = "available"
            elif carrier.get("frozen"):
                message = ("not available in the frozen runtime, which runs dsh here; "
                           f"`dsh plugin` needs it ({python_hint()})")
            elif carrier["id"] == "python":
                message = (f"the python runtime's packages are not installed "
                           f"({', '.join(carrier.get('missing', []))}; {python_hint()})")
            else:
                message = (f"{RUNTIME_DIST} not installed (optional: the python carrier runs "
                           f"dsh here; {runtime_hint()} adds the frozen runtime)")
            if carrier["id"] == "python" and not os.access(sys.executable, os.X_OK):
                status, message = "fail", "the Python interpreter is not executable"
            if carrier["id"] == "exe" and carrier["current"]:
                # Inside the frozen runtime dsh_runtime_bin is its bundled copy, without
                # the wheel's manifest; the python carrier verifies the installed files.
                status, message = "ok", "this process is the frozen runtime"
            elif carrier["id"] == "exe" and carrier["available"]:
                status, message = self.verify_exe()
            self.add(f"carrier.{carrier['id']}", status, message)

    def verify_exe(self) -> tuple[str, str]:
        """Check the installed runtime's files against its manifest's sha256 sums."""
        import dsh_runtime_bin

        try:
            bad = dsh_runtime_bin.verify()
            manifest = dsh_runtime_bin.manifest()
        except (OSError, ValueError) as exc:
            return "fail", f"dsh-runtime-bin is damaged: {type(exc).__name__}"
        if bad:
            return "fail", f"files failing their checksum: {', '.join(bad)}"
        if manifest.get("source", {}).get("dirty"):
            return "warn", f"{manifest.get('version')} built from a dirty tree"
        return "ok", f"{manifest.get('version')} ({manifest.get('platform')}), checksums verified"


def render(data: dict[str, Any], *, color: bool = False) -> str:
    """The text projection of the doctor document.

    Messages quote files, plugins' own words and servers' answers, so each goes through
    :func:`dsh.core.termtext.visible` (one line per check); ``color`` marks the status
    with dsh's own styling, added after.
    """
    from dsh.core.termstyle import Style
    from dsh.core.termtext import visible

    paint = Style(color).paint
    marks = {"ok": paint("ok  ", "green"), "warn": paint("WARN", "yellow"),
             "fail": paint("FAIL", "bold", "red")}
    lines = [f"[{marks[c['status']]}] {visible(c['id'], one_line=True)}: "
             f"{visible(c['message'], one_line=True)}" for c in data["checks"]]
    lines.append(f"{data['failed']} check(s) failed" if data["failed"] else "all checks passed")
    return "\n".join(lines) + "\n"
