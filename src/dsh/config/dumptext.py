"""The human projection of ``--dump-config``: the same document, as an indented outline.

It is rendered from the JSON document itself, so people and machines see the same facts.
"""

from __future__ import annotations

import json
from typing import Any


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _row(row: dict[str, Any], depth: int, out: list[str]) -> None:
    pad = "  " * depth
    prov = row["provenance"]
    state = " (disabled)" if row.get("disabled") else ""
    label = row.get("name", "group") if not row.get("group") else "group"
    out.append(f"{pad}- {row['id']}: {label}{state}    # {prov.get('name', prov.get('group', ''))}")
    if row.get("group"):
        for child in row.get("config", []):
            _row(child, depth + 1, out)
        return
    for key, value in sorted(row.get("config", {}).items()):
        where = prov.get(f"config.{key}", prov.get("config", ""))
        out.append(f"{pad}    {key} = {_value(value)}    # {where}")
    if row.get("inject"):
        out.append(f"{pad}    inject = {_value(row['inject'])}    # {prov.get('inject', '')}")


def render(document: dict[str, Any]) -> str:
    """The outline text of a ``--dump-config --json`` document."""
    out = [f"profile {document['profile']} (patch-reload: {document['patchReload']})", "layers:"]
    out += [f"  {layer['kind']}: {layer['source']}" for layer in document["layers"]]
    out.append("rows:")
    for row in document["rows"]:
        _row(row, 1, out)
    out += [f"warning: {w}" for w in document["warnings"]]
    return "\n".join(out) + "\n"
