"""``dsh plugin --profile``: install a local plugin package, use it in a session, remove it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dsh-hello-plugin"
SCRIPT = [{"text": "Greeting.", "tool_calls": [{"name": "hello", "arguments": {"name": "Ada"}}]},
          {"text": "Done."}]


def _listing(run_dsh: Callable[..., Any]) -> dict[str, Any]:
    done = run_dsh("plugin", "--profile", "p", "list", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["ok"] and document["command"] == "plugin list"
    return document["data"]


def _plain_package(where: Path, name: str) -> Path:
    """A distribution with no dsh bundle (a plain dependency)."""
    (where / name.replace("-", "_")).mkdir(parents=True)
    (where / name.replace("-", "_") / "__init__.py").write_text("")
    (where / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        f'[project]\nname = "{name}"\nversion = "1.0"\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["{name.replace("-", "_")}"]\n')
    return where


def test_add_use_remove(run_dsh: Callable[..., Any], dsh_home: Path, tmp_path: Path) -> None:
    local = Path.cwd() / "hello"  # a relative path, resolved against the invoking cwd
    shutil.copytree(FIXTURE, local)
    added = run_dsh("plugin", "--profile", "p", "add", "--from", "sdk", "./hello")
    assert added.returncode == 0, added.stderr
    assert "created profile 'p' from the sdk template" in added.stderr
    data = _listing(run_dsh)
    assert data["bundles"] == ["dsh-base", "dsh-sdk-app", "dsh-hello"]
    assert data["requirements"][0]["requirement"] == str(local)
    assert data["requirements"][0]["version"] == "0.1.0"
    toml = dsh_home / "profiles" / "p" / "profile.toml"
    assert "# applied in this order" in toml.read_text()  # the user's comments stay

    ordered = run_dsh("plugin", "--profile", "p", "order", "dsh-base", "dsh-hello",
                      "dsh-sdk-app")
    assert ordered.returncode == 0, ordered.stderr
    assert _listing(run_dsh)["bundles"] == ["dsh-base", "dsh-hello", "dsh-sdk-app"]

    script = tmp_path / "script.yml"
    script.write_text(json.dumps(SCRIPT))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {"script":
                                                                              str(script)}}}]))
    proc = RuntimeProcess("p", [OFFLINE_PATCH, patch], cwd=tmp_path)
    try:
        proc.initialize(tmp_path, provider="scripted", model="scripted")
        tools = {t["name"]: t for t in proc.call("tools/list")["result"]["tools"]}
        assert tools["hello"]["description"] == "Greet someone."
        proc.call("session/prompt", {"sessionId": "s",
                                     "contentBlocks": [{"type": "text", "text": "hi"}]})
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                            timeout=30)
        events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
        results = [e["data"]["message"] for e in events if e["type"] == "tool/result"]
        assert ["".join(b.get("text", "") for b in m["content"]) for m in results] == [
            "Bonjour, Ada!"]
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()

    removed = run_dsh("plugin", "--profile", "p", "remove", "dsh-hello-plugin")
    assert removed.returncode == 0, removed.stderr
    data = _listing(run_dsh)
    assert data == {"bundles": ["dsh-base", "dsh-sdk-app"], "requirements": [], "installed": []}
    assert not list((dsh_home / "profiles").glob(".*"))  # no lock file, no staging left


def test_failed_install_changes_nothing(run_dsh: Callable[..., Any], dsh_home: Path) -> None:
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    assert run_dsh("plugin", "--profile", "p", "add", "./hello").returncode == 0
    profile = dsh_home / "profiles" / "p"
    before_toml = (profile / "profile.toml").read_bytes()
    before_env = sorted(str(p.relative_to(profile)) for p in profile.rglob("*"))
    broken = Path.cwd() / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[build-system]\nrequires = []\n"
                                           'build-backend = "no_such_backend"\n')
    failed = run_dsh("plugin", "--profile", "p", "add", "./broken")
    assert failed.returncode == 1, failed.stderr
    assert "failed" in failed.stderr and "nothing was changed" in failed.stderr
    assert (profile / "profile.toml").read_bytes() == before_toml
    assert sorted(str(p.relative_to(profile)) for p in profile.rglob("*")) == before_env
    missing = run_dsh("plugin", "--profile", "p", "add", "./nowhere")
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_concurrent_adds_serialize(dsh_home: Path) -> None:
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    _plain_package(Path.cwd() / "plain", "dsh-plain-dep")
    procs = [subprocess.Popen([sys.executable, "-m", "dsh", "plugin", "--profile", "p", "add",
                               "--no-bundle", spec], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for spec in ("./hello", "./plain")]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert any("dsh-plain-dep 1.0 declares no dsh.bundles entry point; installed as a "
               "plain library" in err for _, err in outputs), outputs
    assert sum("created profile 'p'" in err for _, err in outputs) == 1, outputs
    from dsh.config.profiles import parse_profile_toml

    recorded = parse_profile_toml(dsh_home / "profiles" / "p" / "profile.toml", "p")
    assert sorted(recorded.requirements) == sorted(
        [str(Path.cwd() / "hello"), str(Path.cwd() / "plain")])
    assert recorded.bundles == ("dsh-base", "dsh-headless", "dsh-hello")
    plugin_dir = dsh_home / "profiles" / "p" / "plugins"
    assert {p.name for p in plugin_dir.iterdir() if p.suffix != ".dist-info"} == {
        "dsh_hello_plugin", "dsh_plain_dep"}


def test_read_only_profile_is_refused_and_left_alone(run_dsh: Callable[..., Any],
                                                      dsh_home: Path) -> None:
    created = run_dsh("--profile", "p", "--from-default-profile", "sdk", "--dump-config")
    assert created.returncode == 0, created.stderr
    profile = dsh_home / "profiles" / "p"
    before = sorted(p.name for p in profile.iterdir())
    toml = (profile / "profile.toml").read_text()
    # Root ignores permission bits, so a read-only bind mount is the honest way to get a
    # folder nobody may write here.
    mounted = subprocess.run(["mount", "--bind", str(profile), str(profile)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(profile)],
                                 capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remount.stderr.strip()}")
        done = run_dsh("plugin", "--profile", "p", "add", str(FIXTURE))
    finally:
        subprocess.run(["umount", str(profile)], check=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("dsh: error: ") and "read-only" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in profile.iterdir()) == before
    assert (profile / "profile.toml").read_text() == toml
