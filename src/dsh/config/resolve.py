"""From a profile name to its composed tree: resolve the profile, locate and parse its
layers, compose them; and what a launch keeps of that (:mod:`.launchcache`).

Everything that depends on files happens here, in the launcher; :mod:`.prepare` turns
the result into the runtime's :class:`~dsh.core.launch.Launch`, and the runtime never
reads a profile itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from dsh.config import launchcache
from dsh.config.compose import ComposedTree, compose
from dsh.config.launchcache import Composed, Inputs
from dsh.config.layercache import LayerCache, path_refs
from dsh.config.layers import (
    LayerFiles,
    layer_files,
    load_bundle_layers,
    load_patch_layers,
    load_user_layers,
)
from dsh.config.patchfile import PatchLayer
from dsh.config.profiles import Profile, load_profile


class Resolved(NamedTuple):
    """Everything the launcher resolved from files before a runtime exists.

    ``plugin_dir`` is the profile's plugin environment as this launch found it (the live
    folder, or the one an interrupted ``dsh plugin`` set aside), looked up once.
    """

    home: Path
    profile: Profile
    plugin_dir: Path
    files: LayerFiles
    bundle_layers: tuple[PatchLayer, ...]
    patch_layers: tuple[PatchLayer, ...]
    tree: ComposedTree


def resolve(home: Path, profile_name: str, patches: list[str], cwd: Path,
            *, default_only: bool = False, seed: bool = True, profile: Profile | None = None,
            commands: tuple[str, ...] = ()) -> Resolved:
    """Resolve the profile and compose its layers (bundles only when ``default_only``).

    The profile is resolved once (:func:`~dsh.config.profiles.load_profile`: name, home,
    seeding, ``profile.toml``) and handed down, unless the caller already holds it
    (``profile``: one it just created from a template). ``seed`` off is for commands that
    only read (``dsh doctor``): a shipped template not in the home yet is read from the
    installation, and nothing is created. ``commands`` name what ``dsh NAME`` may have
    meant when no such profile exists.
    """
    cache = LayerCache(home)
    if profile is None:
        profile = load_profile(home, profile_name, seed=seed, read=cache.load_profile,
                               commands=commands)
    plugin_dir = profile.plugin_dir
    files = layer_files(home, profile, plugin_dir, patches, cwd, cache)
    bundle_layers = tuple(load_bundle_layers(files))
    if default_only:
        return Resolved(home, profile, plugin_dir, files, bundle_layers, (),
                        compose(bundle_layers))
    patch_layers = tuple(load_patch_layers(files))
    tree = compose([*bundle_layers, *load_user_layers(files), *patch_layers])
    return Resolved(home, profile, plugin_dir, files, bundle_layers, patch_layers, tree)


def composed(resolved: Resolved) -> Composed:
    """What a launch needs of ``resolved``'s tree, free of the composer's types."""
    tree, profile = resolved.tree, resolved.profile
    return Composed(profile, tree.leaf_rows(), tree.routing_names(),
                    tree.to_json(profile.name, profile.patch_reload), tree.warnings,
                    resolved.files.existing(), resolved.files.user_files)


def keep(resolved: Resolved, composition: Composed) -> None:
    """Keep the composition of a ``startup`` profile whose bundles are all shipped for
    the next launch (:mod:`.launchcache`), with the texts it was parsed from."""
    files, profile = resolved.files, resolved.profile
    if profile.patch_reload != "startup" or any(
            path != launchcache.shipped_bundle(name) for name, path in files.bundles):
        return
    read = [profile.path / "profile.toml", *(path for _, path in files.bundles),
            *files.user_files, *files.patches]
    texts = files.cache.texts
    inputs = Inputs(
        files=tuple((str(path), texts.get(path)) for path in read),
        bundles=tuple((name, str(path)) for name, path in files.bundles),
        path_tags=tuple((str(layer.path.parent), ref.written, ref.path)
                        for layer in resolved.tree.layers if layer.path is not None
                        for ref in path_refs(layer.operations)))
    launchcache.store(resolved.home, profile.name, list(files.patches), inputs, composition)
