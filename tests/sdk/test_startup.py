"""Stage ``configured``: runtime lookup, the launch contract, and errors before any spawn."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sdkkit import READS_PROC, children, write_fake_bin

from dsh.core.process import python_command
from dsh.sdk import (
    AsyncDshClient,
    ClientConfig,
    ClientState,
    ConfigError,
    RuntimeNotFoundError,
    SpawnError,
    Stage,
)
from dsh.sdk._launch import child_environment, launch_spec
from dsh.sdk._locate import locate


def start_error(config: ClientConfig) -> tuple[BaseException, AsyncDshClient]:
    """Start a client that must fail; returns the error and the (closed) client."""
    client = AsyncDshClient(config)

    async def attempt() -> BaseException:
        before = children()
        with pytest.raises(Exception) as caught:
            await client.start()
        assert client.state is ClientState.CLOSED
        assert children() <= before, "a runtime was left running"
        return caught.value

    return asyncio.run(attempt()), client


def test_lookup_order_explicit_then_env_then_python(tmp_path: Path) -> None:
    one = write_fake_bin(tmp_path, "ok")
    two = tmp_path / "other"
    two.write_bytes(one.read_bytes())
    two.chmod(0o755)
    env = {"PATH": os.defpath, "DSH_RUNTIME_BIN": str(two)}
    chosen = locate(ClientConfig(dsh_bin=one), env)
    assert (chosen.carrier, chosen.command, chosen.source) == ("exe", (str(one),), "dsh_bin")
    chosen = locate(ClientConfig(), env)
    assert (chosen.command, chosen.source) == ((str(two),), "DSH_RUNTIME_BIN")
    chosen = locate(ClientConfig(carrier="python"), env)
    # The python carrier never has its working directory on sys.path (dsh.core.process).
    assert chosen.command == tuple(python_command("dsh"))
    assert chosen.command[:2] == ((sys.executable, "-P") if sys.version_info >= (3, 11)
                                  else (sys.executable, "-c"))
    assert (chosen.carrier, chosen.source) == ("python", "sys.executable")
    chosen = locate(ClientConfig(), {"PATH": os.defpath, "DSH_RUNTIME_BIN": "  "})
    # A blank DSH_RUNTIME_BIN is skipped: next comes the installed runtime wheel, if any.
    wheel = importlib.util.find_spec("dsh_runtime_bin") is not None
    assert (chosen.carrier, chosen.source) == (
        ("exe", "dsh_runtime_bin") if wheel else ("python", "sys.executable"))


def test_bare_dsh_bin_is_looked_up_on_path(tmp_path: Path) -> None:
    fake = write_fake_bin(tmp_path, "ok")
    chosen = locate(ClientConfig(dsh_bin=fake.name), {"PATH": str(tmp_path)})
    assert chosen.command == (str(fake),)


@pytest.mark.skipif(importlib.util.find_spec("dsh_runtime_bin") is not None,
                    reason="the runtime wheel is installed, so the exe carrier is found; "
                           "the run without it covers this")
@READS_PROC
def test_missing_runtime_lists_every_place_searched() -> None:
    exc, client = start_error(ClientConfig(carrier="exe"))
    assert isinstance(exc, RuntimeNotFoundError)
    text = str(exc)
    for place in ("dsh_bin: not given", "DSH_RUNTIME_BIN: not set", "dsh_runtime_bin:",
                  "sys.executable -m dsh: skipped (carrier='exe')"):
        assert place in text
    assert "stage 'configured'" in text and "profile 'sdk'" in text and "carrier exe" in text
    assert client.pid is None


@pytest.mark.parametrize("wheel", ["absent", "broken"])
def test_the_wheel_rung_tells_absent_from_broken(tmp_path: Path, wheel: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup imports ``dsh_runtime_bin`` outright: a package that is not there is
    "not installed", one that is there but cannot import what it needs is "installed but
    unusable" (naming what is missing), and neither stops at an ImportError."""
    for name in [m for m in sys.modules if m.split(".")[0] == "dsh_runtime_bin"]:
        monkeypatch.delitem(sys.modules, name)
    if wheel == "absent":
        monkeypatch.setitem(sys.modules, "dsh_runtime_bin", None)
    else:
        package = tmp_path / "site" / "dsh_runtime_bin"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("import dsh_no_such_module_here\n")
        monkeypatch.syspath_prepend(str(package.parent))
    with pytest.raises(RuntimeNotFoundError) as caught:
        locate(ClientConfig(carrier="exe"), {"PATH": os.defpath})
    expected = {"absent": "dsh_runtime_bin: not installed (",
                "broken": "dsh_runtime_bin: installed but unusable (No module named "
                          "'dsh_no_such_module_here')"}[wheel]
    assert expected in str(caught.value)

