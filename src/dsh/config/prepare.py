"""From a composition to the runtime's :class:`~dsh.core.launch.Launch`: the environment
snapshot, the tags' values for this launch, the effective config shown to clients.

Whether the composition was made now (:func:`dsh.config.resolve.composed`) or kept from
an earlier launch (:mod:`dsh.config.launchcache`), what depends on the moment is taken
here, fresh: the ``.env`` files and the environment, the tags' values, the plugin folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.config.launchcache import Composed
from dsh.core.launch import Launch

if TYPE_CHECKING:
    from dsh.config.resolve import Resolved

# ``auth`` catches HTTP headers such as ``Authorization: Bearer ...`` and ``X-Auth-...``.
# ``dsn``: a database connection string carries its password (sessions-postgres).
_SECRET_KEY = re.compile(r"(key|token|secret|password|credential|auth|cookie|dsn)",
                         re.IGNORECASE)
# ``*_env`` keys hold the NAME of a variable (``api_key_env: DEEPSEEK_API_KEY``), not a value;
# ``*tokens`` keys hold a count of model tokens (``max_output_tokens: 64000``), not a token.
_NOT_A_SECRET = re.compile(r"(_env|tokens)$", re.IGNORECASE)


def _is_secret(key: str, value: Any) -> bool:
    return (bool(_SECRET_KEY.search(key)) and not _NOT_A_SECRET.search(key)
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


def prepare(composition: Composed, home: Path, cwd: Path, app_args: list[str],
            environ: Mapping[str, str] | None = None, *, help_footer: str = "",
            plugin_dir: Path | None = None, layers: Callable[[], Resolved]) -> Launch:
    """The runtime's :class:`Launch` of ``composition`` (env snapshot included);
    ``help_footer`` ends the application's ``-h`` text (the launcher's options);
    ``plugin_dir`` the profile's plugin environment when the caller looked it up already.

    ``layers`` gives the resolved layers live reload recomposes from (the boot's bundle
    and ``--patch`` layers with the user layers read again); it is asked on the first
    reload, so a launch that never reloads never parses them.
    """
    from dsh.config.envsnapshot import snapshot
    from dsh.config.tags import resolve_rows

    profile = composition.profile
    checked = composition.routing
    env = snapshot(home, cwd, environ, routing=checked)
    project_env = str(cwd / ".env")
    held: list[Resolved] = []

    def recompose() -> tuple[tuple[Mapping[str, Any], ...], Mapping[str, Any]]:
        from dsh.config.compose import compose
        from dsh.config.layers import load_user_layers

        if not held:
            held.append(layers())
        resolved = held[0]
        tree = compose([*resolved.bundle_layers, *load_user_layers(resolved.files),
                        *resolved.patch_layers])
        resolved.files.cache.save()
        # A live edit may read an address from a variable the launch did not check as
        # routing: one the project's .env set is not used (the snapshot cannot change).
        unchecked = {name for name in tree.routing_names() - checked
                     if env.origin(name) == project_env}
        view = env if not unchecked else {k: v for k, v in env.items() if k not in unchecked}
        return tree.flat_rows(view, home), mask_secrets(tree.to_json(profile.name,
                                                                     profile.patch_reload))

    return Launch(
        profile=profile.name,
        patch_reload=profile.patch_reload,
        home=home,
        cwd=cwd,
        env=env,
        rows=resolve_rows(composition.rows, env, home),
        effective_config=mask_secrets(composition.document),
        app_args=tuple(app_args),
        layer_files=composition.layer_files,
        watch_files=composition.user_files if profile.patch_reload == "live" else (),
        plugin_dir=plugin_dir if plugin_dir is not None else profile.plugin_dir,
        recompose=recompose,
        help_footer=help_footer,
    )
