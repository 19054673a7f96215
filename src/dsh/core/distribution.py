"""The names dsh is installed under, in one place: every install hint reads them here.

``DIST_NAME`` is the distribution ``pip install`` takes: the ``dsh`` command, the SDK
(``dsh.sdk``) and the runtime's code, depending on nothing outside the standard library,
so a program can embed the SDK without taking on the runtime's packages. What runs the
runtime is chosen with an extra:

* ``PYTHON_EXTRA`` (``dsh-harness[python]``): the runtime's third-party packages, so it
  runs on this Python (the python carrier; ``dsh plugin`` needs it);
* ``RUNTIME_EXTRA`` (``dsh-harness[runtime]``): ``RUNTIME_DIST``, the frozen runtime for
  this platform, pinned to this version (the exe carrier), which brings its own.

``PYTHON_MODULES`` are the top-level modules the python carrier imports from the
``python`` extra (``tests/launcher/test_distribution.py`` keeps them in step with
``pyproject.toml``). Renaming the distribution is a change of these lines only.
"""

from __future__ import annotations

import sys

DIST_NAME = "dsh-harness"
RUNTIME_DIST = "dsh-runtime-bin"
RUNTIME_EXTRA = "runtime"
PYTHON_EXTRA = "python"
POSTGRES_EXTRA = "postgres"

PYTHON_MODULES: tuple[str, ...] = (
    "click", "yaml", "dotenv", "httpx", "watchfiles", "tomlkit", "filelock", "starlette",
    "uvicorn", "markdownify", "PIL",
    *(("tomli",) if sys.version_info < (3, 11) else ()),
)


def install_hint(extra: str | None = None) -> str:
    """The command that installs dsh (with ``extra``), as a user would paste it."""
    return f"pip install '{DIST_NAME}[{extra}]'" if extra else f"pip install {DIST_NAME}"


def runtime_hint() -> str:
    """The command that installs the frozen runtime wheel for this platform."""
    return install_hint(RUNTIME_EXTRA)


def python_hint() -> str:
    """The command that installs the packages the runtime needs to run on this Python."""
    return install_hint(PYTHON_EXTRA)


def either_hint() -> str:
    """Both ways to get a runtime, for an installation that has neither."""
    return (f"{python_hint()} to run it on this Python, or '{DIST_NAME}[{RUNTIME_EXTRA}]' "
            "for the frozen runtime")
