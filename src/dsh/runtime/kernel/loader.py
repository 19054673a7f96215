"""Resolve a row's ``name`` to a plugin class, and check the class is one.

Lookup order: ``module:attr`` is imported directly; a bare name is looked up in dsh's own
table (:data:`~dsh.runtime.kernel.builtin_plugins.BUILTIN_PLUGINS`), then among the ``dsh.plugins``
entry points. The entry-point table is read once per process, and only when a bare name
is not a shipped one, because scanning distribution metadata is the slow part.

Faults are split by whose they are: a name that points nowhere is the configuration's
(ConfigError, exit 2); a module that exists but fails to import, or an object that is not
a plugin, is the plugin's (PluginError, cause chained).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dsh.core.errors import ConfigError, PluginError
from dsh.runtime.kernel.builtin_plugins import BUILTIN_PLUGINS
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin
from dsh.runtime.kernel.schema import check_schema

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

GROUP = "dsh.plugins"

#: The plugin references being imported right now, innermost last: who a moved import
#: (:func:`note_moved`) is reported against.
_importing: list[str] = []
#: Old module paths already reported in this process: one line each, however many use them.
_noted: set[str] = set()


def resolve(row_id: str, name: str) -> type[Plugin]:
    """The plugin class ``name`` refers to, checked (manifest, capabilities, schema)."""
    if ":" in name:
        target = _import(row_id, name, name)
    elif name in BUILTIN_PLUGINS:
        target = _import(row_id, name, BUILTIN_PLUGINS[name])
    else:
        entry_point = entry_point_table().get(name)
        if entry_point is None:
            raise _unknown(row_id, name, f"not an entry point in {GROUP} nor module:attr")
        _importing.append(name)
        try:
            target = entry_point.load()
        except Exception as exc:
            raise _broken(row_id, name, exc) from exc
        finally:
            _importing.pop()
    return _checked(row_id, name, target)


def note_moved(old: str, new: str) -> None:
    """Say once, on stderr, that a plugin imported ``old``, which is now ``new``.

    Called by the modules left at the runtime's old import path (``dsh_runtime.plugin``,
    ``dsh_runtime.tools.base``). A ``DeprecationWarning`` alone would be hidden by
    Python's default filters, so a plugin author would never learn of the move before the
    old path goes; this line names the plugin being loaded when there is one.
    """
    if old in _noted:
        return
    _noted.add(old)
    who = f"plugin '{_importing[-1]}' imports" if _importing else "imported"
    sys.stderr.write(f"dsh: {who} {old}, which moved to {new}; import it from there "
                     "(the old path goes in the next release)\n")


def add_plugin_dir(path: os.PathLike[str] | str) -> bool:
    """Make a profile's plugin environment (``dsh plugin``) importable, as the runtime
    and ``dsh doctor`` both load plugins; False when it already was.

    It goes after everything else on ``sys.path``, so a plugin can never shadow dsh or the
    packages dsh itself runs on. The entry-point table is read again on next use.
    """
    entry = os.fspath(path)
    if entry in sys.path:
        return False
    sys.path.append(entry)
    entry_point_table.cache_clear()
    return True


def remove_plugin_dir(path: os.PathLike[str] | str) -> None:
    """Undo :func:`add_plugin_dir` (``dsh plugin add`` checks a staging folder)."""
    entry = os.fspath(path)
    if entry in sys.path:
        sys.path.remove(entry)
    entry_point_table.cache_clear()


@functools.lru_cache(maxsize=1)
def entry_point_table() -> Mapping[str, EntryPoint]:
    """The ``dsh.plugins`` entry points by name, read once (first distribution wins).

    Call ``entry_point_table.cache_clear()`` after changing ``sys.path``.
    """
    from importlib.metadata import entry_points

    table: dict[str, EntryPoint] = {}
    for entry_point in entry_points(group=GROUP):
        table.setdefault(entry_point.name, entry_point)
    return MappingProxyType(table)


def _import(row_id: str, name: str, ref: str) -> Any:
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise _unknown(row_id, name, "expected module:attr")
    _importing.append(name)
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise _unknown(row_id, name, f"no module '{module_name}'") from exc
        raise _broken(row_id, name, exc) from exc
    except Exception as exc:
        raise _broken(row_id, name, exc) from exc
    finally:
        _importing.pop()
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise _unknown(row_id, name, f"module '{module_name}' has no '{attr}'") from exc
    return target


def _checked(row_id: str, name: str, target: Any) -> type[Plugin]:
    manifest = getattr(target, "manifest", None)
    if not isinstance(manifest, Manifest) or not callable(target):
        raise PluginError(
            f"row '{row_id}': '{name}' is not a dsh plugin (no Manifest)", row_id=row_id
        )
    for capability in manifest.capabilities:
        try:
            Capability(capability)
        except ValueError:
            raise PluginError(
                f"row '{row_id}': plugin '{manifest.id}' declares unknown capability "
                f"'{capability}'",
                row_id=row_id,
            ) from None
    if manifest.config_schema is not None:
        check_schema(manifest.config_schema, plugin=manifest.id)
    return target


def _unknown(row_id: str, name: str, why: str) -> ConfigError:
    return ConfigError(f"row '{row_id}': unknown plugin '{name}' ({why})")


def _broken(row_id: str, name: str, exc: Exception) -> PluginError:
    return PluginError(
        f"row '{row_id}': plugin '{name}' failed to import: {type(exc).__name__}: {exc}",
        row_id=row_id,
    )
