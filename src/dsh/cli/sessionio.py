"""``dsh sessions export`` and ``dsh sessions import``: a profile's sessions as JSON Lines.

The store is whatever the composed profile runs as its ``sessions`` service (the row whose
plugin provides it: ``sessions-sqlite``, ``sessions-postgres``, ...), opened the way the
runtime opens it but without starting a runtime, through the plugin's ``open_store``
capability. So moving a home's history to PostgreSQL is one export with the default
profile and one import with the PostgreSQL patch::

    dsh sessions export --profile sdk -o sessions.jsonl
    dsh sessions import --profile sdk --patch examples/postgres/patch.yml sessions.jsonl

The format and the rules (leases, idempotence) are :mod:`dsh.runtime.sessions.transfer`'s.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsh.core.atomicfile import replaced
from dsh.core.errors import ConfigError
from dsh.core.wording import counted

SERVICE = "sessions"


@contextlib.contextmanager
def profile_store(home: Path, profile: str, patches: list[str], cwd: Path
                  ) -> Iterator[tuple[Any, str]]:
    """The profile's session store (closed on exit) and ``"row 'ID' (plugin)"``."""
    from dsh.config import tags
    from dsh.config.envsnapshot import snapshot
    from dsh.config.resolve import resolve
    from dsh.runtime.kernel.loader import resolve as resolve_plugin
    from dsh.runtime.kernel.schema import validate

    resolved = resolve(home, profile, patches, cwd)
    env = snapshot(home, cwd)
    # The shipped bundles name the row "sessions": looked at first, so finding it imports
    # no other row's plugin (a provider's imports alone cost more than the listing).
    rows = sorted(resolved.tree.walk(), key=lambda found: found[0].id != SERVICE)
    for row, disabled in rows:
        if disabled or row.children is not None or row.name is None:
            continue
        plugin = resolve_plugin(row.id, row.name)
        if SERVICE not in plugin.manifest.provides:
            continue
        label = f"row '{row.id}' ({row.name})"
        opener = getattr(plugin, "open_store", None)
        if opener is None:
            raise ConfigError(f"{label} provides '{SERVICE}' but cannot be opened outside a "
                              "runtime (its plugin has no open_store)")
        config = validate(plugin.manifest.config_schema or {},
                          tags.resolve(row.values.get("config") or {}, env, home),
                          row_id=row.id)
        store = opener(config, home=str(home), profile=profile)
        try:
            yield store, label
        finally:
            store.close()
        return
    raise ConfigError(f"profile {profile!r} runs no '{SERVICE}' row: its sessions are not "
                      "stored anywhere")


def export_sessions(home: Path, profile: str, patches: list[str], cwd: Path,
                    output: str, session_ids: list[str]) -> str:
    """Write the export to ``output`` (``-``: stdout; a file is replaced whole, only once
    complete); returns the one-line summary."""
    from dsh.runtime.sessions.transfer import export

    with profile_store(home, profile, patches, cwd) as (store, label):
        if output == "-":
            counts = export(store, sys.stdout, session_ids)
        else:
            target = Path(output)
            with replaced(target, prefix=f".{target.name}.", text=True) as out:
                counts = export(store, out, session_ids)
    return (f"exported {counted(counts.sessions, 'session')} "
            f"({counted(counts.events, 'event')}, {counted(counts.goals, 'goal')}) from {label}")


def import_sessions(home: Path, profile: str, patches: list[str], cwd: Path,
                    source: str) -> tuple[str, bool]:
    """Read the export at ``source`` (``-``: stdin) into the profile's store; returns the
    summary (refused sessions on their own lines) and whether every session went in."""
    from dsh.runtime.sessions.transfer import import_

    with profile_store(home, profile, patches, cwd) as (store, label):
        if source == "-":
            counts = import_(store, sys.stdin, "<stdin>")
        else:
            try:
                handle = open(source, encoding="utf-8")  # noqa: SIM115 (closed below)
            except OSError as exc:
                raise ConfigError(f"{source}: cannot read ({exc.strerror})") from None
            with handle:
                try:
                    counts = import_(store, handle, source)
                except UnicodeDecodeError:
                    raise ConfigError(f"{source}: not UTF-8 text") from None
    lines = [f"imported {counted(counts.sessions, 'session')} "
             f"({counted(counts.events, 'event')}, {counted(counts.goals, 'goal')}) "
             f"into {label}"]
    lines += [f"refused {reason}" for reason in counts.refused]
    return "\n".join(lines) + "\n", not counts.refused
