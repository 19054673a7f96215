"""Loading is side-effect free: commands that only read never write to the home.

Issue 22. A home that is seeded and whose layer cache is warm is snapshotted (every
path's inode, mode, size and modification time, folders included, so a file written
back unchanged, renamed over or created and removed again shows) before and after the
reading commands; nothing may differ. A profile left with its plugin folder set aside by
a ``dsh plugin`` killed mid-swap is read where it is: the launch works, nothing is put
back, ``dsh doctor`` reports it, and only ``dsh plugin`` repairs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dsh-hello-plugin"
READING = (("info", "--json"), ("--profile", "sdk", "--dump-config", "--json"),
           ("--profile", "web", "--dump-config"), ("profile", "list", "--json"))


def home_state(home: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every path under ``home`` (itself included) with its inode, mode, size and
    modification time in nanoseconds, links not followed."""
    state = {}
    for folder, dirs, files in os.walk(home):
        for name in [".", *dirs, *files] if folder == str(home) else [*dirs, *files]:
            path = Path(folder, name)
            found = path.lstat()
            state[str(path.relative_to(home))] = (found.st_ino, found.st_mode, found.st_size,
                                                  found.st_mtime_ns)
    return state


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


def test_reading_commands_never_write_to_a_seeded_warm_home(run_dsh: RunDsh,
                                                             dsh_home: Path) -> None:
    for args in READING * 2:  # seeds sdk and web, fills the layer cache
        _ok(run_dsh(*args))
    before = home_state(dsh_home)
    assert "cache" in {p.split(os.sep)[0] for p in before}  # the cache is there, warm
    outputs = [_ok(run_dsh(*args)).stdout for args in READING]
    assert home_state(dsh_home) == before
    assert [_ok(run_dsh(*args)).stdout for args in READING] == outputs


def test_a_plugin_folder_set_aside_is_read_where_it_is(run_dsh: RunDsh, dsh_home: Path,
                                                       tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "hello")
    _ok(run_dsh("plugin", "--profile", "p", "add", "--from", "sdk", str(tmp_path / "hello"),
                timeout=180))
    tree = json.loads(_ok(run_dsh("--profile", "p", "--dump-config", "--json")).stdout)
    profile = dsh_home / "profiles" / "p"
    # What a `dsh plugin` SIGKILLed between the swap's two renames leaves behind.
    aside = profile / ".plugins-old.killed"
    aside.mkdir()
    (profile / "plugins").rename(aside / "plugins")
    again = json.loads(_ok(run_dsh("--profile", "p", "--dump-config", "--json")).stdout)
    assert again["rows"] == tree["rows"]  # the hello bundle still comes from its plugins
    assert (aside / "plugins").is_dir() and not (profile / "plugins").exists()
    before = home_state(dsh_home)  # the bundle's new place is in the layer cache now

    _ok(run_dsh("--profile", "p", "--dump-config", "--json"))
    listed = json.loads(_ok(run_dsh("plugin", "--profile", "p", "list", "--json")).stdout)
    assert [r["installed"] for r in listed["data"]["requirements"]] == [True]
    _ok(run_dsh("--profile", "p", "-h"))
    assert home_state(dsh_home) == before  # nothing renamed back, nothing created

    doctor = run_dsh("doctor", "--profile", "p", "--json")
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["data"]["checks"]}
    assert checks["profile.plugins"]["status"] == "warn"
    assert "killed while swapping the plugin folder" in checks["profile.plugins"]["message"]
    assert "`dsh plugin --profile p sync`" in checks["profile.plugins"]["message"]
    assert not (profile / "plugins").exists()

    _ok(run_dsh("plugin", "--profile", "p", "sync", timeout=180))
    assert sorted(p.name for p in profile.iterdir()) == ["plugins", "profile.toml"]
    doctor = run_dsh("doctor", "--profile", "p", "--json")
    assert "profile.plugins" not in {c["id"] for c in json.loads(doctor.stdout)["data"]["checks"]}
