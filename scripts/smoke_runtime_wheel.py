"""Installed-wheel smoke test of the exe carrier: the frozen runtime, as a user gets it.

Builds the host platform's ``dsh-runtime-bin`` wheel (or takes ``--wheel``), earns a
Linux wheel its tag with ``wheels/earn_tag.py``, builds the ``dsh-harness`` wheel,
installs ``dsh-harness[runtime]`` from the two files into a fresh venv, and from an empty
temporary folder (no ``PYTHONPATH``, no ``DSH_*``, its own ``DSH_HOME``) checks, first
with nothing else installed (an SDK user's installation):

- the venv holds exactly ``dsh-harness`` and ``dsh-runtime-bin`` (nothing the python
  runtime needs: the SDK and the runtime wheel take nothing else);
- the ``dsh`` command hands over to the frozen runtime: ``dsh info --json`` reports the
  exe carrier as the one running, and a headless run of the offline example answers;

then with ``dsh-harness[python]`` added (both carriers present):

- ``dsh_runtime_bin``: ``runtime_path()``, ``companion_path("rg")``, ``verify() == []``;
- the exe is closed: with a ``PYTHONPATH`` of poisoned ``dsh``/``yaml``/``click``/``httpx``
  packages it still runs, so it imports nothing from the user's environment;
- ``--version`` and ``--profile sdk -h``: the exe prints exactly what the python carrier
  (``python -m dsh``) and the ``dsh`` console script print;
- ``doctor --profile T --json`` for every shipped template resolves the same plugins in
  both carriers (a plugin the frozen build lacks shows up here);
- the ripgrep companion runs;
- what the runtime imports only on first use works frozen: a headless run of the exe
  whose scripted model reads a PNG, a WebP, a JPEG and a GIF (tests/fixtures/images: the
  frozen Pillow with the formats the build keeps, while this script needs no image
  library) and calls a tool of tests/fixtures/mcp_test_server.py over stdio (dsh's MCP
  client; the server runs on this Python, skipped when it lacks the ``mcp`` package);
- when ``examples/offline/patch.yml`` exists: an SDK session (initialize, a prompt answered
  by the scripted provider with tool calls, events until idle, shutdown) through
  ``dsh.sdk`` with ``carrier="exe"``, which must pick the ``dsh_runtime_bin`` rung.

It then prints sizes and start times (min and median of ``--repeat`` runs) of both
carriers, including the SDK's start-to-ready (spawn until ``initialize`` is answered).
Exits 1 on the first failure, naming the check. Needs the network for pip (PyPI).

    python scripts/smoke_runtime_wheel.py [--wheel PATH] [--allow-dirty]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
POISONED = ("dsh", "dsh_runtime", "yaml", "click", "httpx", "dotenv")
DOCTOR_PREFIXES = ("plugin.", "profile.", "bundle.", "layer.")

# Runs inside the venv: the SDK must find the exe through the dsh_runtime_bin rung. It then
# times start-to-ready (spawn until initialize answered) of both carriers.
SDK_SESSION = """
import dataclasses, json, statistics, sys, time
from dsh.sdk import ClientConfig, DshClient
home, cwd, patch = sys.argv[1:4]
config = ClientConfig(profile="sdk", dsh_home=home, cwd=cwd, patches=[patch], carrier="exe",
                      initialize_timeout=60.0, request_timeout=120.0)
with DshClient(config) as client:
    runtime = client.runtime
    result = client.new_session().run("Where am I? Then look one level up.")
ready = {}
for carrier in ("exe", "python"):
    samples = []
    for _ in range(int(sys.argv[4])):
        start = time.perf_counter()
        with DshClient(dataclasses.replace(config, carrier=carrier)):
            samples.append((time.perf_counter() - start) * 1000)
    ready[carrier] = {"min": round(min(samples), 1),
                      "median": round(statistics.median(samples), 1)}
print(json.dumps({"carrier": runtime.carrier, "source": runtime.source,
                  "path": runtime.path, "stop_reason": result.stop_reason,
                  "final_text": result.final_text, "ready_ms": ready}))
"""


class SmokeError(Exception):
    """A smoke check failed; the message names the check and what was seen."""


def run(argv: Sequence[str | Path], *, env: Mapping[str, str], cwd: Path,
        check: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; a non-zero exit fails ``check`` with the output's tail."""
    proc = subprocess.run([str(a) for a in argv], env=dict(env), cwd=cwd, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise SmokeError(f"{check}: exit {proc.returncode}: "
                           f"{' '.join(map(str, argv))}\n{tail}")
    return proc


def base_env(home: Path, venv_bin: Path) -> dict[str, str]:
    """The environment of every check: no foreign Python path, no DSH_*, a private home."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("DSH_", "PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    env["DSH_HOME"] = str(home)
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    return env


def build_runtime_wheel(out: Path, *, allow_dirty: bool) -> Path:
    """The host platform's runtime wheel, built by ``pip wheel wheels/``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if allow_dirty:
        env["DSH_RUNTIME_ALLOW_DIRTY"] = "1"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "-w", out, REPO / "wheels"], env=env, cwd=out, check="build dsh-runtime-bin",
        timeout=1800)
    return only_wheel(out, "dsh_runtime_bin-")


