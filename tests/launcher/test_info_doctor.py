"""``dsh info`` and ``dsh doctor``: one deterministic JSON document, exit codes, no paths."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
ENVELOPE = ["command", "data", "error", "ok", "profile", "schema_version"]


def one_document(stdout: str) -> dict[str, Any]:
    """The single JSON document ``stdout`` holds (anything after it fails the test)."""
    document, end = json.JSONDecoder().raw_decode(stdout)
    assert stdout[end:] == "\n"
    assert isinstance(document, dict)
    assert sorted(document) == ENVELOPE
    assert document["schema_version"] == 1
    return document


def test_info_json_is_byte_identical_and_path_free(run_dsh: RunDsh, tmp_path: Path) -> None:
    first = run_dsh("info", "--json")
    second = run_dsh("info", "--json")
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == second.stdout
    document = one_document(first.stdout)
    assert (document["command"], document["ok"], document["profile"], document["error"]) == (
        "info", True, None, None)
    data = document["data"]
    assert data["home"] == {"source": "DSH_HOME", "exists": True}
    ids = [row["id"] for row in data["profiles"]]
    assert ids == sorted(ids)
    assert {"web", "headless", "sdk", "sdk-minimal", "acp"} <= set(ids)
    for key in ("bundles", "carriers"):
        assert [row["id"] for row in data[key]] == sorted(row["id"] for row in data[key])
    assert str(tmp_path) not in first.stdout
    assert '"/' not in first.stdout


def test_info_home_source_and_read_only(run_dsh: RunDsh, tmp_path: Path) -> None:
    proc = run_dsh("info", "--json", "--home", "not-yet")
    data = one_document(proc.stdout)["data"]
    assert data["home"] == {"source": "--home", "exists": False}
    assert not (tmp_path / "cwd" / "not-yet").exists()
    proc = run_dsh("--home", "not-yet", "info", "--json")
    assert one_document(proc.stdout)["data"]["home"]["source"] == "--home"


def test_info_text_projection(run_dsh: RunDsh) -> None:
    proc = run_dsh("info")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("dsh ")
    assert "  sdk-minimal: dsh-sdk-minimal [startup] (shipped)\n" in proc.stdout
    assert "carriers:\n" in proc.stdout


def check_doctor_document(proc: subprocess.CompletedProcess[str], profile: str
                          ) -> dict[str, Any]:
    """A doctor run's document, after the contract checks every run must pass."""
    assert proc.stderr == ""
    document = one_document(proc.stdout)
    assert (document["command"], document["ok"], document["profile"], document["error"]) == (
        "doctor", True, profile, None)
    checks = document["data"]["checks"]
    assert [c["id"] for c in checks] == sorted(c["id"] for c in checks)
    assert {c["status"] for c in checks} <= {"ok", "warn", "fail"}
    failed = sum(c["status"] == "fail" for c in checks)
    assert document["data"]["failed"] == failed
    assert proc.returncode == (1 if failed else 0)
    assert '"/' not in proc.stdout
    return document


def test_doctor_json_on_a_fresh_home(run_dsh: RunDsh, dsh_home: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    proc = run_dsh("doctor", "--json", env={"DSH_HOME": str(fresh)})
    assert proc.returncode in (0, 1)
    document = check_doctor_document(proc, "sdk")
    statuses = {c["id"]: c["status"] for c in document["data"]["checks"]}
    for check in ("home.writable", "profile.resolvable", "bundle.dsh-base", "bundle.dsh-sdk-app",
                  "layer.bundle.dsh-base", "patch.warnings", "carrier.python"):
        assert statuses[check] == "ok", check
    assert any(c.startswith("plugin.") for c in statuses)
    assert str(tmp_path) not in proc.stdout
    again = run_dsh("doctor", "--json", env={"DSH_HOME": str(fresh)})
    assert again.stdout == proc.stdout



def test_an_install_without_the_optional_frozen_runtime_passes_strict(
        run_dsh: RunDsh, dsh_home: Path) -> None:
    """The python carrier runs dsh here, so the frozen runtime missing is no fault:
    ``doctor --strict`` used to fail every such install (``carrier.exe`` was a warning)."""
    import importlib.util

    if importlib.util.find_spec("dsh_runtime_bin") is not None:
        pytest.skip("dsh-runtime-bin is installed here: both carriers are available")
    proc = run_dsh("doctor", "--json")
    checks = {c["id"]: c for c in check_doctor_document(proc, "sdk")["data"]["checks"]}
    assert checks["carrier.exe"] == {
        "id": "carrier.exe", "status": "ok",
        "message": "dsh-runtime-bin not installed (optional: the python carrier runs dsh "
                   "here; pip install 'dsh-harness[runtime]' adds the frozen runtime)"}
    assert checks["carrier.python"] == {"id": "carrier.python", "status": "ok",
                                        "message": "available"}
    strict = run_dsh("doctor", "--strict")
    others = [c for c in checks.values() if c["status"] != "ok"]
    assert strict.returncode == (1 if others else 0), (strict.stdout, others)
    assert "[ok  ] carrier.exe: dsh-runtime-bin not installed (optional" in strict.stdout
    info = run_dsh("info")
    assert "  exe: not installed\n  python: available (this process)\n" in info.stdout

def test_doctor_reports_patch_warnings(run_dsh: RunDsh, tmp_path: Path) -> None:
    (tmp_path / "cwd" / "p.yml").write_text("- id: ghost\n  disabled: true\n", encoding="utf-8")
    proc = run_dsh("doctor", "--json", "--patch", "p.yml")
    document = check_doctor_document(proc, "sdk")
    checks = {c["id"]: c for c in document["data"]["checks"]}
    assert checks["patch.warnings"] == {
        "id": "patch.warnings", "status": "warn",
        "message": "$CWD/p.yml:1: unknown row id 'ghost'"}
    assert checks["layer.patch.$CWD/p.yml"]["status"] == "ok"
    strict = run_dsh("doctor", "--strict", "--patch", "p.yml")
    assert strict.returncode == 1
    assert "[WARN] patch.warnings: $CWD/p.yml:1: unknown row id 'ghost'" in strict.stdout
    assert "check(s) failed" in strict.stdout


def test_doctor_unknown_profile_is_a_failed_check(run_dsh: RunDsh) -> None:
    proc = run_dsh("doctor", "--json", "--profile", "nope")
    assert proc.returncode == 1
    document = check_doctor_document(proc, "nope")
    checks = {c["id"]: c for c in document["data"]["checks"]}
    assert checks["profile.resolvable"]["status"] == "fail"
    assert checks["profile.resolvable"]["message"].startswith(
        "unknown profile 'nope' (no $DSH_HOME/profiles/nope/profile.toml)")


def test_doctor_home_that_is_a_file(run_dsh: RunDsh, tmp_path: Path) -> None:
    blocker = tmp_path / "cwd" / "home-file"
    blocker.write_text("x\n", encoding="utf-8")
    proc = run_dsh("doctor", "--json", "--home", "home-file")
    assert proc.returncode == 1
    checks = {c["id"]: c for c in check_doctor_document(proc, "sdk")["data"]["checks"]}
    assert checks["home.writable"]["status"] == "fail"
    assert "profile.resolvable" not in checks
    assert blocker.read_text(encoding="utf-8") == "x\n"


def test_doctor_json_with_strict_is_a_usage_error(run_dsh: RunDsh) -> None:
    proc = run_dsh("doctor", "--json", "--strict")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("dsh: error: --strict is for people; with --json, read each "
                           "check's status\n")
