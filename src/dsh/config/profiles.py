"""Named profiles: ``$DSH_HOME/profiles/<name>/profile.toml`` plus an optional ``patch.yml``.

The shipped templates (``web``, ``headless``, ``sdk``, ``sdk-minimal``, ``acp``) are seeded
into a home the first time they are used. Seeding and creation build the profile folder
beside its final place and rename it in, so a crash or a second launcher racing on the
same home never leaves a half-written profile, and a user's existing files are never
overwritten.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from dsh.config import shipped
from dsh.config.tomltext import parse_toml
from dsh.core.errors import ConfigError, ProfileNotFoundError, UsageError
from dsh.core.home import ensure_dir

RELOAD_POLICIES = ("live", "startup")
PROFILE_FILE = "profile.toml"
PATCH_FILE = "patch.yml"
PLUGIN_DIR = "plugins"
SET_ASIDE = ".plugins-old.*/plugins"
"""Where ``dsh plugin`` moves a profile's plugin folder while it swaps in a new one."""


class Profile(NamedTuple):
    """A parsed profile: its ordered bundles, reload policy and plugin requirements."""

    name: str
    path: Path
    bundles: tuple[str, ...]
    patch_reload: str
    requirements: tuple[str, ...] = ()

    @property
    def patch_file(self) -> Path:
        """The profile's own patch layer (may not exist)."""
        return self.path / PATCH_FILE

    @property
    def plugin_dir(self) -> Path:
        """The profile's plugin environment (installed by ``dsh plugin``): its folder, or
        the complete one a ``dsh plugin`` killed mid-swap set aside (:func:`set_aside`),
        used where it is until ``dsh plugin`` puts it back."""
        live = self.path / PLUGIN_DIR
        if not self.requirements or live.exists():
            return live
        return set_aside(self.path) or live


def set_aside(profile_dir: Path) -> Path | None:
    """The plugin folder a ``dsh plugin`` command set aside and never put back, or None.

    Swapping a new plugin environment in takes two renames: the old folder into
    ``.plugins-old.*/`` and the new one into place. A command killed between them leaves
    the old folder complete (it was in use) and none in place. Readers use it there;
    only ``dsh plugin`` moves it back (``dsh doctor`` reports it).
    """
    if (profile_dir / PLUGIN_DIR).exists():
        return None
    found = sorted(profile_dir.glob(SET_ASIDE))
    return found[0] if found else None


def validate_name(name: str) -> str:
    """Profile names are single path components: non-empty, no separators, not . or .."""
    if (
        not name
        or name.strip() != name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name.startswith("-")
    ):
        raise UsageError(f"invalid profile name {name!r}: use one non-empty path component")
    return name


def profiles_dir(home: Path) -> Path:
    """The folder of profiles inside ``home``."""
    return home / "profiles"


