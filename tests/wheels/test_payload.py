"""``dsh_runtime_bin`` as installed: finding the runtime, its companions, verifying files.

Each test lays out a fake installed payload and asks a real interpreter that imports it
from there, as an SDK client or ``dsh doctor`` would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PROBE = """
import json, sys
import dsh_runtime_bin as b
out = {"all": sorted(b.__all__)}
for name, call in [("runtime", b.runtime_path), ("rg", lambda: b.companion_path("rg")),
                   ("verify", b.verify), ("version", lambda: b.__version__)]:
    try:
        value = call()
        out[name] = value if isinstance(value, list) else str(value)
    except Exception as exc:
        out[name] = {"type": type(exc).__name__, "message": str(exc),
                     "file_not_found": isinstance(exc, FileNotFoundError)}
out["version_or_none"] = getattr(b, "__version__", None)
print(json.dumps(out))
"""


def probe(site: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    return dict(json.loads(proc.stdout))


@pytest.fixture
def names(payload_lib: ModuleType) -> tuple[str, str]:
    key = payload_lib.host_platform_key()
    return payload_lib.executable_name(key), payload_lib.companion_name(key, "rg")


def test_public_api_is_exactly(make_payload: Callable[..., Path]) -> None:
    assert probe(make_payload({}))["all"] == [
        "ManifestError", "RuntimeMissingError", "companion_path", "manifest", "runtime_path",
        "verify"]


def test_intact_payload(make_payload: Callable[..., Path], names: tuple[str, str]) -> None:
    exe, rg = names
    site = make_payload({exe: b"exe", rg: b"rg", "_internal/lib.so": b"\x7fELF"})
    found = probe(site)
    assert found["runtime"] == str(site / "dsh_runtime_bin" / exe)
    assert found["rg"] == str(site / "dsh_runtime_bin" / rg)
    assert found["verify"] == []
    assert found["version"] == found["version_or_none"] == "9.8.7"


def test_missing_runtime_lists_what_was_looked_for(make_payload: Callable[..., Path],
                                                   payload_lib: ModuleType) -> None:
    # The manifest names another platform's executable: both names are tried and listed.
    site = make_payload({}, key="linux-riscv64")
    error = probe(site)["runtime"]
    package = site / "dsh_runtime_bin"
    host = payload_lib.executable_name(payload_lib.host_platform_key())
    assert error["type"] == "RuntimeMissingError" and error["file_not_found"]
    assert error["message"] == (f"the dsh runtime executable not found; looked for: "
                                f"{package / 'dsh-runtime-linux-riscv64'}, {package / host}")


def test_missing_manifest_still_finds_the_host_executable(
        make_payload: Callable[..., Path], names: tuple[str, str]) -> None:
    site = make_payload({names[0]: b"exe"}, manifest=False)
    found = probe(site)
    assert found["runtime"] == str(site / "dsh_runtime_bin" / names[0])
    assert found["verify"]["type"] == "RuntimeMissingError"
    assert "runtime.json" in found["verify"]["message"]
    assert found["version_or_none"] is None


@pytest.mark.skipif(not hasattr(os, "uname"), reason="Windows names its host through platform")
def test_finding_the_runtime_reads_no_manifest_and_loads_no_hashing(
        make_payload: Callable[..., Path], names: tuple[str, str]) -> None:
    """Every SDK client's start runs this lookup: one stat, no 130 KB manifest read, no
    OpenSSL (hashlib) and no platform module."""
    site = make_payload({names[0]: b"exe"})
    (site / "dsh_runtime_bin" / "runtime.json").write_text("not json")  # read: it raises
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(site)
    code = ("import json, sys, dsh_runtime_bin as b; path = str(b.runtime_path()); "
            "print(json.dumps([path, sorted({'hashlib', 'platform'} & set(sys.modules))]))")
    done = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [str(site / "dsh_runtime_bin" / names[0]), []]


def test_missing_companion_lists_path_and_known_companions(
        make_payload: Callable[..., Path], names: tuple[str, str]) -> None:
    exe, rg = names
    site = make_payload({exe: b"exe"})
    error = probe(site)["rg"]
    assert error["type"] == "RuntimeMissingError" and error["file_not_found"]
    assert error["message"] == (f"companion 'rg' not found; looked for: "
                                f"{site / 'dsh_runtime_bin' / rg} "
                                "(companions in the manifest: rg)")


def test_verify_reports_a_changed_byte_and_a_missing_file(
        make_payload: Callable[..., Path], names: tuple[str, str]) -> None:
    exe, rg = names
    site = make_payload({exe: b"exe", rg: b"rg", "_internal/lib.so": b"\x7fELF-1"})
    package = site / "dsh_runtime_bin"
    (package / "_internal/lib.so").write_bytes(b"\x7fELF-2")
    (package / rg).unlink()
    assert probe(site)["verify"] == ["_internal/lib.so", rg]


def test_corrupt_manifest(make_payload: Callable[..., Path], names: tuple[str, str]) -> None:
    site = make_payload({names[0]: b"exe"})
    (site / "dsh_runtime_bin/runtime.json").write_text('{"format": 1, "files": []}')
    found = probe(site)
    assert found["verify"]["type"] == "ManifestError"
    assert "'files' must map each path to its sha256" in found["verify"]["message"]
    # The version is its own file (read on every client start without the manifest).
    assert found["version"] == "9.8.7"


@pytest.mark.parametrize(("content", "error"), [(None, "the runtime version file not found"),
                                                ("\n", "VERSION: empty")])
def test_a_missing_or_empty_version_file_is_no_version(
        make_payload: Callable[..., Path], names: tuple[str, str], content: str | None,
        error: str) -> None:
    site = make_payload({names[0]: b"exe"})
    version_file = site / "dsh_runtime_bin" / "VERSION"
    if content is None:
        version_file.unlink()
    else:
        version_file.write_text(content)
    found = probe(site)
    # ``__version__`` says why as an AttributeError, so getattr(..., None) answers None.
    assert found["version"]["type"] == "AttributeError"
    assert error in found["version"]["message"]
    assert found["version_or_none"] is None
    assert found["runtime"] == str(site / "dsh_runtime_bin" / names[0])
