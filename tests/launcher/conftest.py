"""Fixtures of the launcher suite: writing profiles into the test's home, and tree snapshots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

TreeState = dict[str, bytes | None]


def tree_state(root: Path) -> TreeState:
    """Every path under ``root`` (relative) mapped to its bytes, or None for a folder."""
    if not root.exists():
        return {}
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


@pytest.fixture
def write_profile(dsh_home: Path) -> Callable[..., Path]:
    """Write ``$DSH_HOME/profiles/NAME/profile.toml`` (and ``patch.yml``); returns the folder."""

    def write(name: str, *, bundles: list[str], patch_reload: str | None = None,
              patch: str | None = None) -> Path:
        folder = dsh_home / "profiles" / name
        folder.mkdir(parents=True, exist_ok=True)
        lines = ["[profile]", "bundles = [" + ", ".join(f'"{b}"' for b in bundles) + "]"]
        if patch_reload is not None:
            lines.append(f'patch-reload = "{patch_reload}"')
        (folder / "profile.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if patch is not None:
            (folder / "patch.yml").write_text(patch, encoding="utf-8")
        return folder

    return write


@pytest.fixture
def snapshot_tree() -> Callable[[Path], TreeState]:
    """A function taking a folder's snapshot, to prove a failed command wrote nothing."""
    return tree_state
