"""``dsh plugin --profile NAME add|remove|list|sync|order``: each profile's plugin environment.

A profile's plugins live in ``profiles/<name>/plugins/``, a ``pip install --target``
directory the runtime appends to its import path. Every change reinstalls *all* the
profile's requirements into a fresh directory beside it (:mod:`dsh.cli.installer`), checks
what it added, and swaps it in by rename only then, so a failed command changes nothing:
neither the directory nor ``profile.toml``. A profile the command creates (``add`` on a
new name, from a shipped template) is built whole in a staging folder and renamed into
place at the end. A command killed part-way leaves at worst an unused staging folder, or,
between the swap's two renames, the old directory set aside: launches and reading
commands use it where it is (:func:`dsh.config.profiles.set_aside`; loading a profile
never repairs), ``dsh doctor`` reports it, and the next change here puts it back and
clears the rest.
``profile.toml`` is edited with tomlkit, keeping the user's comments and layout. A lock
per profile (:mod:`dsh.cli.profilelock`, removed on release) makes two ``dsh plugin`` commands
run one after the other instead of interleaving.

What ``add`` checks before anything is swapped in: every distribution it was asked for
declares a ``dsh.bundles`` entry point (unless ``--no-bundle``), each of its bundles has a
``patch.yml`` that parses, and every row those bundles insert names a plugin that imports
and declares a valid manifest. Reading commands (``list``) never create anything.

Bundles: every installed distribution declaring a ``dsh.bundles`` entry point adds its
bundles to the profile's list, in requirement order; bundles of distributions no longer
installed are dropped; shipped bundles (``dsh-*``) are never added or removed here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from dsh.cli.installer import install, is_local
from dsh.cli.profilelock import ProfileLock, lock_path
from dsh.config import shipped
from dsh.config.bundles import BUNDLE_FILE
from dsh.config.bundles import GROUP as BUNDLE_GROUP
from dsh.config.profiles import (
    PATCH_FILE,
    PLUGIN_DIR,
    PROFILE_FILE,
    Profile,
    parse_profile_text,
    parse_profile_toml,
    profiles_dir,
    read_profile_text,
    set_aside,
    shipped_profile,
    unknown_profile,
)
from dsh.core.errors import ConfigError, DshError, UsageError
from dsh.core.home import ensure_dir

DEFAULT_TEMPLATE = "headless"
"""The template ``add`` starts a new profile from: a runnable application (one task)."""
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_NEW_PREFIX = "plugin-new."


def _note(text: str) -> None:
    from dsh.core.termtext import visible  # notes quote pip's output and package names

    sys.stderr.write(f"dsh: {visible(text)}\n")


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
    bundle_targets: tuple[tuple[str, str], ...] = ()  # (bundle, entry point value)


def installed(plugin_dir: Path) -> list[Installed]:
    """The distributions in ``plugin_dir``, sorted by name."""
    from importlib.metadata import distributions

    if not plugin_dir.is_dir():
        return []
    found: dict[str, Installed] = {}
    for dist in distributions(path=[str(plugin_dir)]):
        name = dist.metadata["Name"]
        if not name:
            continue
        targets = tuple(sorted((ep.name, ep.value) for ep in dist.entry_points
                               if ep.group == BUNDLE_GROUP))
        source = None
        direct = dist.read_text("direct_url.json")
        if direct:
            url = json.loads(direct).get("url", "")
            if url.startswith("file://"):
                source = os.path.normpath(url[len("file://"):])
        found.setdefault(canonical(name), Installed(
            name, dist.version, tuple(b for b, _ in targets), source, targets))
    return sorted(found.values(), key=lambda d: canonical(d.name))


def normalize(spec: str, cwd: Path) -> str:
    """A requirement as recorded: local paths made absolute against the invoking cwd."""
    spec = spec.strip()
    if not spec:
        raise UsageError("an empty requirement")
    if is_local(spec) or (cwd / spec).exists():
        path = Path(os.path.expanduser(spec))
        path = path if path.is_absolute() else cwd / path
        if not path.exists():
            raise UsageError(f"{spec}: no such file or directory ({path})")
        if path.is_dir() and not any((path / f).is_file() for f in ("pyproject.toml",
                                                                       "setup.py")):
            raise UsageError(f"{spec}: not a Python project (no pyproject.toml or setup.py "
                             f"in {path})")
        return os.path.normpath(path)
    return spec


def _owner(requirement: str, dists: list[Installed]) -> Installed | None:
    """The installed distribution a requirement stands for."""
    if is_local(requirement):
        return next((d for d in dists if d.source == os.path.normpath(requirement)), None)
    match = _NAME.match(requirement)
    name = canonical(match.group(1)) if match else ""
    return next((d for d in dists if canonical(d.name) == name), None)


def _matches(requirement: str, name: str, cwd: Path, dists: list[Installed]) -> bool:
    """Whether ``name`` (as typed to ``remove``) designates ``requirement``."""
    if requirement == name:
        return True
    if is_local(name):
        path = Path(os.path.expanduser(name))
        return requirement == os.path.normpath(path if path.is_absolute() else cwd / path)
    dist = _owner(requirement, dists)
    if dist is not None and canonical(dist.name) == canonical(name):
        return True
    match = _NAME.match(requirement)
    return not is_local(requirement) and match is not None and (
        canonical(match.group(1)) == canonical(name))


class State(NamedTuple):
    """A profile as a command finds it: ``text`` of its ``profile.toml``, parsed as
    ``profile``; ``exists`` False when the command would create it (its folder and file
    written only when the command succeeds), ``origin`` then says from what."""

    text: str
    profile: Profile
    exists: bool
    origin: str | None = None


def new_profile_text(name: str, template: str) -> str:
    """``profile.toml`` of a profile ``dsh plugin`` creates from shipped ``template``."""
    source = shipped.template_dir(template) / PROFILE_FILE
    if not source.is_file():
        import difflib

        names = shipped.template_names()
        near = difflib.get_close_matches(template, names, n=1)
        guess = f"; did you mean {near[0]!r}?" if near else ""
        raise UsageError(f"--from {template}: not a shipped template{guess} "
                         f"(templates: {', '.join(names)})")
    base = parse_profile_toml(source, template)
    bundles = ", ".join(f'"{b}"' for b in base.bundles)
    return (f"# Created by `dsh plugin` from the shipped `{template}` template; the bundles "
            "of this\n# profile's plugins follow the template's. Edit freely.\n"
            f"[profile]\nbundles = [{bundles}]  # applied in this order\n"
            f'patch-reload = "{base.patch_reload}"\n\n'
            f"[plugins]\nrequirements = []  # managed by `dsh plugin --profile {name}`\n")


class PluginManager:
    """The plugin environment of one profile; every change runs in :meth:`_changing`."""

    def __init__(self, home: Path, name: str) -> None:
        self.home = home
        self.name = name
        self.root = profiles_dir(home)
        self.path = self.root / name
        self.file = self.path / PROFILE_FILE
        self.plugin_dir = self.path / "plugins"

    # -- the profile -------------------------------------------------------------------

    def current(self, *, template: str | None = None) -> State:
        """The profile as it stands, written nowhere: the home's file, else a shipped
        template not seeded yet, else (with ``template``) a new one from that template;
        otherwise the unknown-profile error."""
        if self.file.is_file():
            text = read_profile_text(self.file)
            return State(text, parse_profile_text(text, self.file, self.name), True)
        found = shipped_profile(self.home, self.name)
        if found is not None:
            text = (shipped.template_dir(self.name) / PROFILE_FILE).read_text(encoding="utf-8")
            return State(text, found, False, f"the shipped {self.name} template")
        if template is None:
            raise unknown_profile(self.home, self.name)
        text = new_profile_text(self.name, template)
        return State(text, parse_profile_text(text, self.file, self.name), False,
                     f"the {template} template")

    def check_writable(self) -> None:
        """A read-only profile folder is bad input (exit 2), found before any work."""
        for path in (self.path, self.file):
            if path.exists() and not os.access(path, os.W_OK):
                raise ConfigError(f"{path}: read-only; `dsh plugin` cannot change this profile")

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """Hold the profile's lock; a failure takes back the folders this made."""
        made = [d for d in (self.home, self.root) if not d.exists()]
        try:
            for folder in (self.home, self.root):
                ensure_dir(folder)
            lock = ProfileLock(lock_path(self.root, self.name))
            try:
                lock.acquire()
            except PermissionError as exc:
                raise ConfigError(f"{exc.filename or self.root}: read-only; `dsh plugin` "
                                  "cannot change this profile") from exc
            try:
                yield
            finally:
                lock.release()
        except BaseException:
            for folder in reversed(made):
                with contextlib.suppress(OSError):  # only when empty: nothing else is lost
                    folder.rmdir()
            raise

    # -- operations --------------------------------------------------------------------

    def add(self, specs: list[str], cwd: Path, *, template: str | None = None,
            plain: bool = False) -> Profile:
        """Record and install ``specs`` with the profile's other requirements; a new
        profile starts from ``template`` (default :data:`DEFAULT_TEMPLATE`)."""
        wanted = [normalize(s, cwd) for s in specs]
        if template is not None:
            new_profile_text(self.name, template)  # an unknown template is bad input now
        with self._changing():
            state = self.current(template=template or DEFAULT_TEMPLATE)
            if state.exists and template is not None:
                _note(f"note: profile {self.name!r} exists; --from {template} applies only "
                      "to a new one")
            self.check_writable()
            requirements = list(state.profile.requirements)
            requirements += [s for s in dict.fromkeys(wanted) if s not in requirements]
            profile = self._apply(state, requirements, added=wanted, plain=plain, cwd=cwd)
        if not state.exists:
            _note(f"created profile {self.name!r} from {state.origin} "
                  f"({self.file})")
        return profile

    def remove(self, names: list[str], cwd: Path) -> Profile:
        """Drop requirements named by their text, their path or their distribution name."""
        with self._changing():
            state = self.current()
            self.check_writable()
            dists = installed(state.profile.plugin_dir)
            requirements = list(state.profile.requirements)
            for name in names:
                match = [r for r in requirements if _matches(r, name, cwd, dists)]
                if not match:
                    raise UsageError(f"{name}: not a requirement of profile {self.name!r} "
                                     f"({self.file})")
                requirements = [r for r in requirements if r not in match]
            return self._apply(state, requirements)

    def sync(self) -> Profile:
        """Reinstall exactly the recorded requirements."""
        with self._changing():
            state = self.current()
            self.check_writable()
            return self._apply(state, list(state.profile.requirements))

    def order(self, bundles: list[str]) -> Profile:
        """Rewrite the bundle order; every name must resolve and appear once, and every
        bundle of an installed plugin must be there: ``order`` orders, and a plugin's
        bundle left out would come back with the next ``add``, ``remove`` or ``sync``
        (``remove`` is how a plugin goes). Shipped bundles may be left out."""
        from dsh.config.bundles import find_bundle

        if not bundles:
            raise UsageError("order needs at least one bundle")
        if len(set(bundles)) != len(bundles):
            raise UsageError("order: a bundle is named twice")
        with self._changing():
            state = self.current()
            self.check_writable()
            for name in bundles:
                find_bundle(name, plugin_dir=state.profile.plugin_dir, profile_file=self.file)
            left_out = [(b, d) for d in installed(state.profile.plugin_dir)
                        for b in d.bundles if not _shipped(b) and b not in bundles]
            if left_out:
                names = ", ".join(f"{b!r} (of {d.name} {d.version})" for b, d in left_out)
                dists = " ".join(dict.fromkeys(d.name for _, d in left_out))
                raise UsageError(
                    f"order leaves out {names}, installed in profile {self.name!r}: name "
                    f"every installed plugin's bundle (the order now: "
                    f"{' '.join(state.profile.bundles)}), or remove the plugin with "
                    f"`dsh plugin --profile {self.name} remove {dists}`")
            text = _render(state.text, state.profile.requirements, bundles)
            if state.exists:
                self._write(text)
            else:
                self._create(text, None)
            return parse_profile_toml(self.file, self.name)

    def describe(self) -> dict[str, Any]:
        """Requirements, installed distributions and bundles, for ``list`` (read only)."""
        profile = self.current().profile
        dists = installed(profile.plugin_dir)
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

    def _apply(self, state: State, requirements: list[str], *,
               added: Sequence[str] = (), plain: bool = False,
               cwd: Path | None = None) -> Profile:
        """Install ``requirements`` fresh, check what ``added`` brought (and, when it
        brought something, that every row of the profile it makes has a config its
        plugin accepts), then put the plugin directory and ``profile.toml`` in place (or
        the whole new profile)."""
        self._clear_leftovers()
        if self.path.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=".plugins.", dir=self.path))
            target = staging
        else:  # a new profile: built whole beside its place
            staging = Path(tempfile.mkdtemp(prefix=f".{self.name}.{_NEW_PREFIX}",
                                            dir=self.root))
            target = staging / "plugins"
            target.mkdir()
        try:
            if requirements:
                install(requirements, target, home=self.home, label=self.name)
            dists = installed(target)
            for spec in dict.fromkeys(added):
                dist = _owner(spec, dists)
                if dist is not None:
                    self._check(spec, dist, target, plain)
            old = {b for d in installed(self.plugin_dir) for b in d.bundles}
            bundles = self._bundles(state.profile.bundles, old, requirements, dists)
            if added:
                self._check_configs(bundles, target, cwd or Path.cwd())
            text = _render(state.text, requirements, bundles)
            if self.path.is_dir():
                self._swap(staging)
                self._write(text)
            else:
                self._create(text, staging)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return parse_profile_toml(self.file, self.name)

    def _check(self, spec: str, dist: Installed, target: Path, plain: bool) -> None:
        """What ``add`` refuses: a distribution with no bundle (unless ``plain``), a
        bundle whose ``patch.yml`` is missing or invalid, a row naming a plugin that does
        not load. Exit 2 for what the package declares, 1 for a plugin that fails to
        import (as at run time)."""
        label = f"{dist.name} {dist.version}"
        if not dist.bundles:
            if plain:
                _note(f"note: {label} declares no {BUNDLE_GROUP} entry point; installed as "
                      "a plain library")
                return
            raise ConfigError(
                f"{spec}: {label} declares no {BUNDLE_GROUP} entry point, so it adds nothing "
                f"to profile {self.name!r} (a plugin names its bundle under "
                f'[project.entry-points."{BUNDLE_GROUP}"], see docs/plugins.md; '
                "`add --no-bundle` installs a plain library)")
        from dsh.config.patchfile import parse_layer, read_layer_text

        for bundle, value in dist.bundle_targets:
            if _shipped(bundle):
                _note(f"note: {label}: bundle {bundle!r} is a shipped name; ignored")
                continue
            module = value.split(":", 1)[0]
            relative = Path(*module.split(".")) / BUNDLE_FILE
            path = target / relative
            where = f"bundle {bundle!r} of {label}"
            if not path.is_file():
                raise ConfigError(f"{where}: its entry point names {module!r}, which has no "
                                  f"{BUNDLE_FILE} (is it included in the package's files?)")
            shown = _source_file(dist, relative) or f"{label}: {relative.as_posix()}"
            try:
                layer = parse_layer(read_layer_text(path), path=path, kind="bundle",
                                    source=str(shown))
            except ConfigError as exc:
                raise ConfigError(f"{where} is invalid: {exc}") from exc
            self._check_rows(where, layer, target)

    @staticmethod
    def _check_rows(where: str, layer: Any, target: Path) -> None:
        """Every enabled row the bundle inserts must name a plugin that loads."""
        from dsh.runtime.kernel.loader import add_plugin_dir, remove_plugin_dir, resolve

        rows: list[tuple[str | None, Any]] = [(op.target, row) for op in layer.operations
                                              for row in op.insert]
        added = add_plugin_dir(target)
        try:
            while rows:
                parent, row = rows.pop(0)
                row_id = str(row.values.get("id"))
                full_id = f"{parent}:{row_id}" if parent else row_id
                if row.children is not None:
                    rows.extend((full_id, child) for child in row.children)
                    continue
                name = row.values.get("name")
                if row.values.get("disabled") is True or not isinstance(name, str):
                    continue
                try:
                    resolve(full_id, name)
                except DshError as exc:
                    error = type(exc)(f"{where}: {exc}")
                    raise error from exc
        finally:
            if added:
                remove_plugin_dir(target)

    def _check_configs(self, bundles: list[str], target: Path, cwd: Path) -> None:
        """Every enabled row of the profile as ``add`` leaves it (``bundles`` with the
        plugins in ``target``, the profile's and the home's patches) must have a config
        its plugin's schema accepts, as the runtime checks it at start (tags resolved
        against this launch's environment): else the profile would not start. A row
        whose plugin does not load here is left to the runtime (``dsh doctor`` names
        it); a ``.env`` that does not load leaves the check undone, said in a note."""
        from dsh.config.bundles import find_bundle
        from dsh.config.compose import compose
        from dsh.config.envsnapshot import snapshot
        from dsh.config.patchfile import parse_layer, read_layer_text
        from dsh.runtime.kernel.loader import add_plugin_dir, remove_plugin_dir, resolve
        from dsh.runtime.kernel.schema import validate

        files = [("bundle", name, find_bundle(name, plugin_dir=target, profile_file=self.file))
                 for name in bundles]
        files += [(kind, str(path), path) for kind, path in (
            ("profile", self.path / PATCH_FILE), ("home", self.home / PATCH_FILE))
            if path.is_file()]
        tree = compose([parse_layer(read_layer_text(path), path=path, kind=kind, source=source)
                        for kind, source, path in files])
        try:
            env = snapshot(self.home, cwd, routing=tree.routing_names())
        except DshError as exc:
            _note(f"note: row configs not checked: {exc}")
            return
        added = add_plugin_dir(target)
        try:
            for row in tree.flat_rows(env, self.home):
                if row["disabled"]:
                    continue
                try:
                    plugin = resolve(row["id"], row["name"])
                except DshError:
                    continue
                try:
                    validate(plugin.manifest.config_schema or {}, row["config"],
                             row_id=row["id"])
                except ConfigError as exc:
                    raise ConfigError(f"profile {self.name!r} would not start: {exc} "
                                      f"(plugin {row['name']!r})") from None
        finally:
            if added:
                remove_plugin_dir(target)

    def _bundles(self, current: tuple[str, ...], old: set[str], requirements: list[str],
                 dists: list[Installed]) -> list[str]:
        ordered: list[Installed] = []
        for requirement in requirements:
            dist = _owner(requirement, dists)
            if dist is not None and dist not in ordered:
                ordered.append(dist)
        ordered += [d for d in dists if d not in ordered]
        new = []
        for dist in ordered:
            for name in dist.bundles:
                if not _shipped(name) and name not in new:
                    new.append(name)
        kept = [b for b in current if _shipped(b) or b not in old or b in new]
        return kept + [b for b in new if b not in kept]

    def _clear_leftovers(self) -> None:
        """What killed commands left (holding the lock, so no live command owns any of
        it): restore a plugin directory set aside, drop staging folders and temp files."""
        if self.path.is_dir():
            _restore(self.path)
        for leftover in leftovers(self.home, self.name):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)

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

    def _write(self, text: str) -> None:
        """Replace ``profile.toml`` with ``text`` atomically."""
        temp = self.file.with_name(f".{PROFILE_FILE}.{os.getpid()}")
        try:
            temp.write_text(text, encoding="utf-8")
            os.replace(temp, self.file)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise ConfigError(f"{self.file}: cannot write ({exc})") from exc

    def _create(self, text: str, staging: Path | None) -> None:
        """Make the profile folder: ``staging`` (or a new one) with ``text`` as its
        ``profile.toml`` and a shipped template's other files, renamed into place."""
        folder = staging or Path(tempfile.mkdtemp(prefix=f".{self.name}.{_NEW_PREFIX}",
                                                  dir=self.root))
        try:
            template = shipped.template_dir(self.name)
            if template.is_dir():
                for item in template.iterdir():
                    if item.is_file() and item.name != PROFILE_FILE:
                        shutil.copyfile(item, folder / item.name)
            (folder / PROFILE_FILE).write_text(text, encoding="utf-8")
            os.chmod(folder, 0o700)
            os.rename(folder, self.path)
        except OSError as exc:
            if self.path.exists():  # seeded by a launch meanwhile (it takes no lock)
                raise ConfigError(f"{self.path}: the profile appeared while this command "
                                  "ran; run it again") from exc
            raise ConfigError(f"{self.path}: cannot create profile ({exc})") from exc
        finally:
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)


