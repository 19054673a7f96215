"""The machine interface envelope shared by ``dsh info``, ``dsh doctor`` and ``profile list``.

Every such command computes one document and projects it twice: ``--json`` prints the
document, the default prints text rendered from the same document, so people and
machines see the same facts. Documents hold no timestamps, no absolute paths and no
secret values, and arrays are sorted by id, so repeated runs are byte-identical.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def envelope(command: str, profile: str | None, *, data: Any = None,
             error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``{schema_version, command, ok, profile, data, error}`` document."""
    return {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "ok": error is None,
        "profile": profile,
        "data": data if error is None else None,
        "error": error,
    }


def dumps(document: dict[str, Any]) -> str:
    """Canonical JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def display_path(path: Path, home: Path, cwd: Path | None = None) -> str:
    """A path with the home or cwd prefix replaced, so no absolute path leaks into output."""
    path = Path(os.path.abspath(path))
    for prefix, label in ((home, "$DSH_HOME"), (cwd, "$CWD")):
        if prefix is None:
            continue
        try:
            rel = path.relative_to(prefix)
        except ValueError:
            continue
        return label if str(rel) == "." else f"{label}/{rel.as_posix()}"
    from dsh.config import shipped

    try:
        return f"<dsh>/{path.relative_to(shipped.shipped_root()).as_posix()}"
    except ValueError:
        return f"<outside>/{path.name}"
