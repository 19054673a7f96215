"""Each way to install dsh, into a fresh virtualenv, from the project's own wheel.

The module builds the ``dsh-harness`` wheel once (``pip wheel --no-deps``) and gives each
test a new virtualenv, then uses only that environment's ``python`` and ``dsh``:

* **the SDK alone** (``pip install dsh-harness``): nothing else is installed; ``dsh.sdk``
  imports; the ``dsh`` command and the SDK each refuse in one line naming both extras;
* **the SDK and the frozen runtime** (``dsh-harness[runtime]`` plus the platform's
  ``dsh-runtime-bin`` wheel): still nothing else installed; the ``dsh`` command hands
  over to the frozen runtime (a headless run answers), and an SDK session finds the
  runtime wheel by itself. Needs a built runtime wheel: ``wheelhouse/`` (``python3
  scripts/smoke_runtime_wheel.py --wheel-out wheelhouse``, as ``.ci/run`` does) or
  ``DSH_TEST_RUNTIME_WHEEL``; skipped, saying so, without one;
* **the python runtime** (``dsh-harness[python]``, the README's install): the headless
  run happens in the ``dsh`` process itself, and an SDK session uses the python carrier;
* **a typed program**: the wheel carries ``dsh/py.typed``, so mypy, pointed at the fresh
  environment, reads the SDK's own annotations: a program using ``DshClient`` checks
  clean, and the same program misusing a result is reported, naming the types.

``tests/plugins/test_fresh_install.py`` takes the python install further (plugins).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh._version import __version__

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = ROOT / "examples" / "offline" / "patch.yml"
TIMEOUT = 900
BIN = "Scripts" if os.name == "nt" else "bin"
EXE = ".exe" if os.name == "nt" else ""

SDK_SESSION = """\
import json, sys
from dsh.sdk import ClientConfig, DshClient
home, cwd, patch = sys.argv[1:4]
config = ClientConfig(profile="sdk-minimal", dsh_home=home, cwd=cwd, patches=[patch],
                      initialize_timeout=60.0)
with DshClient(config) as client:
    result = client.new_session().run("Where am I working?")
    runtime = client.runtime
print(json.dumps({"carrier": runtime.carrier, "source": runtime.source,
                  "stop_reason": result.stop_reason, "answered": bool(result.final_text)}))
"""


TYPED_PROGRAM = """\
from dsh.sdk import DshClient
with DshClient() as client:
    answer: {annotation} = client.new_session().run("Hello").final_text
"""


def runtime_wheel() -> Path | None:
    """The runtime wheel of this version to install, if one was built."""
    given = os.environ.get("DSH_TEST_RUNTIME_WHEEL", "").strip()
    if given:
        return Path(given)
    found = sorted((ROOT / "wheelhouse").glob(f"dsh_runtime_bin-{__version__}-*.whl"))
    return found[-1] if found else None


class Env:
    """A fresh virtualenv with its own home and work folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "venv" / BIN
        self.python = self.bin / f"python{EXE}"
        self.home = root / "home"
        self.work = root / "work"
        self.work.mkdir(parents=True)
        venv.EnvBuilder(with_pip=True).create(root / "venv")
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith(("DSH_", "PYTHON", "VIRTUAL_ENV"))}
        environ["PATH"] = f"{self.bin}{os.pathsep}{environ.get('PATH', '')}"
        environ["DSH_HOME"] = str(self.home)
        self.env = environ

    def run(self, *argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in argv], cwd=self.work, env=self.env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=timeout, check=False)

    def ok(self, *argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = self.run(*argv, timeout=timeout)
        assert done.returncode == 0, f"{done.args}\n{done.stdout}\n{done.stderr}"
        return done

    def pip_install(self, *requirements: str | Path) -> None:
        self.ok(self.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                *requirements, timeout=TIMEOUT)

    def installed(self) -> list[str]:
        """Distributions in the venv besides pip's own."""
        listed = json.loads(self.ok(self.python, "-m", "pip", "list", "--format", "json",
                                    "--disable-pip-version-check").stdout)
        return sorted(p["name"].lower().replace("_", "-") for p in listed
                      if p["name"].lower() not in ("pip", "setuptools", "wheel"))

    def dsh(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / f"dsh{EXE}", *args)

    def sdk_session(self) -> dict[str, object]:
        done = self.ok(self.python, "-c", SDK_SESSION, self.home, self.work, OFFLINE)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                           "--disable-pip-version-check", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("dsh_harness-*.whl")
    return wheel


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Env]:
    yield Env(tmp_path / "fresh")


