"""The distribution's names and layout: what ``pyproject.toml`` declares is what dsh says.

``dsh.core.distribution`` is where every install hint comes from, and ``PYTHON_MODULES`` is how
the ``dsh`` command and the SDK tell whether the python runtime can run here: both must
match the ``python`` extra. The base distribution depends on nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from dsh._version import __version__
from dsh.core import distribution

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# Each requirement's distribution name → the top-level module dsh imports from it.
IMPORT_NAMES = {"click": "click", "pyyaml": "yaml", "python-dotenv": "dotenv",
                "httpx": "httpx", "watchfiles": "watchfiles",
                "tomlkit": "tomlkit", "filelock": "filelock", "tomli": "tomli",
                "starlette": "starlette", "uvicorn": "uvicorn",
                "markdownify": "markdownify", "pillow": "PIL"}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return match.group(0).lower()


def test_the_distribution_is_the_published_name() -> None:
    assert PROJECT["name"] == distribution.DIST_NAME == "dsh-harness"
    assert PROJECT["scripts"] == {"dsh": "dsh.cli.main:main"}


def test_the_base_depends_on_nothing() -> None:
    """The SDK and the dsh command install alone; the runtime's packages are extras."""
    assert PROJECT["dependencies"] == []


def test_python_modules_are_the_python_extra() -> None:
    extra = PROJECT["optional-dependencies"][distribution.PYTHON_EXTRA]
    wanted = set()
    for requirement in extra:
        marker = requirement.partition(";")[2].strip()
        if marker == "python_version < '3.11'" and sys.version_info >= (3, 11):
            continue
        assert not marker or marker == "python_version < '3.11'", requirement
        wanted.add(IMPORT_NAMES[_name(requirement)])
    assert set(distribution.PYTHON_MODULES) == wanted


def test_the_runtime_extra_pins_this_version_of_the_runtime_wheel() -> None:
    extras = PROJECT["optional-dependencies"]
    assert extras[distribution.RUNTIME_EXTRA] == [f"{distribution.RUNTIME_DIST}=={__version__}"]


def test_hints_name_the_real_distribution() -> None:
    assert distribution.install_hint() == "pip install dsh-harness"
    assert distribution.python_hint() == "pip install 'dsh-harness[python]'"
    assert distribution.runtime_hint() == "pip install 'dsh-harness[runtime]'"
    assert "dsh-harness[python]" in distribution.either_hint()
    assert "dsh-harness[runtime]" in distribution.either_hint()
