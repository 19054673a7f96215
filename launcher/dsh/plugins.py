"""``dsh plugin --profile NAME add|remove|list|sync|order``: each profile's plugin environment.

A profile's plugins live in ``profiles/<name>/plugins/``, a ``pip install --target``
directory the runtime appends to its import path. Every change reinstalls *all* the
profile's requirements into a fresh directory beside it and swaps it in by rename only
after the install succeeded, so a failed install changes nothing: neither the directory
nor ``profile.toml``. A command killed part-way leaves at worst an unused staging folder,
or, between the swap's two renames, the old directory set aside: the next profile load
puts it back (:func:`restore_interrupted_swap`) and the next change clears the rest.
``profile.toml`` is edited with tomlkit, keeping the user's comments and layout. A file
lock per profile makes two ``dsh plugin`` commands run one after the other instead of
interleaving.

Bundles: every installed distribution declaring a ``dsh.bundles`` entry point adds its
bundles to the profile's list, in requirement order; bundles of distributions no longer
installed are dropped; shipped bundles (``dsh-*``) are never added or removed here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh import process, shipped
from dsh.bundles import GROUP as BUNDLE_GROUP
from dsh.errors import ConfigError, PluginError, UsageError
from dsh.home import ensure_dir
from dsh.process import python_command
from dsh.profiles import PROFILE_FILE, Profile, parse_profile_toml, profiles_dir, seed_template

BASE_BUNDLE = "dsh-base"
NEW_PROFILE = f"""\
# Created by `dsh plugin`: {BASE_BUNDLE} plus the bundles of this profile's plugins.
[profile]
bundles = ["{BASE_BUNDLE}"]  # applied in this order
patch-reload = "live"

[plugins]
requirements = []  # managed by `dsh plugin --profile NAME`
"""
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_OS_ERROR = re.compile(r"\[Errno \d+\] [^:'\"\]]+")
MESSAGE_LIMIT = 300
"""Characters of an installer's last line quoted when it names no clearer cause."""


def _note(text: str) -> None:
    sys.stderr.write(f"dsh: {text}\n")


