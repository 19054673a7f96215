"""Launcher benchmarks, run by hand (not part of the test suite); one JSON document on stdout.

    python scripts/bench.py                  # every benchmark
    python scripts/bench.py --quick          # fewer repetitions, for a smoke run
    python scripts/bench.py --only compose_100x50 [--only ...]
    python scripts/bench.py --list

Each benchmark is a function registered with :func:`benchmark`; it takes the run's
:class:`Options` and returns one result ``{"name", "value", "unit", "target", "ok", ...}``
(extra keys are details). Add a benchmark by writing one more decorated function.
Figures are medians of interleaved repetitions, so a busy machine slows every side alike.
Stdlib and dsh only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Result = dict[str, Any]


@dataclass(frozen=True)
class Options:
    """What every benchmark may read: whether this is a quick run."""

    quick: bool

    def reps(self, full: int, quick: int) -> int:
        """The number of repetitions for this run."""
        return quick if self.quick else full


BENCHMARKS: dict[str, Callable[[Options], Result]] = {}


def benchmark(name: str) -> Callable[[Callable[[Options], Result]], Callable[[Options], Result]]:
    """Register a benchmark function under ``name`` (the ``--only`` key)."""

    def register(func: Callable[[Options], Result]) -> Callable[[Options], Result]:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} registered twice")
        BENCHMARKS[name] = func
        return func

    return register


def result(name: str, value: float, unit: str, target: float, **details: Any) -> Result:
    """A result row; ``ok`` is ``value < target``."""
    return {"name": name, "value": round(value, 2), "unit": unit, "target": target,
            "ok": value < target, **details}


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _clean_environ(**extra: str) -> dict[str, str]:
    """The environment minus every ``DSH_*`` name, plus ``extra``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    environ.update(extra)
    return environ


# -- compose_100x50 --------------------------------------------------------------------------

LAYERS = 100
ROWS_PER_LAYER = 50


def _layer_text(index: int) -> str:
    """Patch layer ``index``: 50 rows (46 leaves, a group of 3) and 4 overrides of the last.

    Rows are shaped like the shipped bundles' (id, plugin name, a config of a few keys with
    one nested mapping, now and then a tag), so the figure is about real profiles.
    """
    out = [f"# generated layer {index}", "- insert:"]
    for row in range(ROWS_PER_LAYER - 4):
        out += [
            f"    - id: l{index}-r{row}",
            f"      name: plugin-{row % 7}",
            "      config:",
            f"        route: route-{row % 3}",
            f"        limits: {{tokens: 4096, retries: {row % 4}}}",
        ]
        if row % 10 == 0:
            out.append("        api_key: !env [BENCH_KEY, none]")
    out += [f"    - id: l{index}-group", "      group: true", "      config:"]
    for child in range(3):
        out += [f"        - id: c{child}", f"          name: tool-{child}",
                f"          config: {{root: !home w{child}}}"]
    if index:
        prev = index - 1
        for row in range(3):
            out += [f"- id: l{prev}-r{row}", "  merge:", "    config:",
                    f"      limits: {{retries: {index % 5}}}"]
        out += [f"- id: l{prev}-group:c0", "  disabled: true"]
    return "\n".join(out) + "\n"


@benchmark("compose_100x50")
def compose_100x50(opts: Options) -> Result:
    """Parse 100 patch files of 50 rows each and compose them (the dsh launcher path)."""
    import yaml
    from dsh.compose import compose
    from dsh.patchfile import load_layer

    runs = opts.reps(21, 5)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        files = []
        for index in range(LAYERS):
            path = Path(tmp, f"layer{index:03d}.yml")
            path.write_text(_layer_text(index), encoding="utf-8")
            files.append(path)
        total, parse, comp, dump = [], [], [], []
        rows = warnings = 0
        for _ in range(runs):
            t0 = time.perf_counter()
            layers = [load_layer(path, kind="patch") for path in files]
            t1 = time.perf_counter()
            tree = compose(layers)
            t2 = time.perf_counter()
            tree.to_json("bench", "live")
            t3 = time.perf_counter()
            total.append(t2 - t0)
            parse.append(t1 - t0)
            comp.append(t2 - t1)
            dump.append(t3 - t2)
            rows = sum(1 for _ in tree.walk())
            warnings = len(tree.warnings)
    return result(
        "compose_100x50", _ms(statistics.median(total)), "ms", 100,
        runs=runs, layers=LAYERS, rows_per_layer=ROWS_PER_LAYER, composed_rows=rows,
        warnings=warnings, parse_ms=_ms(statistics.median(parse)),
        compose_ms=_ms(statistics.median(comp)), to_json_ms=_ms(statistics.median(dump)),
        min_ms=_ms(min(total)), libyaml=bool(getattr(yaml, "__with_libyaml__", False))
        and hasattr(yaml, "CSafeLoader"),
    )