def read_profile_text(path: Path) -> str:
    """The text of ``profile.toml`` at ``path``; an unreadable file exits 2 naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from exc


def parse_profile_toml(path: Path, name: str) -> Profile:
    """Parse and validate one ``profile.toml``; every error names the file and field."""
    return parse_profile_text(read_profile_text(path), path, name)


def parse_profile_text(text: str, path: Path, name: str) -> Profile:
    """:func:`parse_profile_toml` of ``text`` read from ``path``."""
    data = parse_toml(text, path)
    section = data.get("profile", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [profile] must be a table")
    bundles = _string_list(section.get("bundles", []), path, "profile.bundles")
    policy = section.get("patch-reload", "live")
    if policy not in RELOAD_POLICIES:
        raise ConfigError(
            f"{path}: profile.patch-reload must be one of {', '.join(RELOAD_POLICIES)}, "
            f"got {policy!r}"
        )
    plugins = data.get("plugins", {})
    if not isinstance(plugins, dict):
        raise ConfigError(f"{path}: [plugins] must be a table")
    requirements = _string_list(plugins.get("requirements", []), path, "plugins.requirements")
    return Profile(name, path.parent, tuple(bundles), policy, tuple(requirements))


def _string_list(value: Any, path: Path, field_name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{path}: {field_name} must be a list of non-empty strings")
    return value


def seed_template(home: Path, name: str) -> bool:
    """Copy the shipped template ``name`` into the home unless a profile is already there.

    A profile is there when its ``profile.toml`` is. A folder without one (a user who
    made ``profiles/sdk/skills/`` before first use) gets the template's missing files
    beside its own, never replacing any. Returns True when this call created the
    ``profile.toml``. Concurrent seeders race on one ``rename`` (a new folder) or one
    ``link`` (a file into an existing folder); the loser discards its copy.
    """
    target = profiles_dir(home) / name
    source = shipped.template_dir(name)
    if (target / PROFILE_FILE).exists() or not (source / PROFILE_FILE).is_file():
        return False
    if not home.exists():  # made first, so the home itself is private (parents=True is not)
        ensure_dir(home)
    ensure_dir(profiles_dir(home))
    try:
        if target.is_dir():
            return _fill_dir(source, target)
        return _install_dir(source, target)
    except OSError as exc:  # a full or read-only home: bad setup (exit 2), not a crash
        raise ConfigError(f"{target}: cannot seed profile {name!r} from its template "
                          f"({exc.strerror or exc})") from exc


def _fill_dir(source: Path, target: Path) -> bool:
    """Add ``source``'s files that ``target`` lacks, ``profile.toml`` last (so a folder
    cut short is seen as unseeded and completed next time); True if it was added here."""
    files = sorted((f for f in source.iterdir() if f.is_file()),
                   key=lambda f: f.name == PROFILE_FILE)
    created = False
    for item in files:
        staging = Path(tempfile.mkstemp(prefix=f".{item.name}.", dir=target)[1])
        try:
            shutil.copyfile(item, staging)
            os.link(staging, target / item.name)  # never replaces an existing file
            created = item.name == PROFILE_FILE
        except FileExistsError:
            pass
        finally:
            staging.unlink(missing_ok=True)
    return created


def _install_dir(source: Path, target: Path) -> bool:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for item in source.iterdir():
            if item.is_file():
                shutil.copyfile(item, staging / item.name)
        os.chmod(staging, 0o700)
        try:
            os.rename(staging, target)
        except OSError:
            if target.is_dir():
                return False
            raise
        return True
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def profile_names(home: Path) -> list[str]:
    """The names ``dsh --profile`` accepts here: the shipped templates and every profile
    folder of the home holding a ``profile.toml``, sorted."""
    names = set(shipped.template_names())
    root = profiles_dir(home)
    if root.is_dir():
        names.update(p.name for p in root.iterdir()
                     if not p.name.startswith(".") and (p / PROFILE_FILE).is_file())
    return sorted(names)


def unknown_profile(home: Path, name: str, commands: tuple[str, ...] = ()
                    ) -> ProfileNotFoundError:
    """The one-line error for a profile that does not exist: the profiles there are, the
    nearest name (a typo is the usual cause; ``commands`` are launcher subcommands that
    ``dsh NAME`` may have meant) and how to make a new one."""
    import difflib

    names = profile_names(home)
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    command = difflib.get_close_matches(name, commands, n=1, cutoff=0.6)
    guess = (f" Did you mean {near[0]!r}?" if near
             else f" Did you mean the command `dsh {command[0]}`?" if command else "")
    return ProfileNotFoundError(
        f"unknown profile {name!r} (no {profiles_dir(home) / name / PROFILE_FILE}).{guess} "
        f"Profiles: {', '.join(names)}",
        hint=f"make a new one with `dsh plugin --profile {name} add PLUGIN` or "
        f"`dsh --profile {name} --from-default-profile headless`",
    )


def shipped_profile(home: Path, name: str) -> Profile | None:
    """Shipped template ``name`` as the home's profile would be once seeded, read from the
    installation (nothing is written); None when ``name`` is not a shipped template."""
    source = shipped.template_dir(name) / PROFILE_FILE
    if not source.is_file():
        return None
    template = parse_profile_toml(source, name)
    return template._replace(path=profiles_dir(home) / name)


def load_profile(home: Path, name: str, *, seed: bool = True,
                 read: Callable[[Path, str], Profile] | None = None,
                 commands: tuple[str, ...] = ()) -> Profile:
    """Profile ``name`` of ``home``, in one pass: the name is checked (a bad one touches
    nothing on disk), the home checked once if it exists (a file in the way is the error
    to report, not "unknown profile"), a shipped template seeded on first use (which
    makes the home, privately, when there is none), and ``profile.toml`` parsed once by
    ``read`` (a launch passes its layer cache's, which spares it the TOML parser), else by
    :func:`parse_profile_toml`.

    With ``seed`` off (commands that only read) a shipped template not seeded yet is read
    from the installation and nothing is written. ``commands`` are the names ``dsh NAME``
    may have meant instead (:func:`unknown_profile`).
    """
    validate_name(name)
    if home.exists():
        ensure_dir(home)
    path = profiles_dir(home) / name / PROFILE_FILE
    if not seed and not path.is_file():
        found = shipped_profile(home, name)
        if found is None:
            raise unknown_profile(home, name, commands)
        return found
    seed_template(home, name)
    if not path.is_file():
        raise unknown_profile(home, name, commands)
    return (read or parse_profile_toml)(path, name)


def create_from_template(home: Path, name: str, template: str) -> Profile:
    """Create custom profile ``name`` as a copy of shipped template ``template``."""
    validate_name(name)
    source = shipped.template_dir(template)
    if not (source / PROFILE_FILE).is_file():
        raise UsageError(
            f"unknown template {template!r} (shipped: {', '.join(shipped.template_names())})"
        )
    target = profiles_dir(home) / name
    if target.exists() or name in shipped.template_names():
        raise UsageError(f"profile {name!r} already exists; choose another name")
    ensure_dir(home)
    ensure_dir(profiles_dir(home))
    if not _install_dir(source, target):
        raise UsageError(f"profile {name!r} already exists; choose another name")
    try:
        return parse_profile_toml(target / PROFILE_FILE, name)
    except ConfigError:
        shutil.rmtree(target, ignore_errors=True)
        raise


def list_profiles(home: Path) -> list[Profile | tuple[str, ConfigError]]:
    """Every profile in the home plus the shipped templates, sorted by name.

    Read-only: a template not yet seeded is read from the installation, not copied.
    """
    names = set(shipped.template_names())
    root = profiles_dir(home)
    if root.is_dir():
        names.update(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    result: list[Profile | tuple[str, ConfigError]] = []
    for name in sorted(names):
        path = root / name / PROFILE_FILE
        if not path.is_file():
            path = shipped.template_dir(name) / PROFILE_FILE
        try:
            result.append(parse_profile_toml(path, name))
        except ConfigError as exc:
            result.append((name, exc))
    return result


def is_shipped(name: str) -> bool:
    """Whether ``name`` is one of the shipped templates."""
    return (shipped.template_dir(name) / PROFILE_FILE).is_file()