def _render(text: str, requirements: Any, bundles: list[str]) -> str:
    """``text`` (a ``profile.toml``) with ``[profile] bundles`` and ``[plugins]
    requirements`` replaced, comments and layout kept."""
    import tomlkit

    doc = tomlkit.parse(text)
    for table, key, values in (("profile", "bundles", bundles),
                               ("plugins", "requirements", list(requirements))):
        section = doc.setdefault(table, tomlkit.table())
        item = section.get(key)
        if isinstance(item, list):  # tomlkit Array: keeps its trailing comment
            item.clear()
            item.extend(values)
        else:
            section[key] = values
    return tomlkit.dumps(doc)


def _source_file(dist: Installed, relative: Path) -> Path | None:
    """The file in a local plugin's source tree that was installed as ``relative``
    (what its author edits), flat or ``src`` layout; None when it cannot be told."""
    if dist.source is None:
        return None
    for base in (Path(dist.source), Path(dist.source, "src")):
        if (base / relative).is_file():
            return base / relative
    return None


def leftovers(home: Path, name: str) -> list[Path]:
    """What ``dsh plugin`` commands on profile ``name`` killed part-way left behind:
    staging folders, a plugin folder set aside (see :func:`set_aside`), temporary
    ``profile.toml`` files. Found, never touched: the next change clears them."""
    root = profiles_dir(home)
    path = root / name
    found = list(root.glob(f".{name}.{_NEW_PREFIX}*"))
    if path.is_dir():
        found += [*path.glob(".plugins.*"), *path.glob(".plugins-old.*"),
                  *path.glob(f".{PROFILE_FILE}.*")]
    return sorted(found)


def _restore(profile_dir: Path) -> bool:
    """Put back the plugin folder a command killed mid-swap set aside; True if it did."""
    retired = set_aside(profile_dir)
    if retired is None:
        return False
    plugin_dir = profile_dir / PLUGIN_DIR
    os.rename(retired, plugin_dir)
    _note(f"restored {plugin_dir} (a `dsh plugin` command was killed while swapping it)")
    return True


def _shipped(bundle: str) -> bool:
    return (shipped.bundle_dir(bundle) / BUNDLE_FILE).is_file()

