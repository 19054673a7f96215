"""The import weight of ``dsh --version`` and ``dsh -h``, pinned in a real process.

The launcher is run as ``python -m dsh`` with ``PYTHONPROFILEIMPORTTIME=1``: the
interpreter itself then reports every module the process imported, on stderr, so the test
sees exactly what a user's ``dsh --version`` pays for, without any wrapper of its own.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
HEAVY = ("yaml", "httpx", "asyncio", "dsh.runtime", "click", "dotenv", "tomllib", "tomli")
COMPOSING = ("yaml", "tomllib", "tomli", "dsh.config.yamlreader", "dsh.config.patchfile",
             "dsh.config.compose", "dsh.config.layercache", "dsh.config.resolve")


def _is(module: str, names: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``names`` or inside one of them."""
    return any(module == n or module.startswith(n + ".") for n in names)


def imported_modules(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


@pytest.mark.parametrize("flag", ["--version", "-V", "-h", "--help"])
def test_version_and_help_stay_light(run_dsh: RunDsh, flag: str) -> None:
    proc = run_dsh(flag, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0
    modules = imported_modules(proc.stderr)
    assert "dsh.cli.main" in modules  # the measurement sees the launcher itself
    heavy = sorted(m for m in modules if _is(m, HEAVY))
    assert heavy == []


def test_a_dump_does_import_yaml(run_dsh: RunDsh) -> None:
    """The control: the same measurement does see yaml when a profile is first composed."""
    proc = run_dsh("--profile", "sdk", "--dump-config", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0
    modules = imported_modules(proc.stderr)
    assert "yaml" in modules
    assert not any(_is(m, ("dsh.runtime", "httpx", "asyncio")) for m in modules)


def test_a_second_launch_composes_nothing(run_dsh: RunDsh) -> None:
    """An unchanged ``startup`` profile's composition comes from ``cache/launch``: neither
    the YAML reader nor the composer (nor the layer cache, nor YAML, nor TOML) is
    imported, and the dump is the same."""
    first = run_dsh("--profile", "sdk", "--dump-config", "--json")
    proc = run_dsh("--profile", "sdk", "--dump-config", "--json",
                   env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0
    assert proc.stdout == first.stdout
    modules = imported_modules(proc.stderr)
    assert "dsh.config.launchcache" in modules
    assert sorted(m for m in modules if _is(m, COMPOSING)) == []


def test_a_live_profile_reads_the_layer_cache_without_yaml(run_dsh: RunDsh) -> None:
    """A ``live`` profile composes on every launch (its reloads recompose from the layers
    its boot parsed), each layer and its profile.toml from ``cache/layers``: neither YAML
    nor TOML is imported."""
    first = run_dsh("--profile", "web", "--dump-config", "--json")
    proc = run_dsh("--profile", "web", "--dump-config", "--json",
                   env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0
    assert proc.stdout == first.stdout
    modules = imported_modules(proc.stderr)
    assert "dsh.config.layercache" in modules and "dsh.config.compose" in modules
    assert not any(m.split(".")[0] in ("yaml", "tomllib", "tomli") for m in modules)
