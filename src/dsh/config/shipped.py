"""Where the shipped profile templates and bundles live.

In a wheel they are packaged inside ``dsh/_profiles``; in a source checkout (editable
install) they are the repository's top-level ``profiles/`` folder. One function decides,
so no other module guesses paths.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def shipped_root() -> Path:
    """The folder holding ``templates/`` and ``bundles/``."""
    packaged = Path(__file__).parent.with_name("_profiles")  # dsh/_profiles
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "profiles"


def template_dir(name: str) -> Path:
    """The shipped template folder for profile ``name`` (may not exist)."""
    return shipped_root() / "templates" / name


def bundle_dir(name: str) -> Path:
    """The shipped bundle folder for bundle ``name`` (may not exist)."""
    return shipped_root() / "bundles" / name


def template_names() -> list[str]:
    """Names of the shipped profile templates, sorted."""
    root = shipped_root() / "templates"
    return sorted(p.name for p in root.iterdir() if (p / "profile.toml").is_file())