# -- dump_config_process ---------------------------------------------------------------------


def _wall(argv: list[str], environ: dict[str, str], cwd: str) -> float:
    """Wall time of one process run to completion (its output discarded; it must succeed)."""
    t0 = time.perf_counter()
    subprocess.run(argv, env=environ, cwd=cwd, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


@benchmark("dump_config_process")
def dump_config_process(opts: Options) -> Result:
    """``dsh --profile sdk --dump-config`` as a whole process, beside ``python -c pass``."""
    runs = opts.reps(31, 7)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = _clean_environ(DSH_HOME=str(Path(tmp, "home")))
        dsh = [sys.executable, "-m", "dsh", "--profile", "sdk", "--dump-config"]
        bare = [sys.executable, "-c", "pass"]
        _wall(dsh, environ, tmp)  # seeds the profile and warms caches; not counted
        _wall(bare, environ, tmp)
        dsh_times, bare_times = [], []
        for _ in range(runs):
            bare_times.append(_wall(bare, environ, tmp))
            dsh_times.append(_wall(dsh, environ, tmp))
    dsh_ms, bare_ms = _ms(statistics.median(dsh_times)), _ms(statistics.median(bare_times))
    return result(
        "dump_config_process", dsh_ms, "ms", 150, runs=runs, python_pass_ms=bare_ms,
        overhead_ms=round(dsh_ms - bare_ms, 2), min_ms=_ms(min(dsh_times)),
        python_pass_min_ms=_ms(min(bare_times)), command="python -m dsh --profile sdk "
        "--dump-config",
    )


# -- sdk_import, sdk_start_to_ready ---------------------------------------------------------

# The SDKs dsh.sdk is measured against (issue 5), by distribution name; each is measured
# only when installed, by the module its distribution provides.
SDK_ANCHORS = ("deepseek-harness-sdk", "openai-codex", "claude-agent-sdk")
OFFLINE_PATCH = Path(__file__).resolve().parent.parent / "examples" / "offline" / "patch.yml"


def _sdk_environ(tmp: str) -> dict[str, str]:
    """A clean environment whose interpreters keep bytecode (in ``tmp``), as an installed
    wheel does: timing source compilation would measure the checkout, not the SDK."""
    environ = _clean_environ(DSH_HOME=str(Path(tmp, "home")),
                             PYTHONPYCACHEPREFIX=str(Path(tmp, "pycache")))
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return environ


def _timed_python(code: str, environ: dict[str, str], cwd: str) -> dict[str, float]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object of timings."""
    out = subprocess.run([sys.executable, "-c", code], env=environ, cwd=cwd,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _anchor_modules() -> dict[str, str]:
    """``{distribution: top-level module}`` for the installed anchors."""
    from importlib.metadata import packages_distributions

    wanted = {name.replace("_", "-").lower(): name for name in SDK_ANCHORS}
    found: dict[str, str] = {}
    for module, dists in sorted(packages_distributions().items(), key=lambda i: len(i[0])):
        for dist in dists:
            name = wanted.get(dist.replace("_", "-").lower())
            if name is not None and not module.startswith("_"):
                found.setdefault(name, module)
    return found


_IMPORT = ("import time, json; t0 = time.perf_counter(); import {module}; "
           "t1 = time.perf_counter(); {more}"
           "print(json.dumps({{'import': t1 - t0, 'more': time.perf_counter() - t1}}))")


@benchmark("sdk_import")
def sdk_import(opts: Options) -> Result:
    """``import dsh.sdk`` in a fresh interpreter, beside the installed anchor SDKs."""
    runs = opts.reps(31, 7)
    anchors = _anchor_modules()
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = _sdk_environ(tmp)
        ours = _IMPORT.format(module="dsh.sdk",
                              more="from dsh.sdk import AsyncDshClient, DshClient; ")
        codes = {name: _IMPORT.format(module=module, more="") for name, module in
                 anchors.items()}
        for code in (ours, *codes.values()):
            _timed_python(code, environ, tmp)  # writes bytecode; not counted
        sdk, clients = [], []
        theirs: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(runs):
            timing = _timed_python(ours, environ, tmp)
            sdk.append(timing["import"])
            clients.append(timing["more"])
            for name, code in codes.items():
                theirs[name].append(_timed_python(code, environ, tmp)["import"])
    return result(
        "sdk_import", _ms(statistics.median(sdk)), "ms", 30, runs=runs,
        min_ms=_ms(min(sdk)), clients_ms=_ms(statistics.median(clients)),
        note="clients_ms: the later `from dsh.sdk import AsyncDshClient, DshClient`, which "
             "loads asyncio (lazily, on first use of a client class)",
        anchors={name: _ms(statistics.median(theirs[name])) if name in theirs
                 else "not installed" for name in SDK_ANCHORS},
    )


_READY = """
import json, sys, time
import dsh.sdk
t0 = time.perf_counter()
from dsh.sdk import ClientConfig, DshClient
client = DshClient(ClientConfig(profile=sys.argv[1], patches=[sys.argv[2]]))
client.start()
t1 = time.perf_counter()
client.close()
print(json.dumps({"ready": t1 - t0, "close": time.perf_counter() - t1}))
"""

_DEEPSEEK_READY = """
import json, os, sys, time
import deepseek_harness
t0 = time.perf_counter()
client = deepseek_harness.HarnessClient(deepseek_harness.HarnessConfig(
    dsh_bin=sys.argv[3], profile=sys.argv[1], patches=(sys.argv[2],)))
client.start()
client.initialize(cwd=os.getcwd(), provider="scripted", model="scripted")
t1 = time.perf_counter()
client.close()
print(json.dumps({"ready": t1 - t0, "close": time.perf_counter() - t1}))
"""


@benchmark("sdk_start_to_ready")
def sdk_start_to_ready(opts: Options) -> Result:
    """``DshClient.start()`` to ``tools_ready`` (sdk profile, offline), beside the anchors."""
    # Python carrier, offline patch, a fresh interpreter that already imported dsh.sdk
    # (sdk_import counts that); the DeepSeek Harness SDK's client, when installed, drives
    # the same runtime (its initialize only, as it has no tools/list).
    import shutil

    runs = opts.reps(15, 5)
    dsh_bin = shutil.which("dsh", path=str(Path(sys.executable).parent))
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = _sdk_environ(tmp)
        patch = str(OFFLINE_PATCH)
        sides = {"sdk": ["-c", _READY, "sdk", patch],
                 "sdk-minimal": ["-c", _READY, "sdk-minimal", patch]}
        if "deepseek-harness-sdk" in _anchor_modules() and dsh_bin is not None:
            sides["deepseek-harness-sdk"] = ["-c", _DEEPSEEK_READY, "sdk", patch, dsh_bin]
        times: dict[str, list[float]] = {name: [] for name in sides}
        closes: list[float] = []

        def once(argv: list[str]) -> dict[str, float]:
            out = subprocess.run([sys.executable, *argv], env=environ, cwd=tmp,
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 check=True)
            return json.loads(out.stdout.strip().splitlines()[-1])

        for argv in sides.values():
            once(argv)  # seeds the profiles and writes bytecode; not counted
        for _ in range(runs):
            for name, argv in sides.items():
                timing = once(argv)
                times[name].append(timing["ready"])
                if name == "sdk":
                    closes.append(timing["close"])
    return result(
        "sdk_start_to_ready", _ms(statistics.median(times["sdk"])), "ms", 200, runs=runs,
        min_ms=_ms(min(times["sdk"])), close_ms=_ms(statistics.median(closes)),
        sdk_minimal_ms=_ms(statistics.median(times["sdk-minimal"])),
        anchors={name: (_ms(statistics.median(times[name])) if name in times
                        else "not installed") for name in SDK_ANCHORS},
        note="anchors start the same dsh runtime with their own client (initialize only)",
    )


# -- driver ----------------------------------------------------------------------------------


# -- sdk_initialize, runtime_idle_rss, sdk_throughput, big_frame ---------------------------


class _Rpc:
    """A bare JSON-RPC peer on a spawned runtime's pipes: the fewest moving parts between
    the clock and the runtime, so the figures are the runtime's, not a client's."""

    def __init__(self, profile: str, environ: dict[str, str], cwd: str) -> None:
        argv = [sys.executable, "-m", "dsh", "--profile", profile, "--patch", str(OFFLINE_PATCH)]
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=environ, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        from dsh import jsonrpc

        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(jsonrpc.encode(jsonrpc.request(self.next_id, method, params)))
        return self.next_id

    def flush(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the runtime closed its stdout")
        return json.loads(line)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        wanted = self.send(method, params)
        self.flush()
        while True:
            frame = self.read()
            if frame.get("id") == wanted:
                return frame

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@benchmark("sdk_initialize")
def sdk_initialize(opts: Options) -> Result:
    """Spawn ``dsh --profile sdk|sdk-minimal`` (python carrier) to the initialize answer."""
    runs = opts.reps(21, 5)
    figures: dict[str, list[float]] = {"sdk": [], "sdk-minimal": [], "python -c pass": []}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = _sdk_environ(tmp)
        for _ in range(runs + 1):  # the first round seeds profiles and bytecode
            figures["python -c pass"].append(_wall([sys.executable, "-c", "pass"], environ, tmp))
            for profile in ("sdk", "sdk-minimal"):
                rpc = _Rpc(profile, environ, tmp)
                answer = rpc.call("initialize", {"cwd": tmp})
                figures[profile].append(time.perf_counter() - rpc.t0)
                rpc.close()
                assert "result" in answer, answer
    medians = {k: _ms(statistics.median(v[1:])) for k, v in figures.items()}
    return result("sdk_initialize", medians["sdk"], "ms", 150, runs=runs,
                  sdk_minimal_ms=medians["sdk-minimal"], python_pass_ms=medians["python -c pass"],
                  anchors_measured_elsewhere={"deepseek-harness sdk": 900,
                                              "deepseek-harness sdk-minimal": 400,
                                              "codex app-server": 110})


@benchmark("runtime_idle_rss")
def runtime_idle_rss(opts: Options) -> Result:
    """Resident memory of an initialized, idle ``dsh --profile sdk`` runtime."""
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        rpc = _Rpc("sdk", _sdk_environ(tmp), tmp)
        rpc.call("initialize", {"cwd": tmp})
        rpc.call("tools/list")
        time.sleep(0.5)
        rss = _rss_mb(rpc.proc.pid)
        rpc.close()
    return result("runtime_idle_rss", rss, "MB", 40, profile="sdk")


@benchmark("sdk_throughput")
def sdk_throughput(opts: Options) -> Result:
    """Small pipelined requests (``runtime/status``) answered per second, round trip."""
    count = opts.reps(20000, 5000)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        rpc = _Rpc("sdk-minimal", _sdk_environ(tmp), tmp)
        rpc.call("initialize", {"cwd": tmp})
        t0 = time.perf_counter()
        for _ in range(count):
            rpc.send("runtime/status")
        rpc.flush()
        answered = 0
        while answered < count:
            if "id" in rpc.read():
                answered += 1
        elapsed = time.perf_counter() - t0
        rpc.close()
    rate = count / elapsed
    return {**result("sdk_throughput", rate, "requests/s", 10000, requests=count),
            "ok": rate >= 10000}


@benchmark("big_frame")
def big_frame(opts: Options) -> Result:
    """A 10 MiB prompt in, its receipt (carrying the same text) out, compared byte for byte."""
    text = "x" * (10 * 1024 * 1024)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        rpc = _Rpc("sdk-minimal", _sdk_environ(tmp), tmp)
        rpc.call("initialize", {"cwd": tmp})
        t0 = time.perf_counter()
        rpc.send("session/prompt", {"sessionId": "big", "contentBlocks": [
            {"type": "text", "text": text}]})
        rpc.flush()
        while True:
            frame = rpc.read()
            event = frame.get("params", {}).get("event", {})
            if event.get("type") == "agent/inbox/spliced":
                echoed = event["data"]["inserted"][0]["content"][0]["text"]
                break
        elapsed = time.perf_counter() - t0
        rpc.close()
    intact = echoed == text
    return {**result("big_frame", _ms(elapsed), "ms", 2000, bytes=len(text), intact=intact),
            "ok": intact}


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks and print one JSON document; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME",
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, func in BENCHMARKS.items():
            print(f"{name}\t{(func.__doc__ or '').strip()}")
        return 0
    opts = Options(quick=args.quick)
    results = [BENCHMARKS[name](opts) for name in BENCHMARKS
               if not args.only or name in args.only]
    document = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "results": results,
        "ok": all(r["ok"] for r in results),
    }
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if document["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
