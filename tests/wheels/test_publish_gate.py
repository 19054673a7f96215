"""The publish gate: exactly the four expected wheel names, each problem named."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from dsh._version import __version__

from .conftest import WHEELS


@pytest.fixture
def expected(gate: ModuleType) -> set[str]:
    platforms = json.loads((WHEELS / "platforms.json").read_text())["platforms"]
    return set(gate.expected_wheels(__version__, platforms))


def test_four_wheels_with_earned_tags(expected: set[str]) -> None:
    assert len(expected) == 4
    assert not any("none-any" in name or "-linux_" in name for name in expected)


def test_version_is_read_without_importing(gate: ModuleType) -> None:
    assert gate.dsh_version(WHEELS.parent / "src/dsh/_version.py") == __version__


def test_exact_set_passes(gate: ModuleType, expected: set[str], tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    for name in expected:
        (tmp_path / name).write_bytes(b"")
    assert gate.main([str(tmp_path)]) == 0
    assert "publish gate: ok, 4 wheels" in capsys.readouterr().out


def test_missing_and_unearned_wheels_fail(gate: ModuleType, expected: set[str],
                                          tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    names = sorted(expected)
    for name in names[1:]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / f"dsh_runtime_bin-{__version__}-py3-none-linux_x86_64.whl").touch()
    assert gate.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"publish gate: missing {names[0]}" in err
    unearned = f"dsh_runtime_bin-{__version__}-py3-none-linux_x86_64.whl"
    assert f"publish gate: unexpected {unearned}" in err