def test_the_sdk_alone_installs_nothing_else_and_says_what_runs_it(
        fresh: Env, project_wheel: Path) -> None:
    fresh.pip_install(project_wheel)
    assert fresh.installed() == ["dsh-harness"]
    assert fresh.dsh("--version").stdout == f"dsh {__version__}\n"
    fresh.ok(fresh.python, "-c", "from dsh.sdk import AsyncDshClient, ClientConfig, DshClient")

    refused = fresh.dsh("--profile", "headless", "--patch", OFFLINE, "hi")
    assert refused.returncode == 2 and refused.stdout == ""
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("dsh: error: this installation lacks the python runtime's")
    assert "pip install 'dsh-harness[python]'" in lines[0]
    assert "'dsh-harness[runtime]'" in lines[0]

    sdk = fresh.run(fresh.python, "-c", SDK_SESSION, fresh.home, fresh.work, OFFLINE)
    assert sdk.returncode != 0
    assert "RuntimeNotFoundError" in sdk.stderr and "dsh-harness[python]" in sdk.stderr
    assert "dsh-harness[runtime]" in sdk.stderr


@pytest.mark.skipif(runtime_wheel() is None,
                    reason="no dsh-runtime-bin wheel of this version in wheelhouse/ or "
                           "DSH_TEST_RUNTIME_WHEEL (build one: python3 "
                           "scripts/smoke_runtime_wheel.py --wheel-out wheelhouse)")
def test_the_sdk_and_the_frozen_runtime_need_nothing_else(
        fresh: Env, project_wheel: Path) -> None:
    wheel = runtime_wheel()
    assert wheel is not None
    fresh.pip_install(f"dsh-harness[runtime] @ {project_wheel.as_uri()}", wheel)
    assert fresh.installed() == ["dsh-harness", "dsh-runtime-bin"]

    answer = fresh.dsh("--profile", "headless", "--patch", OFFLINE, "Where am I working?")
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert answer.stdout.strip()
    info = json.loads(fresh.dsh("info", "--json").stdout)
    assert [c["id"] for c in info["data"]["carriers"] if c["current"]] == ["exe"]
    # The python carrier is not here (dsh plugin refuses, below), and info says so; the
    # doctor finds nothing wrong with an install of one carrier (strict included).
    carriers = {c["id"]: c for c in info["data"]["carriers"]}
    assert carriers["exe"]["available"] and not carriers["python"]["available"]
    assert carriers["python"]["frozen"] is True
    assert "  python: not available in the frozen runtime\n" in fresh.dsh("info").stdout
    doctor = json.loads(fresh.dsh("doctor", "--json").stdout)
    checks = {c["id"]: c for c in doctor["data"]["checks"]}
    assert checks["carrier.python"] == {
        "id": "carrier.python", "status": "ok",
        "message": "not available in the frozen runtime, which runs dsh here; `dsh plugin` "
                   "needs it (pip install 'dsh-harness[python]')"}
    assert checks["carrier.exe"]["status"] == "ok"

    session = fresh.sdk_session()
    assert (session["carrier"], session["source"]) == ("exe", "dsh_runtime_bin")
    assert session["stop_reason"] == "completed" and session["answered"]

    plugin = fresh.dsh("plugin", "--profile", "p", "list")
    assert plugin.returncode == 2
    assert plugin.stderr.splitlines() == [
        "dsh: error: dsh plugin installs plugins for this Python, which needs the python "
        "runtime's packages (hint: pip install 'dsh-harness[python]')"]


def test_the_python_runtime_runs_in_the_dsh_process(fresh: Env, project_wheel: Path) -> None:
    fresh.pip_install(f"dsh-harness[python] @ {project_wheel.as_uri()}")
    installed = fresh.installed()
    assert "dsh-harness" in installed and "dsh-runtime-bin" not in installed
    assert {"pyyaml", "click", "httpx", "pillow"} <= set(installed)

    answer = fresh.dsh("--profile", "headless", "--patch", OFFLINE, "Where am I working?")
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert answer.stdout.strip()
    info = json.loads(fresh.dsh("info", "--json").stdout)
    carriers = {c["id"]: c for c in info["data"]["carriers"]}
    assert carriers["python"]["current"] and carriers["python"]["available"]
    assert not carriers["exe"]["available"]

    session = fresh.sdk_session()
    assert (session["carrier"], session["source"]) == ("python", "sys.executable")
    assert session["stop_reason"] == "completed" and session["answered"]


def test_a_program_embedding_the_sdk_gets_its_types(fresh: Env, project_wheel: Path) -> None:
    """PEP 561: the installed package's ``py.typed`` makes mypy read ``dsh.sdk``'s types.

    mypy is this test environment's, pointed at the fresh venv's interpreter (it looks for
    installed packages there); without the marker it would refuse the import instead.
    """
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    fresh.pip_install(project_wheel)
    site = fresh.ok(fresh.python, "-c", "import dsh, os; print(os.path.dirname(dsh.__file__))")
    assert (Path(site.stdout.strip()) / "py.typed").is_file()

    def mypy(annotation: str) -> subprocess.CompletedProcess[str]:
        program = fresh.work / f"uses_{annotation}.py"
        program.write_text(TYPED_PROGRAM.format(annotation=annotation), encoding="utf-8")
        return fresh.run(sys.executable, "-m", "mypy", "--no-incremental",
                         "--python-executable", fresh.python, program.name)

    good = mypy("str")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Success: no issues found in 1 source file" in good.stdout
    bad = mypy("int")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert ('Incompatible types in assignment (expression has type "str", variable has '
            'type "int")') in bad.stdout
