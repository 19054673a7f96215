"""From a profile name to the runtime's :class:`~dsh.core.launch.Launch`: resolve the
profile, compose its layers, snapshot the environment.

Everything that depends on files happens here, in the launcher; the runtime receives the
finished value and never reads a profile itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from dsh.config.compose import ComposedTree, compose
from dsh.config.layercache import LayerCache
from dsh.config.layers import (
    LayerFiles,
    layer_files,
    load_bundle_layers,
    load_patch_layers,
    load_user_layers,
)
from dsh.config.patchfile import PatchLayer
from dsh.config.profiles import Profile, load_profile
from dsh.core.launch import Launch

# ``auth`` catches HTTP headers such as ``Authorization: Bearer ...`` and ``X-Auth-...``.
# ``dsn``: a database connection string carries its password (sessions-postgres).
_SECRET_KEY = re.compile(r"(key|token|secret|password|credential|auth|cookie|dsn)",
                         re.IGNORECASE)
# ``*_env`` keys hold the NAME of a variable (``api_key_env: DEEPSEEK_API_KEY``), not a value.
_NAMES_A_VARIABLE = re.compile(r"_env$", re.IGNORECASE)


def _is_secret(key: str, value: Any) -> bool:
    return (bool(_SECRET_KEY.search(key)) and not _NAMES_A_VARIABLE.search(key)
            and isinstance(value, (str, int, float)) and value != "")


def mask_secrets(value: Any) -> Any:
    """A copy of a JSON document with literal secret-looking values replaced by ``***``.

    Tags (``{"!env": NAME}``) are references, not values, and stay visible; so does
    ``provenance``, whose values are file:line locations keyed by the config path.
    """
    if isinstance(value, dict):
        return {
            k: v if k == "provenance" else "***" if _is_secret(k, v) else mask_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


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


def prepare(resolved: Resolved, cwd: Path, app_args: list[str],
            environ: Mapping[str, str] | None = None, *, help_footer: str = "") -> Launch:
    """Turn a resolved profile into the runtime's :class:`Launch` (env snapshot included);
    ``help_footer`` ends the application's ``-h`` text (the launcher's options)."""
    from dsh.config.envsnapshot import snapshot

    checked = resolved.tree.routing_names()
    env = snapshot(resolved.home, cwd, environ, routing=checked)
    profile, files, home = resolved.profile, resolved.files, resolved.home
    project_env = str(cwd / ".env")

    def recompose() -> tuple[tuple[Mapping[str, Any], ...], Mapping[str, Any]]:
        tree = compose([*resolved.bundle_layers, *load_user_layers(files),
                        *resolved.patch_layers])
        files.cache.save()
        # A live edit may read an address from a variable the launch did not check as
        # routing: one the project's .env set is not used (the snapshot cannot change).
        unchecked = {name for name in tree.routing_names() - checked
                     if env.origin(name) == project_env}
        view = env if not unchecked else {k: v for k, v in env.items() if k not in unchecked}
        return tree.flat_rows(view, home), mask_secrets(tree.to_json(profile.name,
                                                                     profile.patch_reload))

    tree = resolved.tree
    return Launch(
        profile=profile.name,
        patch_reload=profile.patch_reload,
        home=home,
        cwd=cwd,
        env=env,
        rows=tree.flat_rows(env, home),
        effective_config=mask_secrets(tree.to_json(profile.name, profile.patch_reload)),
        app_args=tuple(app_args),
        layer_files=files.existing(),
        watch_files=files.user_files if profile.patch_reload == "live" else (),
        plugin_dir=resolved.plugin_dir,
        recompose=recompose,
        help_footer=help_footer,
    )
