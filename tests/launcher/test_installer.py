# ruff: noqa: RUF001  (the outputs below are in pip's own characters, its multiplication sign too)
"""``dsh.cli.installer``: the cause read from an installer's output, and build backends.

The outputs below are pip 23's own words for each failure (captured from real runs);
:func:`cause` must name the failing step and its error lines, never pip's closing
"See above for output.", and tell a failed backend fetch (offline) from other failures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.cli.installer import build_backend, cause

BUILD_DEPS_OFFLINE = """\
Looking in links: /opt/wheels
Processing ./hatch
  Installing build dependencies: started
  Installing build dependencies: finished with status 'error'
  error: subprocess-exited-with-error

  × pip subprocess to install build dependencies did not run successfully.
  │ exit code: 1
  ╰─> [3 lines of output]
      Looking in links: /opt/wheels, /opt/wheels
      ERROR: Could not find a version that satisfies the requirement hatchling (from versions: none)
      ERROR: No matching distribution found for hatchling
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

× pip subprocess to install build dependencies did not run successfully.
│ exit code: 1
╰─> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip.
"""

BUILD_FAILS = """\
Processing ./broken
  Installing build dependencies: started
  Installing build dependencies: finished with status 'done'
  Getting requirements to build wheel: started
  Getting requirements to build wheel: finished with status 'error'
  error: subprocess-exited-with-error

  × Getting requirements to build wheel did not run successfully.
  │ exit code: 1
  ╰─> [4 lines of output]
      Traceback (most recent call last):
        File "setup.py", line 1, in <module>
          import numpy
      ModuleNotFoundError: No module named 'numpy'
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

× Getting requirements to build wheel did not run successfully.
│ exit code: 1
╰─> See above for output.
"""

NOT_FOUND = """\
Looking in links: /opt/wheels
ERROR: Could not find a version that satisfies the requirement dsh-nope (from versions: none)
ERROR: No matching distribution found for dsh-nope
"""

CRASH = """\
Processing ./x
ERROR: Exception:
Traceback (most recent call last):
  File "pip/_internal/cli/base_command.py", line 180, in exc_logging_wrapper
    status = run_func(*args)
OSError: [Errno 28] No space left on device: '/target/x/__init__.py'
"""

BACKEND_UNAVAILABLE = """\
ERROR: Exception:
Traceback (most recent call last):
  File "pip/_vendor/pyproject_hooks/_impl.py", line 321, in _call_hook
    raise BackendUnavailable(data.get('traceback', ''))
pip._vendor.pyproject_hooks._impl.BackendUnavailable: Traceback (most recent call last):
  File "importlib/__init__.py", line 126, in import_module
ModuleNotFoundError: No module named 'no_such_backend'
"""

NO_BDIST_WHEEL = """\
  × Building wheel for x (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> [3 lines of output]
      running bdist_wheel
      usage: setup.py [global_opts] cmd1 [cmd1_opts] [cmd2 [cmd2_opts] ...]
      error: invalid command 'bdist_wheel'
      [end of output]
  hint: See above for details.
"""


@pytest.mark.parametrize(("output", "expected", "fetching"), [
    (BUILD_DEPS_OFFLINE,
     "pip subprocess to install build dependencies did not run successfully: Could not find "
     "a version that satisfies the requirement hatchling (from versions: none); No matching "
     "distribution found for hatchling", True),
    (BUILD_FAILS, "Getting requirements to build wheel did not run successfully: "
                  "ModuleNotFoundError: No module named 'numpy'", False),
    (NOT_FOUND, "Could not find a version that satisfies the requirement dsh-nope (from "
                "versions: none); No matching distribution found for dsh-nope", False),
    (CRASH, "[Errno 28] No space left on device", False),
    (BACKEND_UNAVAILABLE, "ModuleNotFoundError: No module named 'no_such_backend'", False),
    (NO_BDIST_WHEEL, "Building wheel for x (pyproject.toml) did not run successfully: "
                     "invalid command 'bdist_wheel'", False),
    ("", "no output", False),
])
def test_the_cause_of_a_failure(output: str, expected: str, fetching: bool) -> None:
    assert cause(output) == (expected, fetching)


def test_a_long_cause_is_cut() -> None:
    text, _ = cause("ERROR: " + "x" * 1000)
    assert len(text) == 300 and text.endswith("...")


def test_build_backends(tmp_path: Path) -> None:
    assert build_backend(tmp_path) == ("setuptools.build_meta:__legacy__",
                                       ["setuptools>=40.8.0"])
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling>=1", "hatch-vcs"]\n'
        'build-backend = "hatchling.build"\n')
    assert build_backend(tmp_path) == ("hatchling.build", ["hatchling>=1", "hatch-vcs"])
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert build_backend(tmp_path)[0] == "setuptools.build_meta:__legacy__"
    (tmp_path / "pyproject.toml").write_text("not toml [")
    assert build_backend(tmp_path)[0] == "setuptools.build_meta:__legacy__"
