"""``dsh.sdk`` needs nothing but the standard library, shown in a process that has nothing else.

The probe runs as ``python -S -I``: no site-packages, no user site, ``PYTHON*`` ignored.
Its only path beyond the standard library is a temporary folder holding a link to the
``dsh`` package of this checkout (so every third-party package the runtime needs is out
of reach). It imports every module of ``dsh.sdk`` and the public names, reports any
module loaded from outside the standard library and ``dsh``, then drives a real runtime
(this installation's ``dsh``, given as ``dsh_bin``) through start, a scripted run and
close: an SDK client needs no package of its own to work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = ROOT / "examples" / "offline" / "patch.yml"

PROBE = textwrap.dedent("""\
    import json, pkgutil, sys
    sys.path.insert(0, sys.argv[1])
    assert sys.flags.no_site and sys.flags.isolated
    import dsh, dsh.sdk
    from dsh.sdk import AsyncDshClient, ClientConfig, DshClient, RuntimeNotFoundError
    for info in pkgutil.iter_modules(dsh.sdk.__path__, "dsh.sdk."):
        __import__(info.name)
    stdlib = sys.stdlib_module_names
    foreign = sorted(name for name in sys.modules
                     if name.split(".")[0] not in stdlib and name.split(".")[0] != "dsh"
                     and name != "__main__")
    home, cwd, patch, dsh_bin = sys.argv[2:6]
    try:  # no runtime of its own reachable: the error says where it looked
        DshClient(ClientConfig(dsh_home=home, cwd=cwd, carrier="python")).start()
    except RuntimeNotFoundError as exc:
        not_found = str(exc)
    else:
        not_found = None
    config = ClientConfig(profile="sdk-minimal", dsh_home=home, cwd=cwd, patches=[patch],
                          dsh_bin=dsh_bin)
    with DshClient(config) as client:
        result = client.new_session().run("Where am I working?")
    print(json.dumps({"foreign": foreign, "not_found": not_found,
                      "stop_reason": result.stop_reason, "answered": bool(result.final_text),
                      "state": client.state.value}))
    """)


def _dsh_script() -> Path:
    return Path(sys.executable).parent / ("dsh.exe" if os.name == "nt" else "dsh")


@pytest.mark.skipif(not _dsh_script().exists(), reason="no dsh console script beside Python")
def test_the_sdk_imports_and_runs_with_the_standard_library_alone(
        tmp_path: Path, dsh_home: Path) -> None:
    isolated = tmp_path / "path"
    isolated.mkdir()
    link = isolated / "dsh"
    try:
        link.symlink_to(ROOT / "src" / "dsh", target_is_directory=True)
    except OSError:  # no symlinks (Windows without the privilege): a copy will do
        import shutil

        shutil.copytree(ROOT / "src" / "dsh", link)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", PROBE, str(isolated), str(dsh_home), str(work),
         str(OFFLINE), str(_dsh_script())],
        capture_output=True, text=True, timeout=120, cwd=work, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["foreign"] == [], "dsh.sdk imported packages outside the standard library"
    assert out["not_found"] and "the python runtime's packages are not installed" in out[
        "not_found"]
    assert out["stop_reason"] == "completed" and out["answered"], out
    assert out["state"] == "closed"
