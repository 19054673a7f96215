"""Finding a bundle's patch file by name.

A shipped bundle is ``profiles/bundles/<name>/patch.yml``. A third-party bundle is a
distribution with an entry point in group ``dsh.bundles`` (``my-bundle = "my_pkg"``)
naming a package whose ``patch.yml`` is the bundle. The installation is searched first,
then the profile's own plugin environment (installed by ``dsh plugin``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from dsh.config import shipped
from dsh.core.errors import ConfigError

GROUP = "dsh.bundles"
BUNDLE_FILE = "patch.yml"


def _entry_point_target(name: str, search_path: list[str] | None) -> str | None:
    from importlib.metadata import distributions

    for dist in distributions(path=search_path) if search_path else distributions():
        for ep in dist.entry_points:
            if ep.group == GROUP and ep.name == name:
                return ep.value
    return None


def _package_dir(module: str, search_path: list[str] | None) -> Path | None:
    if search_path:
        for entry in search_path:
            candidate = Path(entry, *module.split("."))
            if (candidate / BUNDLE_FILE).is_file():
                return candidate
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_bundle(name: str, *, plugin_dir: Path | None = None, profile_file: Path | None = None
                ) -> Path:
    """The patch file of bundle ``name``; a missing bundle exits 2 naming the profile."""
    shipped_file = shipped.bundle_dir(name) / BUNDLE_FILE
    if shipped_file.is_file():
        return shipped_file
    searches: list[list[str] | None] = [None]
    if plugin_dir is not None and plugin_dir.is_dir():
        searches.append([str(plugin_dir)])
    for search_path in searches:
        target = _entry_point_target(name, search_path)
        if target is None:
            continue
        module = target.split(":", 1)[0]
        package = _package_dir(module, search_path)
        if package is None or not (package / BUNDLE_FILE).is_file():
            raise ConfigError(f"bundle {name!r}: entry point names {module!r}, "
                              f"which has no {BUNDLE_FILE}")
        return package / BUNDLE_FILE
    where = f"{profile_file}: profile.bundles" if profile_file else "bundle"
    raise ConfigError(f"{where}: bundle {name!r} not found (not shipped, no "
                      f"{GROUP} entry point installed)")
