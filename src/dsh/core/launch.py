"""The launch contract: what the launcher hands the runtime, as immutable values.

The launcher does everything that depends on files (home, profile, layers, ``.env``) and
builds this value (:func:`dsh.config.resolve.prepare`); the runtime receives it and never
reads a profile itself. That keeps the runtime testable from a plain value, keeps
``dsh.runtime`` out of the launcher's import path until an application starts, and lets
the runtime depend on this contract rather than on the configuration that produced it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple


class Launch(NamedTuple):
    """A profile resolved for one process.

    ``rows`` is the flat list the kernel boots: leaf rows in tree order with full ids
    (``group:child``), tags resolved, a disabled group's children disabled.
    ``effective_config`` is the ``--dump-config --json`` document with secret-looking
    values masked, for ``config/get`` and the web app.
    ``layer_files`` are the files the tree was composed from; a ``startup`` profile
    reports ``reload_required`` when one of them changes after boot.
    ``recompose`` rebuilds ``(rows, effective_config)`` from the files, for live reload.
    ``plugin_dir`` is the profile's plugin environment (``dsh plugin``), which the
    runtime puts on its import path.
    ``help_footer`` ends the application's ``-h`` text: the launcher's own options, which
    come before the application's arguments.
    """

    profile: str
    patch_reload: str
    home: Path
    cwd: Path
    env: EnvSnapshot
    rows: tuple[Mapping[str, Any], ...]
    effective_config: Mapping[str, Any]
    app_args: tuple[str, ...] = ()
    layer_files: tuple[Path, ...] = ()
    watch_files: tuple[Path, ...] = ()
    plugin_dir: Path | None = None
    recompose: Callable[[], tuple[tuple[Mapping[str, Any], ...], Mapping[str, Any]]] | None = None
    help_footer: str = ""


class EnvSnapshot(Mapping[str, str]):
    """An immutable mapping of environment names to values, with each value's origin.

    ``origin(name)`` says where a value came from (``environment``, a ``.env`` path, or
    ``default``), which is what diagnostics print instead of the value.
    """

    __slots__ = ("_origins", "_values", "warnings")

    def __init__(self, values: Mapping[str, str], origins: Mapping[str, str],
                 warnings: tuple[str, ...] = ()) -> None:
        self._values = dict(values)
        self._origins = dict(origins)
        self.warnings = warnings
        """One line per ``.env`` name that was ignored, naming it and its file."""

    def __getitem__(self, name: str) -> str:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"EnvSnapshot({len(self._values)} names)"

    def origin(self, name: str) -> str | None:
        """Where ``name`` came from, or None when it is not set."""
        return self._origins.get(name)

    def with_defaults(self, defaults: Mapping[str, str]) -> EnvSnapshot:
        """A new snapshot where ``defaults`` fill names that are still unset."""
        values, origins = dict(self._values), dict(self._origins)
        for name, value in defaults.items():
            if name not in values:
                values[name] = value
                origins[name] = "default"
        return EnvSnapshot(values, origins, self.warnings)

    def child_environ(self, *, scrub: frozenset[str] = frozenset()) -> dict[str, str]:
        """The environment for a child process: the snapshot minus ``scrub`` names."""
        return {k: v for k, v in self._values.items() if k not in scrub}
