"""``dsh doctor``: every check of a home and profile, as one document.

Checks never start plugins: they read files, compose, and import plugin classes to read
their manifests. A check is ``ok``, ``warn`` (a failure only under ``--strict``) or
``fail``; the command exits 1 when any check fails, 0 otherwise. Messages never contain a
secret value or an absolute path.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh import carriers
from dsh.distribution import RUNTIME_DIST, python_hint, runtime_hint
from dsh.errors import DshError
from dsh.machine import display_path


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
                 *, strict: bool) -> None:
        self.home = home
        self.profile = profile
        self.patches = patches
        self.cwd = cwd
        self.strict = strict
        self.checks: list[Check] = []

    def add(self, check_id: str, status: str, message: str) -> None:
        """Record a check; credentials inside URLs (an MCP server's ``?key=``) are masked."""
        from dsh.redact import redact

        self.checks.append(Check(check_id, status, redact(message)))

    def scrub(self, text: str) -> str:
        """Replace absolute home/cwd prefixes in a message."""
        return text.replace(str(self.home), "$DSH_HOME").replace(str(self.cwd), "$CWD")

    def run(self, *, live: bool) -> dict[str, Any]:
        """Run every check; the ``data`` of the envelope."""
        if self.check_home():
            resolved = self.check_profile()
            if resolved is not None:
                self.check_plugins_and_env(resolved)
                self.check_instructions()
                if live:
                    self.check_live()
                    self.check_route(resolved)
                    self.check_mcp(resolved)
                    self.check_rows(resolved)
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
        from dsh import launch

        try:
            resolved = launch.resolve(self.home, self.profile, self.patches, self.cwd,
                                      seed=False)
        except DshError as exc:
            self.add("profile.resolvable", "fail", self.scrub(str(exc)))
            return None
        self.add("profile.resolvable", "ok",
                 f"profile {self.profile!r} ({resolved.profile.patch_reload})")
        for name, path in resolved.files.bundles:
            self.add(f"bundle.{name}", "ok", f"found at {display_path(path, self.home)}")
        for layer in resolved.tree.layers:
            label = layer.source if layer.kind == "bundle" else display_path(
                Path(layer.source), self.home, self.cwd)
            self.add(f"layer.{layer.kind}.{label}", "ok",
                     f"parses ({len(layer.operations)} operations)")
        if resolved.tree.warnings:
            self.add("patch.warnings", "warn",
                     self.scrub("; ".join(resolved.tree.warnings)))
        else:
            self.add("patch.warnings", "ok", "no unknown ids or skipped operations")
        return resolved

    def check_plugins_and_env(self, resolved: Any) -> None:
        from dsh_runtime.loader import add_plugin_dir
        from dsh_runtime.loader import resolve as resolve_plugin

        from dsh.envsnapshot import snapshot

        # Plugins load from the profile's plugin environment, exactly as the runtime does.
        add_plugin_dir(resolved.profile.plugin_dir)

        try:
            env = snapshot(self.home, self.cwd, routing=resolved.tree.routing_names())
        except DshError as exc:
            self.add("env.files", "fail", self.scrub(str(exc)))
            env = None
        else:
            if env.warnings:
                self.add("env.files", "warn", self.scrub("; ".join(env.warnings)))
        required: dict[str, list[str]] = {}
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
            manifest = plugin_class.manifest
            self.add(f"plugin.{row.id}", "ok", f"{row.name} {manifest.version}")
            for name, var in manifest.env.items():
                if var.required and var.default is None:
                    required.setdefault(name, []).append(row.id)
        if any(row.name == "tools-search" and not off for row, off in resolved.tree.walk()):
            from dsh_runtime.tools.search import choose_backend

            kind = choose_backend("auto").kind
            self.add("tools.grep", "ok", {"companion": "ripgrep (the runtime's companion)",
                                          "path": "ripgrep (on PATH)"}.get(
                kind, "python fallback (no ripgrep found; slower on large trees)"))
        for row, off in resolved.tree.walk():
            if row.name == "tools-shell" and not off:
                self.check_sandbox(row, env)
        for name, rows in sorted(required.items()):
            present = env is not None and bool(env.get(name))
            origin = env.origin(name) if present and env is not None else None
            self.add(f"env.{name}", "ok" if present else "fail",
                     f"set ({origin if origin in ('environment', 'default') else '.env'})"
                     if present else f"not set; needed by {', '.join(rows)} "
                     f"(export {name}=... or add it to $DSH_HOME/.env)")

    def check_instructions(self) -> None:
        """The AGENTS.md files and skills a session of this profile would see in the cwd."""
        from dsh import instructions, skills

        files = instructions.load(str(self.home), str(self.cwd))
        for item in files:
            check_id = f"agents-md.{self.where(item.path)}"
            if item.problem is not None:
                self.add(check_id, "warn", f"skipped: {item.problem}")
            elif item.truncated:
                self.add(check_id, "warn", f"{item.scope}: {item.shown} of {item.size} bytes "
                         f"shown ({item.cap} cap)")
            else:
                self.add(check_id, "ok", f"{item.scope}: {item.size} bytes")
        if not files:
            self.add("agents-md", "ok", "none in $DSH_HOME nor from $CWD up to the project root")
        found = skills.discover(str(self.home), self.profile, str(self.cwd))
        for name, entry in found.skills.items():
            where = self.where(entry.path) + "".join(
                f" (overrides {self.where(p)})" for p in entry.overrides)
            if entry.problem is not None:
                self.add(f"skill.{name}", "warn", f"{where}: {entry.problem}")
            else:
                self.add(f"skill.{name}", "ok", f"{where}: {entry.description}")
        if not found.skills:
            self.add("skills", "ok", "none in $DSH_HOME/skills, the profile's skills nor the "
                     "project's .dsh/skills")
        for folder, problem in found.notes:
            self.add(f"skills.{self.where(folder)}", "warn", problem)

    def where(self, path: str) -> str:
        """``path`` relative to the home or the cwd, never absolute (ancestors as ``..``)."""
        shown = display_path(Path(path), self.home, self.cwd)
        if shown.startswith("<outside>/"):
            shown = "$CWD/" + Path(os.path.relpath(path, self.cwd)).as_posix()
        return shown

    def check_sandbox(self, row: Any, env: Any) -> None:
        """The shell row's sandbox policy, and whether this platform's sandbox really runs
        here (bubblewrap on Linux, Seatbelt on macOS; Windows has none).

        Unusable is a warning when commands then run unsandboxed (each result says so), and
        a failure when the row requires the sandbox, since every command would be refused.
        """
        from dsh_runtime.schema import validate
        from dsh_runtime.tools.sandbox import Policy, kind, probe
        from dsh_runtime.tools.shell import ShellTools, shell_family

        from dsh import tags

        check_id = f"sandbox.{row.id}"
        try:
            config = tags.resolve(row.values.get("config") or {}, env or {}, self.home)
            config = validate(ShellTools.manifest.config_schema or {}, config, row_id=row.id)
            policy = Policy.from_config(config["sandbox"], row_id=row.id)
        except DshError as exc:
            self.add(check_id, "fail", self.scrub(str(exc)))
            return
        self.check_limits(row.id, config)
        shell = {"posix": "bash -c", "powershell": "PowerShell",
                 "cmd": "cmd /c"}[shell_family(config.get("shell") or "")]
        if policy.mode == "off":
            self.add(check_id, "ok", f"off: commands run unsandboxed, as configured "
                                     f"({shell})")
            return
        found = probe(policy)
        if found.usable:
            name = {"bubblewrap": "bubblewrap", "seatbelt": "Seatbelt (sandbox-exec)"}[kind()]
            self.add(check_id, "ok", f"{policy.describe()}; {name} works here ({shell})")
        elif policy.required:
            self.add(check_id, "fail", self.scrub(f"{policy.describe()}, but {found.reason}: "
                                                  "every command will be refused"))
        else:
            self.add(check_id, "warn", self.scrub(f"{policy.describe()}, but {found.reason}: "
                                                  "commands run unsandboxed"))

    def check_limits(self, row_id: str, config: Any) -> None:
        """``limits.<row>``: how the shell row's resource limits are enforced here.

        A cgroup bounds a command's processes and memory together (ok); rlimits bound each
        process alone, and root ignores the process limit (warn then); none is a warning.
        """
        from dsh.limits import Limits
        from dsh.process import enforcement

        check_id = f"limits.{row_id}"
        try:
            limits = Limits.from_config(config.get("limits"), row_id=row_id)
        except DshError as exc:
            self.add(check_id, "fail", self.scrub(str(exc)))
            return
        found = enforcement(limits)
        root = hasattr(os, "getuid") and os.getuid() == 0
        if found.how == "none" or (found.how == "rlimits" and root and limits.processes):
            extra = (" (running as root, which RLIMIT_NPROC does not bound: processes are "
                     "not limited)" if found.how == "rlimits" else "")
            self.add(check_id, "warn", f"{found.how}: {found.detail}{extra}")
        else:
            self.add(check_id, "ok", f"{found.how}: {found.detail}")

    def check_live(self) -> None:
        from dsh import process

        # In the frozen carrier sys.executable is the dsh runtime itself.
        carrier = ([sys.executable] if carriers.running_frozen()
                   else process.python_command("dsh"))
        argv = [*carrier, "--home", str(self.home), "--profile",
                self.profile, *(a for p in self.patches for a in ("--patch", p)), "-h"]
        try:
            proc = process.run(argv, text=True, timeout=60, cwd=self.cwd)
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

    def check_route(self, resolved: Any) -> None:
        """``--live``: the model route the profile's sessions use by default (the agent
        row's ``default_route``): its key is set, its server answers, and, where the API
        lists models (``/models``), it lists the route's default model. Checked with the
        route's own code, as a session's first request would be."""
        import asyncio

        from dsh_runtime.agent.service import AgentConfig
        from dsh_runtime.loader import resolve as resolve_plugin
        from dsh_runtime.schema import validate

        from dsh import tags
        from dsh.envsnapshot import snapshot

        leaves = [(row, off) for row, off in resolved.tree.walk() if row.children is None]
        agent = next((row for row, off in leaves if row.name == "agent-core" and not off), None)
        if agent is None:
            return
        route = (agent.values.get("config") or {}).get("default_route") \
            or AgentConfig().default_route
        try:
            env = snapshot(self.home, self.cwd)
        except DshError:
            env = {}  # check_plugins_and_env already reported the broken .env
        check_id = f"route.{route}"
        for row, off in leaves:
            config = row.values.get("config") or {}
            if off or not isinstance(config, dict) or not str(row.name).startswith("llm"):
                continue
            try:
                plugin_class = resolve_plugin(row.id, row.name)
            except DshError:
                continue  # check_plugins_and_env reported it
            schema = plugin_class.manifest.config_schema or {}
            default = (schema.get("properties", {}).get("route") or {}).get("default")
            if config.get("route", default) != route:
                continue
            try:
                values = validate(schema, tags.resolve(config, env, self.home), row_id=row.id)
            except DshError as exc:
                self.add(check_id, "fail", self.scrub(str(exc)))
                return
            route_for = getattr(plugin_class, "route_for", None)
            if route_for is None:
                self.add(check_id, "ok", f"route '{route}' (row '{row.id}', {row.name}) "
                         "has no server to reach")
                return
            try:
                probe = route_for(values, env=env, home=str(self.home), row_id=row.id)
                results = asyncio.run(probe.probe())
            except DshError as exc:
                self.add(check_id, "fail", self.scrub(str(exc)))
                return
            for name, status, message in results:
                self.add(f"{check_id}.{name}", status,
                         self.scrub(f"{message} (route '{route}', row '{row.id}')"))
            return
        self.add(check_id, "fail", f"no enabled row publishes route '{route}', the agent "
                 "row's default_route")

    def check_mcp(self, resolved: Any) -> None:
        """``--live``: connect to every MCP server the profile configures, bounded.

        Each server is started, initialized and asked for its tools, then closed, exactly
        as a session would (the runtime's own connection code), so "reachable" here means
        a session will get its tools.
        """
        import asyncio

        from dsh import tags
        from dsh.envsnapshot import snapshot

        rows = [row for row, off in resolved.tree.walk()
                if row.name == "mcp-servers" and not off and row.children is None]
        if not rows:
            return
        from dsh_runtime.mcp.config import from_row
        from dsh_runtime.mcp.connection import probe
        from dsh_runtime.mcp.plugin import McpServers
        from dsh_runtime.schema import validate

        try:
            env = snapshot(self.home, self.cwd, routing=resolved.tree.routing_names())
        except DshError:
            env = {}  # check_plugins_and_env already reported the broken .env
        for row in rows:
            try:
                config = tags.resolve(row.values.get("config") or {}, env, self.home)
                config = validate(McpServers.manifest.config_schema or {}, config,
                                  row_id=row.id)
                specs = from_row(row.id, config)
            except DshError as exc:
                self.add(f"mcp.{row.id}", "fail", self.scrub(str(exc)))
                continue
            if not specs:
                self.add(f"mcp.{row.id}", "ok", "no servers configured")
            for spec in specs:
                ok, message = asyncio.run(probe(spec, env, str(self.cwd)))
                self.add(f"mcp.{row.id}.{spec.name}", "ok" if ok else "fail",
                         self.scrub(message))

    def check_rows(self, resolved: Any) -> None:
        """``--live``: each enabled row's own checks, asked of its plugin (``diagnose``,
        e.g. a session store's database: reachable, schema version, lease table), shown
        as ``plugin.<row id>.<check>``. The doctor names no plugin here."""
        from dsh_runtime.loader import resolve as resolve_plugin
        from dsh_runtime.schema import validate

        from dsh import tags
        from dsh.envsnapshot import snapshot

        try:
            env = snapshot(self.home, self.cwd)
        except DshError:
            env = {}  # check_plugins_and_env already reported the broken .env
        for row, off in resolved.tree.walk():
            if off or row.children is not None or row.name is None:
                continue
            try:
                plugin = resolve_plugin(row.id, row.name)
            except DshError:
                continue  # reported as plugin.<row id>
            diagnose = getattr(plugin, "diagnose", None)
            if diagnose is None:
                continue
            try:
                config = validate(plugin.manifest.config_schema or {},
                                  tags.resolve(row.values.get("config") or {}, env, self.home),
                                  row_id=row.id)
                found = diagnose(row.id, config, home=str(self.home), env=env)
            except Exception as exc:
                self.add(f"plugin.{row.id}.live", "fail", self.scrub(str(exc)))
                continue
            for item in found:
                self.add(f"plugin.{row.id}.{item.check}", item.status, self.scrub(item.message))

    def check_carriers(self) -> None:
        for carrier in carriers.describe():
            status = "ok" if carrier["available"] else "warn"
            if carrier["available"]:
                message = "available"
            elif carrier["id"] == "python":
                message = (f"the python runtime's packages are not installed "
                           f"({', '.join(carrier.get('missing', []))}; {python_hint()})")
            else:
                message = f"{RUNTIME_DIST} not installed ({runtime_hint()})"
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


def render(data: dict[str, Any]) -> str:
    """The text projection of the doctor document."""
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    lines = [f"[{marks[c['status']]}] {c['id']}: {c['message']}" for c in data["checks"]]
    lines.append(f"{data['failed']} check(s) failed" if data["failed"] else "all checks passed")
    return "\n".join(lines) + "\n"
