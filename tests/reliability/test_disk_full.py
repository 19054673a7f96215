"""A full disk under the home: a tiny tmpfs (the honest ENOSPC; root only), filled up.

* Full before first use: seeding the profile fails with one clear line, exit 2, and
  leaves no half-seeded profile or staging folder behind.
* Full before the runtime starts (home seeded): the sessions row fails to start, exit 2,
  one clear line; ``sessions.db`` is not corrupt.
* Full during ``dsh plugin add``: the install fails with one line naming the cause
  (``No space left on device``), the profile folder is unchanged and still loads.
* Full in the middle of a session: turns still run and queued prompts are not dropped
  (the failed writes are logged on stderr); ``sessions.db`` stays intact; once there is
  room again the next save writes every missed event, so events lost: 0 and the log has
  no gap; a new runtime resumes the session with exactly what the client received.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import (
    OFFLINE_PATCH,
    Figure,
    assert_gapless,
    files_under,
    fill,
    lost,
    scripted_patch,
    stored_events,
    tiny_tmpfs,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import RuntimeProcess

pytestmark = pytest.mark.reliability

ANSWERS = [{"text": f"answer {n}"} for n in range(12)]


@pytest.fixture
def full_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A 2 MiB tmpfs home (``DSH_HOME`` points at it); unmounted after the test."""
    with tiny_tmpfs(tmp_path / "tmpfs-home", "2m") as home:
        monkeypatch.setenv("DSH_HOME", str(home))
        yield home


def _events(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"]


def _prompt(proc: RuntimeProcess, text: str) -> None:
    proc.request("session/prompt", {"sessionId": "s",
                                    "contentBlocks": [{"type": "text", "text": text}]})


def _until_idle(proc: RuntimeProcess) -> list[dict[str, Any]]:
    return proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                      timeout=30)


def test_seeding_on_a_full_disk_fails_cleanly(full_home: Path, run_dsh: Callable[..., Any],
                                              figure: Figure) -> None:
    ballast = fill(full_home, 0)
    before = files_under(full_home)
    done = run_dsh("--profile", "sdk", "--dump-config")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("dsh: error: ") and "No space left on device" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # no traceback
    assert files_under(full_home) == before  # no half-seeded profile, no staging folder
    assert sorted(p.name for p in (full_home / "profiles").iterdir()) == []
    figure("exit", done.returncode)
    figure("files left", 0)
    ballast.unlink()
    assert run_dsh("--profile", "sdk", "--dump-config").returncode == 0  # room: it works


def test_runtime_start_on_a_full_disk_fails_cleanly(full_home: Path,
                                                    run_dsh: Callable[..., Any],
                                                    tmp_path: Path, figure: Figure) -> None:
    assert run_dsh("--profile", "sdk", "--dump-config").returncode == 0  # seeded
    fill(full_home, 0)
    proc = subprocess.run([sys.executable, "-m", "dsh", "--profile", "sdk", "--patch",
                           str(OFFLINE_PATCH)], input="", capture_output=True, text=True,
                          timeout=60, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("dsh: error: row 'sessions' failed to start: ")
    assert "sessions.db" in proc.stderr and "full" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == ""
    conn = sqlite3.connect(full_home / "sessions.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    figure("exit", proc.returncode)
    figure("integrity_check", "ok")


def test_plugin_add_on_a_full_disk_changes_nothing(full_home: Path,
                                                   run_dsh: Callable[..., Any],
                                                   tmp_path: Path, figure: Figure) -> None:
    made = run_dsh("--profile", "p", "--from-default-profile", "sdk", "--dump-config")
    assert made.returncode == 0, made.stderr
    package = tmp_path / "bye" / "dsh_bye_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package.parent / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "dsh-bye-plugin"\nversion = "1.0"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["dsh_bye_plugin"]\n')
    profile = full_home / "profiles" / "p"
    before = files_under(profile)
    fill(full_home, 0)
    done = run_dsh("plugin", "--profile", "p", "add", str(package.parent), timeout=180)
    assert done.returncode == 1, done.stderr
    assert "No space left on device" in done.stderr and "nothing was changed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert files_under(profile) == before
    assert sorted(p.name for p in profile.iterdir()) == ["profile.toml"]  # no staging left
    assert run_dsh("--profile", "p", "--dump-config").returncode == 0
    figure("exit", done.returncode)
    figure("files changed", 0)


def test_disk_filling_mid_session_loses_no_event(full_home: Path, tmp_path: Path,
                                                 figure: Figure) -> None:
    patch = scripted_patch(tmp_path, ANSWERS)
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=tmp_path)
    try:
        proc.initialize(tmp_path, provider="scripted", model="scripted")
        _prompt(proc, "first, with room")
        received = _events(_until_idle(proc))

        ballast = fill(full_home, 0)
        # Two prompts queued on a full disk: both turns run, neither is dropped.
        _prompt(proc, "second, disk full")
        _prompt(proc, "third, disk full")
        frames = _until_idle(proc)
        while sum(1 for e in _events(frames) if e["type"] == "turn/end") < 2:
            frames += _until_idle(proc)
        full = _events(frames)
        received += full
        ends = [e["data"]["reason"]["kind"] for e in full if e["type"] == "turn/end"]
        assert ends == ["completed", "completed"], full
        assert any("database or disk is full" in line for line in proc.stderr_tail)

        verdict, stored = stored_events(full_home, "s")
        assert verdict == "ok"  # failed writes left no damage
        assert_gapless(stored)
        assert len(stored) < len(received)  # the disk really was full

        ballast.unlink()
        _prompt(proc, "fourth, room again")
        received += _events(_until_idle(proc))
        verdict, stored = stored_events(full_home, "s")
        assert verdict == "ok"
        assert_gapless(received)
        events_lost = lost(received, stored)
        assert events_lost == 0 and len(stored) == len(received), (events_lost, len(stored))
        figure("events received", len(received))
        figure("events lost", events_lost)
        figure("prompts dropped", 0)
        proc.close_stdin()
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.finish()

    again = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=tmp_path)
    try:
        again.initialize(tmp_path, provider="scripted", model="scripted")
        assert "result" in again.call("session/resume", {"sessionId": "s"})
        history = again.call("session/history", {"sessionId": "s"})["result"]["events"]
        assert history == received
        again.close_stdin()
        assert again.wait() == 0, again.stderr()
    finally:
        again.finish()
