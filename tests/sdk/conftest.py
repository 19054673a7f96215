"""Fixtures for the SDK client tests: fake runtimes and configs for them and the real one.

The root ``conftest`` already gives each test a private ``DSH_HOME`` and cwd. Every test
file is collected on every system (``test_collection.py`` checks): what a system cannot
run skips with its reason (``sdkkit``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sdkkit import OFFLINE_PATCH, write_fake_bin

from dsh.sdk import ClientConfig


@pytest.fixture
def fake(tmp_path: Path, dsh_home: Path) -> Callable[..., ClientConfig]:
    """``fake(mode, **config)``: a :class:`ClientConfig` running the fake runtime in
    ``mode``, with short shutdown rungs so ladder tests stay quick."""
    bins = tmp_path / "bin"
    bins.mkdir(exist_ok=True)

    def make(mode: str, **overrides: Any) -> ClientConfig:
        options: dict[str, Any] = {"dsh_bin": write_fake_bin(bins, mode),
                                   "dsh_home": dsh_home, "shutdown_timeout": 2.0}
        options.update(overrides)
        return ClientConfig(**options)

    return make


@pytest.fixture(params=["python", "exe"])
def carrier(request: pytest.FixtureRequest) -> str:
    """Each real-runtime test runs on both carriers; ``exe`` needs the runtime wheel."""
    if request.param == "exe" and importlib.util.find_spec("dsh_runtime_bin") is None:
        pytest.skip("exe carrier: the dsh-runtime-bin wheel (import dsh_runtime_bin) is "
                    "not installed; it is built by wheels/ (pip install 'dsh-harness[runtime]')")
    return request.param


@pytest.fixture
def real(dsh_home: Path, carrier: str) -> Callable[..., ClientConfig]:
    """``real(profile, **config)``: the real runtime, offline (scripted provider)."""

    def make(profile: str = "sdk-minimal", **overrides: Any) -> ClientConfig:
        options: dict[str, Any] = {"profile": profile, "patches": [OFFLINE_PATCH],
                                   "dsh_home": dsh_home, "carrier": carrier,
                                   "initialize_timeout": 60.0}
        options.update(overrides)
        return ClientConfig(**options)

    return make
