"""Live patch reload through a real runtime: edit the profile's patch.yml while ``dsh``
serves JSON-RPC and observe every effect through ``config/get`` and the reload events."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="inspects /proc for the watcher")


@pytest.fixture
def live_profile(dsh_home: Path, run_dsh: Callable[..., Any]) -> Path:
    """Custom profile ``p`` (a copy of ``sdk``) switched to live reload; its patch path."""
    done = run_dsh("--profile", "p", "--from-default-profile", "sdk", "--dump-config")
    assert done.returncode == 0, done.stderr
    toml = dsh_home / "profiles" / "p" / "profile.toml"
    toml.write_text(toml.read_text().replace('patch-reload = "startup"', 'patch-reload = "live"'))
    return dsh_home / "profiles" / "p" / "patch.yml"


def _row(config: dict[str, Any], row_id: str) -> dict[str, Any] | None:
    return next((r for r in config["rows"] if r["id"] == row_id), None)


def _tools(config: dict[str, Any]) -> list[str]:
    return [child["id"] for child in _row(config, "tools")["config"]
            if not child.get("disabled")]


def _edit(proc: RuntimeProcess, path: Path, text: str | None, event: str) -> dict[str, Any]:
    """Write (or delete) the patch and return the reload event it causes."""
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    return proc.until(event, timeout=15)[-1]["params"]


def _config(proc: RuntimeProcess) -> dict[str, Any]:
    answer = proc.call("config/get")
    assert "result" in answer, answer
    return answer["result"]["config"]


def test_edits_apply_fail_recover_and_delete(live_profile: Path, tmp_path: Path) -> None:
    proc = RuntimeProcess("p", [OFFLINE_PATCH], cwd=tmp_path)
    try:
        proc.initialize(tmp_path)
        boot = _config(proc)
        assert boot["patchReload"] == "live"
        assert _row(boot, "agent")["config"]["max_steps"] == 50

        # A plugin's config: taken in place.
        params = _edit(proc, live_profile,
                       "- {id: agent, merge: {config: {max_steps: 7}}}\n", "config.reloaded")
        assert params["diff"]["updated"] == ["agent"]
        assert _row(_config(proc), "agent")["config"]["max_steps"] == 7

        # Disable a row: it is disposed, its tool gone.
        params = _edit(proc, live_profile, "- {id: agent, merge: {config: {max_steps: 7}}}\n"
                       "- {id: 'tools:shell', disabled: true}\n", "config.reloaded")
        assert params["diff"]["removed"] == ["tools:shell"]
        assert "tools:shell" not in _tools(_config(proc))
        names = [t["name"] for t in proc.call("tools/list")["result"]["tools"]]
        assert "bash" not in names and "shell" not in names

        # Insert a row.
        good = ("- {id: 'tools:shell', disabled: true}\n"
                "- {id: 'tools:working-directory', disabled: true}\n"
                "- insert: [{id: wd2, name: tool-working-directory}]\n")
        params = _edit(proc, live_profile, good, "config.reloaded")
        assert params["diff"]["added"] == ["wd2"]
        assert params["diff"]["removed"] == ["tools:working-directory"]
        assert params["diff"]["updated"] == ["agent"]  # max_steps back to the bundle's
        after_insert = _config(proc)
        assert _row(after_insert, "wd2")["name"] == "tool-working-directory"

        # Break the YAML: the last good tree stays, the client hears why.
        params = _edit(proc, live_profile, "- [not yaml\n", "config.reload_failed")
        assert params["file"] == str(live_profile)
        assert "not valid YAML" in params["message"]
        assert _config(proc) == after_insert
        assert any("config reload failed" in line and str(live_profile) in line
                   for line in proc.stderr_tail)

        # An unknown plugin fails the same way.
        params = _edit(proc, live_profile, "- insert: [{id: x, name: no-such-plugin}]\n",
                       "config.reload_failed")
        assert "unknown plugin 'no-such-plugin'" in params["message"]
        assert _config(proc) == after_insert

        # Fix it: recovers.
        params = _edit(proc, live_profile, "- {id: 'tools:fs', disabled: true}\n",
                       "config.reloaded")
        assert params["diff"]["removed"] == ["tools:fs", "wd2"]
        assert params["diff"]["added"] == ["tools:shell", "tools:working-directory"]
        fixed = _config(proc)
        assert "tools:fs" not in _tools(fixed) and "tools:shell" in _tools(fixed)

        # Delete the file: the bundle defaults are back.
        params = _edit(proc, live_profile, None, "config.reloaded")
        assert params["diff"]["added"] == ["tools:fs"]
        restored = _config(proc)
        assert restored["rows"] == boot["rows"]
        status = proc.call("runtime/status")["result"]
        assert status["state"] == "ready"
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()


def test_change_to_the_serving_row_is_refused(live_profile: Path, tmp_path: Path) -> None:
    proc = RuntimeProcess("p", [OFFLINE_PATCH], cwd=tmp_path)
    try:
        proc.initialize(tmp_path)
        boot = _config(proc)
        for text in ("- {id: sdk-server, disabled: true}\n",
                     "- {id: sdk-server, config: {max_frame_bytes: 4096}}\n",
                     "- {id: agent, inject: []}\n"):  # agent replaced: the server needs it
            params = _edit(proc, live_profile, text, "config.reload_failed")
            assert "restart required" in params["message"], params
            assert _config(proc) == boot
        assert proc.call("tools/list")["result"]["tools"]  # the connection still serves
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()


def _watch_handles(pid: int) -> tuple[int, list[str]]:
    """inotify descriptors and the OS watcher thread (notify-rs names it) of ``pid``."""
    fds = sum(1 for fd in os.listdir(f"/proc/{pid}/fd")
              if _readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify")
    threads = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            threads.append(Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip())
        except OSError:
            continue
    return fds, [t for t in threads if t.startswith("notify")]


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


@pytest.mark.parametrize("profile", ["live", "startup"])
def test_only_live_profiles_watch(profile: str, live_profile: Path, tmp_path: Path) -> None:
    name = "p" if profile == "live" else "sdk"
    proc = RuntimeProcess(name, [OFFLINE_PATCH], cwd=tmp_path)
    try:
        proc.initialize(tmp_path)
        proc.call("config/get")
        handles = _watch_handles(proc.proc.pid)
        if profile == "live":  # control: the same probe sees a live profile's watcher
            deadline = time.monotonic() + 10
            while handles[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
                handles = _watch_handles(proc.proc.pid)
            assert handles[0] >= 1 and handles[1], handles
        else:
            assert handles == (0, []), handles
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()


def test_reload_required_only_after_a_refused_change(live_profile: Path, tmp_path: Path) -> None:
    # The patch exists at boot, so it is one of the layer files the runtime started from.
    live_profile.write_text("- {id: agent, merge: {config: {max_steps: 9}}}\n")
    proc = RuntimeProcess("p", [OFFLINE_PATCH], cwd=tmp_path)
    try:
        proc.initialize(tmp_path)
        _edit(proc, live_profile, "- {id: agent, merge: {config: {max_steps: 8}}}\n",
              "config.reloaded")
        assert proc.call("runtime/status")["result"]["reloadRequired"] is False
        _edit(proc, live_profile, "- {id: sdk-server, disabled: true}\n", "config.reload_failed")
        assert proc.call("runtime/status")["result"]["reloadRequired"] is True
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