def canonical(name: str) -> str:
    """A distribution name in PEP 503 form (``My_Pkg`` and ``my-pkg`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Installed:
    """One distribution in a plugin directory."""

    name: str
    version: str
    bundles: tuple[str, ...]
    source: str | None  # the local path it was installed from, if any


def installed(plugin_dir: Path) -> list[Installed]:
    """The distributions in ``plugin_dir``, sorted by name."""
    from importlib.metadata import distributions

    if not plugin_dir.is_dir():
        return []
    found = {}
    for dist in distributions(path=[str(plugin_dir)]):
        name = dist.metadata["Name"]
        if not name:
            continue
        bundles = tuple(sorted(ep.name for ep in dist.entry_points if ep.group == BUNDLE_GROUP))
        source = None
        direct = dist.read_text("direct_url.json")
        if direct:
            url = json.loads(direct).get("url", "")
            if url.startswith("file://"):
                source = os.path.normpath(url[len("file://"):])
        found.setdefault(canonical(name), Installed(name, dist.version, bundles, source))
    return sorted(found.values(), key=lambda d: canonical(d.name))


def _is_local(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or os.sep in spec or (
        os.altsep is not None and os.altsep in spec)


def normalize(spec: str, cwd: Path) -> str:
    """A requirement as recorded: local paths made absolute against the invoking cwd."""
    spec = spec.strip()
    if not spec:
        raise UsageError("an empty requirement")
    if _is_local(spec) or (cwd / spec).exists():
        path = Path(os.path.expanduser(spec))
        path = path if path.is_absolute() else cwd / path
        if not path.exists():
            raise UsageError(f"{spec}: no such file or directory ({path})")
        return os.path.normpath(path)
    return spec


def _owner(requirement: str, dists: list[Installed]) -> Installed | None:
    """The installed distribution a requirement stands for."""
    if _is_local(requirement):
        return next((d for d in dists if d.source == os.path.normpath(requirement)), None)
    match = _NAME.match(requirement)
    name = canonical(match.group(1)) if match else ""
    return next((d for d in dists if canonical(d.name) == name), None)


def _matches(requirement: str, name: str, cwd: Path, dists: list[Installed]) -> bool:
    """Whether ``name`` (as typed to ``remove``) designates ``requirement``."""
    if requirement == name:
        return True
    if _is_local(name):
        path = Path(os.path.expanduser(name))
        return requirement == os.path.normpath(path if path.is_absolute() else cwd / path)
    dist = _owner(requirement, dists)
    if dist is not None and canonical(dist.name) == canonical(name):
        return True
    match = _NAME.match(requirement)
    return not _is_local(requirement) and match is not None and (
        canonical(match.group(1)) == canonical(name))


class PluginManager:
    """The plugin environment of one profile (hold :meth:`lock` around every change)."""

    def __init__(self, home: Path, name: str) -> None:
        self.home = home
        self.name = name
        self.root = profiles_dir(home)
        self.path = self.root / name
        self.file = self.path / PROFILE_FILE
        self.plugin_dir = self.path / "plugins"

    # -- the profile -------------------------------------------------------------------

    def lock(self) -> Any:
        """An exclusive lock on this profile's plugin state (a file beside the profile)."""
        from filelock import FileLock

        ensure_dir(self.home)
        ensure_dir(self.root)
        return FileLock(str(self.root / f".{self.name}.plugins.lock"))

    def ensure_profile(self) -> Profile:
        """Load the profile, seeding a shipped template or creating one from dsh-base."""
        seed_template(self.home, self.name)
        if not self.file.is_file():
            staging = Path(tempfile.mkdtemp(prefix=f".{self.name}.", dir=self.root))
            try:
                (staging / PROFILE_FILE).write_text(NEW_PROFILE.replace("NAME", self.name),
                                                    encoding="utf-8")
                os.chmod(staging, 0o700)
                os.rename(staging, self.path)
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                if not self.file.is_file():
                    raise ConfigError(f"{self.path}: cannot create profile ({exc})") from exc
            else:
                _note(f"profile {self.name!r} did not exist: created from {BASE_BUNDLE} "
                      f"({self.file})")
        return parse_profile_toml(self.file, self.name)

    def check_writable(self) -> None:
        """A read-only profile folder is bad input (exit 2), found before any work."""
        for path in (self.path, self.file):
            if not os.access(path, os.W_OK):
                raise ConfigError(f"{path}: read-only; `dsh plugin` cannot change this profile")

    # -- operations --------------------------------------------------------------------

    def add(self, specs: list[str], cwd: Path) -> Profile:
        """Record and install ``specs`` with the profile's other requirements."""
        profile = self.ensure_profile()
        self.check_writable()
        requirements = list(profile.requirements)
        for spec in (normalize(s, cwd) for s in specs):
            if spec not in requirements:
                requirements.append(spec)
        return self._apply(profile, requirements, announce=[normalize(s, cwd) for s in specs])

    def remove(self, names: list[str], cwd: Path) -> Profile:
        """Drop requirements named by their text, their path or their distribution name."""
        profile = self.ensure_profile()
        self.check_writable()
        dists = installed(self.plugin_dir)
        requirements = list(profile.requirements)
        for name in names:
            match = [r for r in requirements if _matches(r, name, cwd, dists)]
            if not match:
                raise UsageError(f"{name}: not a requirement of profile {self.name!r} "
                                 f"({self.file})")
            requirements = [r for r in requirements if r not in match]
        return self._apply(profile, requirements, announce=[])

    def sync(self) -> Profile:
        """Reinstall exactly the recorded requirements."""
        profile = self.ensure_profile()
        self.check_writable()
        return self._apply(profile, list(profile.requirements), announce=[])

    def order(self, bundles: list[str]) -> Profile:
        """Rewrite the bundle order; every name must resolve and appear once."""
        from dsh.bundles import find_bundle

        profile = self.ensure_profile()
        self.check_writable()
        if not bundles:
            raise UsageError("order needs at least one bundle")
        if len(set(bundles)) != len(bundles):
            raise UsageError("order: a bundle is named twice")
        for name in bundles:
            find_bundle(name, plugin_dir=self.plugin_dir, profile_file=self.file)
        self._write(profile.requirements, bundles)
        return parse_profile_toml(self.file, self.name)

    def describe(self) -> dict[str, Any]:
        """Requirements, installed distributions and bundles, for ``list``."""
        profile = self.ensure_profile()
        dists = installed(self.plugin_dir)
        return {
            "bundles": list(profile.bundles),
            "requirements": [
                {"requirement": r, "installed": (d := _owner(r, dists)) is not None,
                 "distribution": d.name if d else None, "version": d.version if d else None,
                 "bundles": list(d.bundles) if d else []}
                for r in profile.requirements
            ],
            "installed": [{"name": d.name, "version": d.version, "bundles": list(d.bundles)}
                          for d in dists],
        }

    # -- the transaction ---------------------------------------------------------------

    def _apply(self, profile: Profile, requirements: list[str], announce: list[str]) -> Profile:
        """Install ``requirements`` fresh, then swap the directory and write the toml."""
        self._clear_leftovers()
        staging = Path(tempfile.mkdtemp(prefix=".plugins.", dir=self.path))
        try:
            if requirements:
                _install(requirements, staging)
            old = {b for d in installed(self.plugin_dir) for b in d.bundles}
            dists = installed(staging)
            bundles = self._bundles(profile.bundles, old, requirements, dists, announce)
            self._swap(staging)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        self._write(requirements, bundles)
        return parse_profile_toml(self.file, self.name)

    def _bundles(self, current: tuple[str, ...], old: set[str], requirements: list[str],
                 dists: list[Installed], announce: list[str]) -> list[str]:
        ordered: list[Installed] = []
        for requirement in requirements:
            dist = _owner(requirement, dists)
            if dist is None:
                continue
            if requirement in announce and not dist.bundles:
                _note(f"note: {dist.name} declares no {BUNDLE_GROUP} entry point; "
                      "kept as a plain dependency")
            if dist not in ordered:
                ordered.append(dist)
        ordered += [d for d in dists if d not in ordered]
        new = []
        for dist in ordered:
            for name in dist.bundles:
                if _shipped(name):
                    _note(f"note: {dist.name}: bundle {name!r} is a shipped name; ignored")
                elif name not in new:
                    new.append(name)
        kept = [b for b in current if _shipped(b) or b not in old or b in new]
        return kept + [b for b in new if b not in kept]

    def _clear_leftovers(self) -> None:
        """What killed commands left (holding the lock, so no live command owns any of
        it): restore a plugin directory set aside, drop staging folders and temp files."""
        _restore(self.path)
        for leftover in (*self.path.glob(".plugins.*"), *self.path.glob(".plugins-old.*")):
            shutil.rmtree(leftover, ignore_errors=True)
        for temp in self.path.glob(f".{PROFILE_FILE}.*"):
            temp.unlink(missing_ok=True)

    def _swap(self, staging: Path) -> None:
        """Put ``staging`` in place of the plugin directory (renames only)."""
        retired = None
        if self.plugin_dir.exists():
            retired = Path(tempfile.mkdtemp(prefix=".plugins-old.", dir=self.path))
            os.rename(self.plugin_dir, retired / "plugins")
        try:
            os.rename(staging, self.plugin_dir)
        except OSError:
            if retired is not None:
                os.rename(retired / "plugins", self.plugin_dir)
            raise
        finally:
            if retired is not None:
                shutil.rmtree(retired, ignore_errors=True)

    def _write(self, requirements: Any, bundles: list[str]) -> None:
        """Rewrite ``[profile] bundles`` and ``[plugins] requirements`` in place."""
        import tomlkit

        doc = tomlkit.parse(self.file.read_text(encoding="utf-8"))
        for table, key, values in (("profile", "bundles", bundles),
                                   ("plugins", "requirements", list(requirements))):
            section = doc.setdefault(table, tomlkit.table())
            item = section.get(key)
            if isinstance(item, list):  # tomlkit Array: keeps its trailing comment
                item.clear()
                item.extend(values)
            else:
                section[key] = values
        temp = self.file.with_name(f".{PROFILE_FILE}.{os.getpid()}")
        try:
            temp.write_text(tomlkit.dumps(doc), encoding="utf-8")
            os.replace(temp, self.file)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise ConfigError(f"{self.file}: cannot write ({exc})") from exc


