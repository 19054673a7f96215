"""The wheel smoke test runs where cibuildwheel runs it: an environment without Pillow.

cibuildwheel's test step runs ``scripts/smoke_runtime_wheel.py`` in an isolated virtualenv
that holds the wheel under test and nothing it does not ask for. The script once drew its
test images with Pillow and so failed there on every platform; its images are now files
(``tests/fixtures/images``). This test makes a fresh virtualenv, checks Pillow is not in
it, and runs the whole smoke test there against an already built runtime wheel. Skipped,
saying so, without one (``wheelhouse/``, as ``.ci/run`` builds it, or
``DSH_TEST_RUNTIME_WHEEL``).
"""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest

from dsh._version import __version__

ROOT = Path(__file__).resolve().parents[2]
BIN = "Scripts" if os.name == "nt" else "bin"


def runtime_wheel() -> Path | None:
    given = os.environ.get("DSH_TEST_RUNTIME_WHEEL", "").strip()
    if given:
        return Path(given)
    found = sorted((ROOT / "wheelhouse").glob(f"dsh_runtime_bin-{__version__}-*.whl"))
    return found[-1] if found else None


@pytest.mark.skipif(runtime_wheel() is None,
                    reason="no dsh-runtime-bin wheel of this version in wheelhouse/ or "
                           "DSH_TEST_RUNTIME_WHEEL (python3 scripts/smoke_runtime_wheel.py "
                           "--wheel-out wheelhouse builds one)")
def test_the_smoke_test_passes_in_a_venv_without_pillow(tmp_path: Path) -> None:
    wheel = runtime_wheel()
    assert wheel is not None
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    python = tmp_path / "venv" / BIN / ("python.exe" if os.name == "nt" else "python")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DSH_", "PYTHON", "VIRTUAL_ENV"))}
    lacks = subprocess.run([str(python), "-c", "import PIL"], capture_output=True, env=env,
                           timeout=60, check=False)
    assert lacks.returncode != 0, "the fresh venv has Pillow: the check would prove nothing"
    done = subprocess.run([str(python), str(ROOT / "scripts/smoke_runtime_wheel.py"),
                           "--wheel", str(wheel), "--repeat", "1"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
                          check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert done.stdout.rstrip().endswith("smoke: ok")