@READS_PROC
@pytest.mark.parametrize("kind", ["missing", "not-executable", "directory"])
def test_unusable_explicit_dsh_bin_is_an_error_not_a_fallback(tmp_path: Path,
                                                               kind: str) -> None:
    path = tmp_path / "dsh-runtime"
    if kind == "not-executable":
        path.write_text("#!/bin/sh\n")
        path.chmod(0o644)
    elif kind == "directory":
        path.mkdir()
    exc, _ = start_error(ClientConfig(dsh_bin=path))
    assert isinstance(exc, RuntimeNotFoundError)
    reason = {"missing": "no such file", "not-executable": "not executable",
              "directory": "not a file"}[kind]
    assert f"dsh_bin: {path}: {reason}" in str(exc)
    assert "no other runtime is tried" in str(exc)


@READS_PROC
def test_unusable_runtime_bin_variable_is_an_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_RUNTIME_BIN", str(tmp_path / "nothing"))
    exc, _ = start_error(ClientConfig())
    assert isinstance(exc, RuntimeNotFoundError)
    assert "DSH_RUNTIME_BIN" in str(exc) and "no such file" in str(exc)


@READS_PROC
def test_exec_failure_is_a_spawn_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken-runtime"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    exc, client = start_error(ClientConfig(dsh_bin=broken))
    assert isinstance(exc, SpawnError)
    assert "stage 'spawned'" in str(exc) and str(broken) in str(exc)
    assert "#! interpreter" in str(exc)
    assert client.pid is None


@READS_PROC
def test_missing_patch_file_fails_before_spawn(fake: Callable[..., ClientConfig]) -> None:
    exc, client = start_error(fake("ok", patches=["nope/missing.yml"]))
    assert isinstance(exc, ConfigError)
    assert str(Path.cwd() / "nope" / "missing.yml") in str(exc)
    assert "given as 'nope/missing.yml'" in str(exc) and "stage 'configured'" in str(exc)
    assert client.pid is None


@READS_PROC
def test_relative_home_that_cannot_be_created(tmp_path: Path,
                                              fake: Callable[..., ClientConfig]) -> None:
    (Path.cwd() / "blocker").write_text("a file, not a folder\n")
    exc, client = start_error(fake("ok", dsh_home="blocker/home"))
    assert isinstance(exc, ConfigError)
    assert str(Path.cwd() / "blocker") in str(exc) and "stage 'configured'" in str(exc)
    assert client.pid is None


@READS_PROC
def test_no_home_at_all_never_falls_back_to_the_user_home(
        monkeypatch: pytest.MonkeyPatch, fake: Callable[..., ClientConfig]) -> None:
    monkeypatch.setenv("DSH_HOME", "   ")
    exc, _ = start_error(fake("ok", dsh_home=None))
    assert isinstance(exc, ConfigError)
    assert "dsh_home" in str(exc) and "~/.dsh" in str(exc)


@READS_PROC
def test_missing_cwd(fake: Callable[..., ClientConfig]) -> None:
    exc, _ = start_error(fake("ok", cwd="no-such-dir"))
    assert isinstance(exc, ConfigError) and "no-such-dir" in str(exc)


def test_launch_contract_absolute_paths_and_home_by_env(
        tmp_path: Path, fake: Callable[..., ClientConfig]) -> None:
    work = Path.cwd()
    (work / "layers").mkdir()
    (work / "layers" / "a.yml").write_text("[]\n")
    (work / "b.yml").write_text("[]\n")
    (work / "run").mkdir()
    record = tmp_path / "record.jsonl"
    config = fake("ok", profile="custom", patches=["layers/a.yml", Path("b.yml")],
                  dsh_home="rel-home", cwd="run", env={"FAKE_RUNTIME_RECORD": str(record)})

    async def scenario() -> None:
        async with AsyncDshClient(config) as client:
            assert (await client.readiness()).stage is Stage.TOOLS_READY

    asyncio.run(scenario())
    launched = json.loads(record.read_text().splitlines()[0])
    assert launched["argv"] == ["--profile", "custom", "--patch", str(work / "layers/a.yml"),
                                "--patch", str(work / "b.yml")]
    assert launched["home"] == str(work / "rel-home")
    assert (work / "rel-home").is_dir()
    assert launched["cwd"] == str(work / "run")
    initialize = json.loads(record.read_text().splitlines()[1])
    assert initialize["method"] == "initialize"
    assert initialize["params"]["cwd"] == str(work / "run")


def test_launch_spec_env_overrides_and_home_precedence(tmp_path: Path) -> None:
    runtime = locate(ClientConfig(carrier="python"), {})
    config = ClientConfig(env={"DSH_HOME": str(tmp_path / "from-env"), "X": "1"})
    env = child_environment(config, {"DSH_HOME": str(tmp_path / "outer"), "X": "0"})
    spec = launch_spec(config, runtime, env)
    assert spec.env["DSH_HOME"] == str(tmp_path / "from-env") and spec.env["X"] == "1"
    explicit = ClientConfig(dsh_home=tmp_path / "explicit", env={"DSH_HOME": "/ignored"})
    spec = launch_spec(explicit, runtime, child_environment(explicit, {}))
    assert spec.home == spec.env["DSH_HOME"] == str(tmp_path / "explicit")
    assert spec.argv == (*python_command("dsh"), "--profile", "sdk")