def restore_interrupted_swap(profile_dir: Path) -> bool:
    """Put back the plugin directory of a ``dsh plugin`` killed in the middle of its swap.

    ``_swap`` moves the old directory into ``.plugins-old.*/`` and then the new one in
    place; killed between the two renames, it leaves a profile whose bundles no longer
    resolve. The old directory is complete (it was in use), so it goes back. Skipped
    while another ``dsh plugin`` holds the profile's lock: that one is swapping right
    now and finishes it. True when a directory was restored.
    """
    from filelock import FileLock, Timeout

    lock = FileLock(str(profile_dir.parent / f".{profile_dir.name}.plugins.lock"), timeout=0)
    try:
        with lock:
            return _restore(profile_dir)
    except (Timeout, OSError):  # busy, or a home nobody may write: leave it as it is
        return False


def _restore(profile_dir: Path) -> bool:
    plugin_dir = profile_dir / "plugins"
    if plugin_dir.exists():
        return False
    for retired in sorted(profile_dir.glob(".plugins-old.*/plugins")):
        os.rename(retired, plugin_dir)
        _note(f"restored {plugin_dir} (a `dsh plugin` command was killed while "
              "swapping it)")
        return True
    return False


def _shipped(bundle: str) -> bool:
    return (shipped.bundle_dir(bundle) / "patch.yml").is_file()


def _install(requirements: list[str], target: Path) -> None:
    """Install into ``target`` for this interpreter (uv when on PATH, else pip).

    Local paths build without isolation: their build backend comes from this
    environment, so a local plugin installs offline.
    """
    uv = shutil.which("uv")
    if uv:
        argv = [uv, "pip", "install", "--python", sys.executable, "--target", str(target)]
    else:
        argv = [*python_command("pip"), "install", "--target", str(target),
                "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
                "--quiet"]
    if any(_is_local(r) for r in requirements):
        argv.append("--no-build-isolation")
    try:
        result = process.run([*argv, *requirements], text=True)
    except OSError as exc:
        raise PluginError(f"installing {' '.join(requirements)} failed: cannot start "
                          f"{argv[0]} ({exc.strerror or exc}); nothing was changed") from exc
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        why = next((line for line in lines if "ERROR" in line), lines[-1] if lines else "")
        if why.strip() == "ERROR: Exception:":  # pip itself crashed (a full disk, say):
            causes = _OS_ERROR.findall(result.stderr)  # the last OS error is the cause
            why = causes[-1] if causes else lines[-1][:MESSAGE_LIMIT]
        raise PluginError(f"installing {' '.join(requirements)} failed: {why.strip()} "
                          "(nothing was changed)")