def only_wheel(folder: Path, prefix: str) -> Path:
    """The single wheel named ``prefix*`` in ``folder``."""
    found = sorted(folder.glob(f"{prefix}*.whl"))
    if len(found) != 1:
        raise SmokeError(f"expected one {prefix}*.whl in {folder}, found {len(found)}")
    return found[0]


def earn_linux_tag(wheel: Path, out: Path) -> Path:
    """A ``linux_*`` wheel retagged with the tag auditwheel reports (see earn_tag.py)."""
    if "-linux_" not in wheel.name:
        return wheel
    proc = run([sys.executable, REPO / "wheels/earn_tag.py", "--dest", out, wheel],
               env=os.environ, cwd=out, check="earn the Linux tag (auditwheel show)")
    return Path(proc.stdout.strip().splitlines()[-1])


def frozen_features(exe: Path, env: Mapping[str, str], work: Path, images: Path) -> None:
    """Lazily imported features through the exe: read_image on four formats (the
    2400x1600 files in ``images``, so each is decoded, scaled down and re-encoded), an MCP
    call."""
    work.mkdir()
    formats = {"png": "PNG", "webp": "WEBP", "jpg": "JPEG", "gif": "GIF"}
    for ext in formats:
        shutil.copyfile(images / f"large.{ext}", work / f"a.{ext}")
    calls = [{"id": ext, "name": "read_image", "arguments": {"file_path": f"a.{ext}"}}
             for ext in formats]
    servers = []
    if importlib.util.find_spec("mcp") is not None:
        server = REPO / "tests/fixtures/mcp_test_server.py"
        servers = [{"name": "t", "command": sys.executable, "args": [str(server)]}]
        calls.append({"id": "mcp", "name": "mcp__t__add", "arguments": {"a": 2, "b": 3}})
    (work / "script.jsonl").write_text(
        json.dumps({"tool_calls": calls}) + "\n" + json.dumps({"text": "done"}) + "\n")
    (work / "patch.yml").write_text(
        "- insert:\n    - {id: llm-scripted, name: llm-scripted, config: {script: "
        + json.dumps(str(work / "script.jsonl")) + ", supports_images: true}}\n"
        "- id: agent\n  merge: {config: {default_route: scripted}}\n"
        "- id: tools:mcp\n  merge: {config: {servers: " + json.dumps(servers) + "}}\n")
    out = run([exe, "--profile", "headless", "--patch", work / "patch.yml", "--json", "go"],
              env=env, cwd=work, check="frozen features (headless run of the exe)").stdout
    results = {}
    for line in out.splitlines():
        event = json.loads(line)
        if event["type"] == "tool/result":
            message = event["data"]["message"]
            results[message["toolCallId"]] = message
    for ext, fmt in formats.items():
        kinds = [block["type"] for block in results.get(ext, {}).get("content", [])]
        if kinds != ["text", "image"]:
            raise SmokeError(f"frozen read_image of a {fmt}: {results.get(ext)}")
    if servers:
        blocks = results.get("mcp", {}).get("content", [])
        if [b.get("text") for b in blocks] != ["5"]:
            raise SmokeError(f"frozen MCP call: {results.get('mcp')}")


def slim_install(python: Path, venv_bin: Path, *, env: Mapping[str, str], cwd: Path,
                 example: Path) -> dict[str, Any]:
    """``dsh-harness[runtime]`` alone: nothing but the two distributions is installed, and
    the ``dsh`` command runs everything through the frozen runtime."""
    listed = json.loads(run([python, "-m", "pip", "list", "--format", "json",
                             "--disable-pip-version-check"], env=env, cwd=cwd,
                            check="pip list (slim install)").stdout)
    names = sorted(p["name"].lower().replace("_", "-") for p in listed
                   if p["name"].lower() not in ("pip", "setuptools", "wheel"))
    if names != ["dsh-harness", "dsh-runtime-bin"]:
        raise SmokeError(f"dsh-harness[runtime] installed more than itself and the "
                           f"runtime wheel: {names}")
    dsh = venv_bin / ("dsh.exe" if os.name == "nt" else "dsh")
    info = json.loads(run([dsh, "info", "--json"], env=env, cwd=cwd,
                          check="dsh info (slim install: handed to the exe)").stdout)
    current = [c["id"] for c in info["data"]["carriers"] if c["current"]]
    if current != ["exe"]:
        raise SmokeError(f"slim install: dsh info ran on {current}, not the exe carrier")
    answer = None
    if (example / "patch.yml").is_file():
        answer = run([dsh, "--profile", "headless", "--patch", example / "patch.yml",
                      "Where am I working?"], env=env, cwd=cwd,
                     check="headless run (slim install: handed to the exe)").stdout.strip()
        if not answer:
            raise SmokeError("slim install: the headless run printed no answer")
    return {"installed": names, "carrier": current[0], "headless_answered": bool(answer)}


