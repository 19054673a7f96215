"""The built runtime wheel stays under PyPI's 15 MB (decimal), the runtime wheel's target.

Runs on every ``dsh-runtime-bin`` wheel of this version in ``wheelhouse/`` (``.ci/run``
builds the host's there with ``scripts/smoke_runtime_wheel.py --wheel-out wheelhouse``
before the tests) or the one ``DSH_TEST_RUNTIME_WHEEL`` names; skipped, saying so, without
one. The failure names the wheel's largest members, where a regression shows first.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from dsh._version import __version__

from .conftest import REPO

#: PyPI's decimal megabytes (docs/contracts.md, "Carriers and wheels").
LIMIT_BYTES = 15_000_000


def built_wheels() -> list[Path]:
    """The runtime wheels to weigh: the named one, else this version's in wheelhouse/."""
    given = os.environ.get("DSH_TEST_RUNTIME_WHEEL", "").strip()
    if given:
        return [Path(given)]
    return sorted((REPO / "wheelhouse").glob(f"dsh_runtime_bin-{__version__}-*.whl"))


def largest_members(wheel: Path, count: int = 12) -> str:
    """The ``count`` largest members by compressed size, one per line."""
    with zipfile.ZipFile(wheel) as archive:
        members = sorted(archive.infolist(), key=lambda m: m.compress_size, reverse=True)
    return "\n".join(f"{m.compress_size:>10,} {m.filename}" for m in members[:count])


NO_WHEEL = pytest.param(None, marks=pytest.mark.skip(
    reason="no dsh-runtime-bin wheel of this version in wheelhouse/ or DSH_TEST_RUNTIME_WHEEL "
           "(python3 scripts/smoke_runtime_wheel.py --wheel-out wheelhouse builds one)"))


@pytest.mark.parametrize("wheel", built_wheels() or [NO_WHEEL],
                         ids=lambda path: path.name if path else "no-wheel")
def test_runtime_wheel_is_under_15_mb(wheel: Path) -> None:
    size = wheel.stat().st_size
    assert size <= LIMIT_BYTES, (
        f"{wheel.name} is {size:,} bytes, over the runtime wheel's {LIMIT_BYTES:,} "
        f"(PyPI's 15 MB); its largest members (compressed bytes):\n{largest_members(wheel)}")
