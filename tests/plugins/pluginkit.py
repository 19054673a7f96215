"""Helpers for the ``dsh plugin`` tests: small plugin packages, and a home's whole state."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dsh-hello-plugin"


def tree_state(root: Path) -> dict[str, str]:
    """Every path under ``root`` (``root`` itself as ``.``) with what it is: a file's
    sha256 and mode, a folder, a link's target. Equal states mean an unchanged tree."""
    if not root.exists():
        return {}
    state = {".": f"dir {oct(root.stat().st_mode)}"}
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs):
            path = Path(folder, name)
            state[str(path.relative_to(root))] = (
                f"link {os.readlink(path)}" if path.is_symlink()
                else f"dir {oct(path.stat().st_mode)}")
        for name in sorted(files):
            path = Path(folder, name)
            state[str(path.relative_to(root))] = (
                f"link {os.readlink(path)}" if path.is_symlink() else
                f"file {oct(path.stat().st_mode)} {hashlib.sha256(path.read_bytes()).hexdigest()}")
    return state


def package(where: Path, name: str, *, bundle: str | None = None, patch: str | None = None,
            module_text: str = "") -> Path:
    """A local distribution ``name`` (package ``name`` with dashes as underscores), with
    a ``dsh.bundles`` entry point ``bundle`` when given and ``patch`` as its patch.yml."""
    module = name.replace("-", "_")
    (where / module).mkdir(parents=True)
    (where / module / "__init__.py").write_text(module_text)
    if patch is not None:
        (where / module / "patch.yml").write_text(patch)
    entry = f'[project.entry-points."dsh.bundles"]\n{bundle} = "{module}"\n' if bundle else ""
    build = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    files = f'[tool.hatch.build.targets.wheel]\npackages = ["{module}"]\n'
    (where / "pyproject.toml").write_text(
        f'{build}[project]\nname = "{name}"\nversion = "1.0"\n{entry}{files}')
    return where
