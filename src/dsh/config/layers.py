"""The layer stack of one launch: bundles, profile patch, home patch, ``--patch`` files.

Parsing is split from composition so live reload can keep the bundle and ``--patch``
layers parsed at boot and re-read only the user layers that changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from dsh.config.bundles import find_bundle
from dsh.config.launchcache import patch_path
from dsh.config.layercache import LayerCache
from dsh.config.patchfile import PatchLayer
from dsh.config.profiles import PATCH_FILE, PROFILE_FILE, Profile
from dsh.core.errors import PatchError

HOME_PATCH = PATCH_FILE


class LayerFiles(NamedTuple):
    """Where each layer of a launch comes from, in application order."""

    bundles: tuple[tuple[str, Path], ...]
    profile_patch: Path
    home_patch: Path
    patches: tuple[Path, ...]
    cache: LayerCache

    @property
    def user_files(self) -> tuple[Path, Path]:
        """The files a ``live`` profile watches (they may not exist yet)."""
        return (self.profile_patch, self.home_patch)

    def existing(self) -> tuple[Path, ...]:
        """Every layer file that exists now (what ``reload_required`` compares)."""
        files = [path for _, path in self.bundles]
        files += [p for p in self.user_files if p.is_file()]
        files += list(self.patches)
        return tuple(files)


def layer_files(home: Path, profile: Profile, plugin_dir: Path, patches: list[str],
                cwd: Path, cache: LayerCache) -> LayerFiles:
    """Locate every layer (parsed through ``cache``; bundles also in ``plugin_dir``, the
    profile's plugin environment); a missing bundle or ``--patch`` file exits 2."""
    profile_file = profile.path / PROFILE_FILE
    bundles = tuple((name, find_bundle(name, plugin_dir=plugin_dir, profile_file=profile_file))
                    for name in profile.bundles)
    resolved = []
    for patch in patches:
        path = patch_path(patch, cwd)
        if not path.is_file():
            raise PatchError(f"--patch {patch}: file not found ({path})")
        resolved.append(path)
    return LayerFiles(bundles, profile.patch_file, home / HOME_PATCH, tuple(resolved), cache)


def load_bundle_layers(files: LayerFiles) -> list[PatchLayer]:
    """Parse the bundle layers (cached across live reloads)."""
    return [files.cache.load(path, kind="bundle", source=name) for name, path in files.bundles]


def load_user_layers(files: LayerFiles) -> list[PatchLayer]:
    """Parse the profile and home patches, whichever exist."""
    layers = []
    if files.profile_patch.is_file():
        layers.append(files.cache.load(files.profile_patch, kind="profile"))
    if files.home_patch.is_file():
        layers.append(files.cache.load(files.home_patch, kind="home"))
    return layers


def load_patch_layers(files: LayerFiles) -> list[PatchLayer]:
    """Parse the ``--patch`` files in argv order (cached across live reloads)."""
    return [files.cache.load(path, kind="patch") for path in files.patches]