def poison(folder: Path) -> Path:
    """A ``PYTHONPATH`` folder whose packages shadow dsh's and fail on import."""
    for name in POISONED:
        package = folder / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"raise ImportError('smoke: the runtime imported {name} from PYTHONPATH')\n")
    return folder


def same_output(exe: Path, python_argv: Sequence[str | Path], args: Sequence[str], *,
                env: Mapping[str, str], closed_env: Mapping[str, str], cwd: Path,
                check: str) -> str:
    """Run ``args`` through the exe (closed env) and the python carrier; outputs must match."""
    frozen = run([exe, *args], env=closed_env, cwd=cwd, check=f"{check} (exe)").stdout
    python = run([*python_argv, *args], env=env, cwd=cwd, check=f"{check} (python)").stdout
    if frozen != python:
        raise SmokeError(f"{check}: the exe and python carriers print different output:\n"
                           f"--- exe\n{frozen[:2000]}\n--- python\n{python[:2000]}")
    return frozen


def doctor_checks(argv: Sequence[str | Path], template: str, *, env: Mapping[str, str],
                  cwd: Path) -> tuple[int, dict[str, str]]:
    """``doctor --json`` exit code and the statuses of its profile and plugin checks."""
    proc = subprocess.run([*map(str, argv), "doctor", "--profile", template, "--json"],
                          env=dict(env), cwd=cwd, text=True, capture_output=True, timeout=120)
    try:
        checks = json.loads(proc.stdout)["data"]["checks"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SmokeError(f"doctor --profile {template}: no JSON document "
                           f"({exc}): {proc.stderr.strip()[-500:]}") from exc
    return proc.returncode, {c["id"]: c["status"] for c in checks
                             if c["id"].startswith(DOCTOR_PREFIXES)}


def timing_ms(argv: Sequence[str | Path], *, env: Mapping[str, str], cwd: Path,
              repeat: int) -> dict[str, float]:
    """Min and median wall time of ``argv`` over ``repeat`` runs, after one warm-up run.

    The min is the figure to compare: other load on the machine only ever adds to it.
    """
    samples = []
    for index in range(repeat + 1):
        start = time.perf_counter()
        subprocess.run([str(a) for a in argv], env=dict(env), cwd=cwd, check=True,
                       capture_output=True, stdin=subprocess.DEVNULL)
        if index:
            samples.append((time.perf_counter() - start) * 1000)
    return {"min": round(min(samples), 1), "median": round(statistics.median(samples), 1)}


def tree_size(root: Path) -> int:
    """Bytes of every file under ``root``."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def smoke(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every check, in order; returns the measurements."""
    dist, home, cwd = tmp / "dist", tmp / "home", tmp / "cwd"
    for folder in (dist, home, cwd):
        folder.mkdir()
    wheel = args.wheel.resolve() if args.wheel else build_runtime_wheel(
        dist, allow_dirty=args.allow_dirty)
    wheel = earn_linux_tag(wheel, dist)
    if args.wheel_out is not None:
        args.wheel_out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, args.wheel_out / wheel.name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "-w", dist, args.dsh_wheel_from], env=os.environ, cwd=tmp, check="build dsh-harness")
    dsh_wheel = only_wheel(dist, "dsh_harness-")

    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", venv], env=os.environ, cwd=tmp, check="create venv")
    venv_bin = venv / ("Scripts" if os.name == "nt" else "bin")
    python = venv_bin / ("python.exe" if os.name == "nt" else "python")
    env = base_env(home, venv_bin)
    run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"dsh-harness[runtime] @ {dsh_wheel.as_uri()}", wheel], env=env, cwd=cwd,
        check="install dsh-harness[runtime] (the extra must accept this runtime wheel)")
    slim = slim_install(python, venv_bin, env=env, cwd=cwd,
                        example=args.dsh_wheel_from / "examples/offline")
    run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"dsh-harness[python,runtime] @ {dsh_wheel.as_uri()}", wheel], env=env, cwd=cwd,
        check="install dsh-harness[python] beside it")

    located = json.loads(run([python, "-c", (
        "import json, dsh_runtime_bin as b; print(json.dumps({'exe': str(b.runtime_path()), "
        "'rg': str(b.companion_path('rg')), 'failed': b.verify(), "
        "'version': b.__version__, 'manifest': b.manifest()['platform']}))")],
        env=env, cwd=cwd, check="dsh_runtime_bin API").stdout)
    if located["failed"]:
        raise SmokeError(f"verify(): files fail their sha256: {located['failed']}")
    exe, rg = Path(located["exe"]), Path(located["rg"])
    if venv not in exe.parents:
        raise SmokeError(f"runtime_path() is outside the venv: {exe}")
    closed_env = {**env, "PYTHONPATH": str(poison(tmp / "poison"))}

    version = same_output(exe, [python, "-m", "dsh"], ["--version"], env=env,
                          closed_env=closed_env, cwd=cwd, check="--version")
    if version.strip() != f"dsh {located['version']}":
        raise SmokeError(f"--version says {version.strip()!r}, the wheel is "
                           f"{located['version']}")
    script = venv_bin / ("dsh.exe" if os.name == "nt" else "dsh")
    same_output(exe, [script], ["--version"], env=env, closed_env=closed_env,
                cwd=cwd, check="--version (dsh console script)")
    same_output(exe, [python, "-m", "dsh"], ["--profile", "sdk", "-h"], env=env,
                closed_env=closed_env, cwd=cwd, check="--profile sdk -h")
    for template in sorted(p.name for p in (args.dsh_wheel_from / "profiles/templates")
                           .iterdir() if p.is_dir()):
        frozen = doctor_checks([exe], template, env=closed_env, cwd=cwd)
        in_python = doctor_checks([python, "-m", "dsh"], template, env=env, cwd=cwd)
        if frozen != in_python:
            raise SmokeError(f"doctor --profile {template}: the carriers disagree:\n"
                               f"exe {frozen}\npython {in_python}")
    rg_version = run([rg, "--version"], env=env, cwd=cwd, check="ripgrep companion").stdout
    if not rg_version.startswith("ripgrep "):
        raise SmokeError(f"ripgrep companion printed {rg_version[:200]!r}")

    frozen_features(exe, closed_env, tmp / "features",
                    args.dsh_wheel_from / "tests/fixtures/images")

    sdk: dict[str, Any] | None = None
    example = args.dsh_wheel_from / "examples/offline"
    if (example / "patch.yml").is_file():
        shutil.copytree(example, cwd / "offline")
        sdk = json.loads(run([python, "-c", SDK_SESSION, home, cwd, cwd / "offline/patch.yml",
                              str(args.repeat)],
                             env=env, cwd=cwd, check="SDK session over the exe carrier",
                             timeout=300).stdout.strip().splitlines()[-1])
        if (sdk["carrier"], sdk["source"]) != ("exe", "dsh_runtime_bin") or \
                sdk["stop_reason"] != "completed" or not sdk["final_text"]:
            raise SmokeError(f"SDK session over the exe carrier: {sdk}")

    unpacked = exe.parent
    return {
        "wheel": wheel.name,
        "slim_install": slim,
        "wheel_bytes": wheel.stat().st_size,
        "unpacked_bytes": tree_size(unpacked),
        "sdk_session": None if sdk is None else {
            "source": sdk["source"], "stop_reason": sdk["stop_reason"],
            "ready_ms": sdk["ready_ms"]},
        "ms": {
            "exe --version": timing_ms([exe, "--version"], env=closed_env, cwd=cwd,
                                       repeat=args.repeat),
            "python --version": timing_ms([python, "-m", "dsh", "--version"], env=env,
                                          cwd=cwd, repeat=args.repeat),
            "exe --profile sdk -h": timing_ms([exe, "--profile", "sdk", "-h"],
                                              env=closed_env, cwd=cwd, repeat=args.repeat),
            "python --profile sdk -h": timing_ms([python, "-m", "dsh", "--profile", "sdk",
                                                  "-h"], env=env, cwd=cwd,
                                                 repeat=args.repeat),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a built dsh-runtime-bin wheel to test")
    parser.add_argument("--dsh-wheel-from", type=Path, default=REPO,
                        help="the source tree of the dsh wheel (default: this repository)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="build from uncommitted sources (marked dirty in runtime.json)")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs per command")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--wheel-out", type=Path,
                        help="copy the tested runtime wheel here (CI installs it so the test "
                             "suite also runs against the exe carrier)")
    args = parser.parse_args(argv)
    args.dsh_wheel_from = args.dsh_wheel_from.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="dsh-smoke-"))
    started = time.monotonic()
    try:
        result = smoke(args, tmp)
    except (SmokeError, subprocess.TimeoutExpired) as exc:
        print(f"smoke: FAIL: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"smoke: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result, indent=2))
    print("smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
