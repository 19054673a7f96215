"""``dsh plugin --profile p add`` SIGKILLed in the middle of an install.

A copy of the ``sdk`` profile with one plugin (the ``dsh-hello`` fixture) gets a second
one added, and the command is killed at three points, one after the other:

* during ``pip install`` (the test kills the command's whole process group while its
  installer runs);
* between the two renames that swap the plugin folder (old one moved aside, new one not
  yet in place), and just before ``profile.toml`` is replaced; these two are exact: the
  unmodified launcher runs in a process that SIGKILLs itself on that ``os.rename`` audit
  event (:func:`faultkit.killing_launcher`).

After each kill the profile still works with its old plugin set: ``--dump-config``
composes exactly the old tree, ``-h`` boots the runtime, ``plugin list`` answers. Then
a last ``add`` succeeds, the new bundle applies, and no staging folder is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import Figure, eventually, killing_launcher

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="kills process groups")]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dsh-hello-plugin"


def _bye_plugin(where: Path) -> Path:
    """A plugin distribution with only a bundle, ``dsh-bye``, that sets max_steps 7."""
    package = where / "dsh_bye_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "patch.yml").write_text("- {id: agent, merge: {config: {max_steps: 7}}}\n")
    (where / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "dsh-bye-plugin"\nversion = "1.0"\n'
        '[project.entry-points."dsh.bundles"]\ndsh-bye = "dsh_bye_plugin"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["dsh_bye_plugin"]\n')
    return where


def _tree(run_dsh: Callable[..., Any]) -> list[dict[str, Any]]:
    done = run_dsh("--profile", "p", "--dump-config", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["rows"]


def _still_works(run_dsh: Callable[..., Any], old_tree: list[dict[str, Any]],
                 old_requirements: list[str]) -> None:
    assert _tree(run_dsh) == old_tree
    booted = run_dsh("--profile", "p", "-h")
    assert booted.returncode == 0, booted.stderr
    listed = run_dsh("plugin", "--profile", "p", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)["data"]
    assert [r["requirement"] for r in data["requirements"]] == old_requirements
    assert all(r["installed"] for r in data["requirements"]), data


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in task.read_text().split()]
        except OSError:
            continue
    return found


def _kill_mid_pip(spec: str) -> int:
    """Start ``add``; once its installer runs, SIGKILL the whole process group."""
    proc = subprocess.Popen([sys.executable, "-m", "dsh", "plugin", "--profile", "p", "add",
                             spec], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # the installer is the command's only child process
        eventually(lambda: bool(_children(proc.pid)) or proc.poll() is not None,
                   "the installer started", bound=120)
        time.sleep(0.3)  # into the install (it takes seconds)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    return proc.returncode


def test_killed_install_leaves_a_working_profile(run_dsh: Callable[..., Any], dsh_home: Path,
                                                 figure: Figure) -> None:
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    bye = str(_bye_plugin(Path.cwd() / "bye"))
    made = run_dsh("--profile", "p", "--from-default-profile", "sdk", "--dump-config")
    assert made.returncode == 0, made.stderr  # an application, so that -h boots it
    added = run_dsh("plugin", "--profile", "p", "add", "./hello", timeout=180)
    assert added.returncode == 0, added.stderr
    profile = dsh_home / "profiles" / "p"
    old_tree = _tree(run_dsh)
    old_requirements = [str(Path.cwd() / "hello")]
    toml = (profile / "profile.toml").read_bytes()

    assert _kill_mid_pip(bye) == -signal.SIGKILL
    _still_works(run_dsh, old_tree, old_requirements)

    for needle, nth in (("plugins", 2), ("profile.toml", 1)):
        killed = killing_launcher("os.rename", needle, nth, "plugin", "--profile", "p",
                                  "add", bye)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert (profile / "profile.toml").read_bytes() == toml
        _still_works(run_dsh, old_tree, old_requirements)

    added = run_dsh("plugin", "--profile", "p", "add", bye, timeout=180)
    assert added.returncode == 0, added.stderr
    rows = _tree(run_dsh)
    assert next(r for r in rows if r["id"] == "agent")["config"]["max_steps"] == 7
    assert sorted(p.name for p in profile.iterdir()) == ["plugins", "profile.toml"]
    figure("kills", 3)
    figure("broken profile loads", 0)
    figure("later add", "ok")
