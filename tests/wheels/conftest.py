"""Fixtures of the runtime-wheel suite: the build scripts of ``wheels/``, loaded by path.

``wheels/`` is not an importable package (hatchling loads ``hatch_build.py`` by path, and
the other scripts run as programs), so each module is loaded from its file once per test
session. ``make_payload`` lays out an installed ``dsh_runtime_bin`` in a temporary
site folder, with a fake executable and companion, for tests that run real processes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / "wheels"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"wheels_{name}", WHEELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def hook() -> ModuleType:
    """``wheels/hatch_build.py``."""
    return _load("hatch_build")


@pytest.fixture(scope="session")
def earn() -> ModuleType:
    """``wheels/earn_tag.py``."""
    return _load("earn_tag")


@pytest.fixture(scope="session")
def gate() -> ModuleType:
    """``wheels/publish_gate.py``."""
    return _load("publish_gate")


@pytest.fixture(scope="session")
def audit() -> ModuleType:
    """``wheels/import_audit.py``."""
    return _load("import_audit")


@pytest.fixture(scope="session")
def payload_lib(hook: ModuleType) -> ModuleType:
    """``wheels/dsh_runtime_bin/_payload.py``, as the build hook loads it."""
    return hook.payload_lib


@pytest.fixture
def make_payload(tmp_path: Path, payload_lib: ModuleType) -> Callable[..., Path]:
    """Install a fake payload; returns the site folder to put on ``PYTHONPATH``.

    ``files`` maps payload paths to bytes; the manifest records their sha256 (the package's
    own modules too, as the build hook does). ``manifest=False`` leaves it out.
    """

    def make(files: dict[str, bytes], *, key: str | None = None,
             manifest: bool = True) -> Path:
        site = tmp_path / "site"
        package = site / "dsh_runtime_bin"
        shutil.copytree(WHEELS / "dsh_runtime_bin", package,
                        ignore=shutil.ignore_patterns("__pycache__"))
        for relative, data in files.items():
            (package / relative).parent.mkdir(parents=True, exist_ok=True)
            (package / relative).write_bytes(data)
        if manifest:
            key = key or payload_lib.host_platform_key()
            (package / payload_lib.VERSION_NAME).write_text("9.8.7\n")
            recorded = {p.relative_to(package).as_posix(): p for p in package.rglob("*")
                        if p.is_file()}
            (package / "runtime.json").write_text(json.dumps({
                "format": payload_lib.MANIFEST_FORMAT, "version": "9.8.7", "platform": key,
                "executable": payload_lib.executable_name(key),
                "companions": {"rg": payload_lib.companion_name(key, "rg")},
                "files": {rel: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                                "size": p.stat().st_size} for rel, p in recorded.items()},
            }))
        return site

    return make
