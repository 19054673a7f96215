"""``dsh info``: what this installation is and what it can run, as one document."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

from dsh._version import __version__
from dsh.config import profiles, shipped
from dsh.core import carriers


def home_source(explicit: str | None) -> str:
    """Which rule chose the home: ``--home``, ``DSH_HOME`` or the default ``~/.dsh``."""
    import os

    if explicit:
        return "--home"
    if os.environ.get("DSH_HOME", "").strip():
        return "DSH_HOME"
    return "default"


def collect(home: Path, explicit_home: str | None) -> dict[str, Any]:
    """The ``data`` of ``dsh info``: deterministic, no absolute paths."""
    rows: list[dict[str, Any]] = []
    for item in profiles.list_profiles(home):
        if not isinstance(item, profiles.Profile):  # a Profile is a tuple too
            name, error = item
            rows.append({"id": name, "error": str(error).replace(str(home), "$DSH_HOME")})
            continue
        rows.append({
            "id": item.name,
            "bundles": list(item.bundles),
            "patchReload": item.patch_reload,
            "shipped": profiles.is_shipped(item.name),
            "seeded": (profiles.profiles_dir(home) / item.name).is_dir(),
        })
    bundle_root = shipped.shipped_root() / "bundles"
    return {
        "version": __version__,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "implementation": platform.python_implementation(),
        "platform": carriers.platform_key(),
        "home": {"source": home_source(explicit_home), "exists": home.is_dir()},
        "profiles": rows,
        "bundles": [{"id": p.name, "source": "shipped"} for p in sorted(bundle_root.iterdir())
                    if (p / "patch.yml").is_file()],
        "carriers": carriers.describe(),
    }


def render(data: dict[str, Any]) -> str:
    """The text projection of :func:`collect`'s document."""
    created = "" if data["home"]["exists"] else " (not created yet)"
    lines = [f"dsh {data['version']} (Python {data['python']}, {data['platform']})",
             f"home: {data['home']['source']}{created}", "profiles:"]
    for row in data["profiles"]:
        if "error" in row:
            lines.append(f"  {row['id']}: ERROR {row['error']}")
        else:
            lines.append(f"  {row['id']}: {', '.join(row['bundles'])} "
                         f"[{row['patchReload']}]{' (shipped)' if row['shipped'] else ''}")
    lines.append("carriers:")
    for carrier in data["carriers"]:
        state = "available" if carrier["available"] else \
            "not available in the frozen runtime" if carrier.get("frozen") else "not installed"
        current = " (this process)" if carrier["current"] else ""
        lines.append(f"  {carrier['id']}: {state}{current}")
    return "\n".join(lines) + "\n"
