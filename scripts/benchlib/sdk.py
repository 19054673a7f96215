"""The SDK client (``dsh.sdk``): its import, its start beside the published DeepSeek Harness
client on the same runtime, a user's whole wait beside the anchors', and many clients at
once.

Every client figure is taken in a fresh interpreter per run (a program starts its client
once), interleaved side by side, with ``python -c pass`` sampled in the same loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

from benchlib import anchors as anchor_probes
from benchlib.procs import (
    OFFLINE_PATCH,
    PythonPass,
    balanced,
    installed_environ,
    median_ms,
    ms,
    rss_mb,
    timed_python,
)
from benchlib.registry import Metric, Options, Result, benchmark

SDK_ANCHORS = tuple(anchor_probes.SDK_MODULES)  # deepseek-harness-sdk, openai-codex, claude


def anchor_modules(opts: Options) -> dict[str, str]:
    """``{distribution: top-level module}`` for the anchor SDKs this run can import: all of
    them in the anchors' venv (``--with-anchors``), else those installed beside dsh."""
    if opts.anchors is not None:
        return dict(anchor_probes.SDK_MODULES)
    wanted = {name.replace("_", "-").lower(): name for name in SDK_ANCHORS}
    found: dict[str, str] = {}
    for module, dists in sorted(packages_distributions().items(), key=lambda i: len(i[0])):
        for dist in dists:
            name = wanted.get(dist.replace("_", "-").lower())
            if name is not None and not module.startswith("_"):
                found.setdefault(name, module)
    return found


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# -- sdk_import -------------------------------------------------------------------------------

_IMPORT_DSH = """
import json, time
t0 = time.perf_counter()
import dsh.sdk
t1 = time.perf_counter()
from dsh.sdk import DshClient
t2 = time.perf_counter()
print(json.dumps({"from_import": t2 - t0, "module": t1 - t0, "client": t2 - t1}))
"""
_IMPORT_ANCHOR = ("import json, sys, time; t0 = time.perf_counter(); "
                  "__import__(sys.argv[1]); "
                  "print(json.dumps({'import': time.perf_counter() - t0}))")

SDK_IMPORT = Metric(
    "sdk_import", "ms", "<", 30,
    about="`from dsh.sdk import DshClient` (what a user writes) in a fresh interpreter; "
          "`import dsh.sdk` alone is a detail. Anchors: each SDK's top-level import, which "
          "loads its client.",
    changes="What dsh.sdk and the sync client import: the standard library's typing, "
            "dataclasses, subprocess, json and re are most of it now; asyncio loads at "
            "start(), on the client's loop thread while the runtime boots; pydantic, yaml "
            "and the runtime never. Also the interpreter's start-up caches, disk and CPU "
            "speed. Target 30 ms: issue 5's import budget.")


@benchmark("sdk_import", SDK_IMPORT, anchors=True)
def sdk_import(opts: Options) -> Result:
    """``from dsh.sdk import DshClient`` in a fresh interpreter, beside the anchor SDKs."""
    runs = opts.reps(31, 5)
    modules = anchor_modules(opts)
    python = sys.executable if opts.anchors is None else opts.anchors.python
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        timed_python(_IMPORT_DSH, environ, tmp)  # writes bytecode; not counted
        for module in modules.values():
            timed_python(_IMPORT_ANCHOR, environ, tmp, module, python=python)
        ours: list[dict[str, float]] = []
        theirs: dict[str, list[float]] = {name: [] for name in modules}
        for run in range(runs):
            baseline.sample()
            for name in balanced(["dsh", *modules], run):
                if name == "dsh":
                    ours.append(timed_python(_IMPORT_DSH, environ, tmp))
                else:
                    theirs[name].append(timed_python(_IMPORT_ANCHOR, environ, tmp,
                                                     modules[name], python=python)["import"])
    return SDK_IMPORT.measure(
        median_ms([t["from_import"] for t in ours]), runs=runs,
        python_pass_ms=baseline.median_ms,
        min_ms=ms(min(t["from_import"] for t in ours)),
        import_dsh_sdk_ms=median_ms([t["module"] for t in ours]),
        client_classes_ms=median_ms([t["client"] for t in ours]),
        anchors={name: median_ms(theirs[name]) if name in theirs else "not installed"
                 for name in SDK_ANCHORS},
    )


# -- sdk_start_to_ready, sdk_ready_ladder ----------------------------------------------------

# Both probes have imported their SDK before the clock starts (sdk_import counts that),
# then time the same steps: build the client, spawn the runtime, send initialize, its
# answer (``ready``); then close (``close``). DshClient's answer is the moment its
# ``handshake`` rung is logged on the ``dsh.sdk`` logger; ``start`` is when start()
# returned, after the tool listing of its readiness ladder. ``spawn`` is when the client
# asked for the process: the interpreter's own ``subprocess.Popen`` audit event, which
# both clients' spawns raise, so the wait splits into the client's work before the spawn
# and the rest.
_SPAWN_MARK = """
def _audit(event, args):
    if event == "subprocess.Popen" and "spawn" not in marks:
        marks["spawn"] = time.perf_counter()
sys.addaudithook(_audit)
"""

_DSH_CLIENT = """
import json, logging, os, sys, time
from dsh.sdk import ClientConfig, DshClient
marks = {}
""" + _SPAWN_MARK + """
class Mark(logging.Handler):
    def emit(self, record):
        if record.args and record.args[0] == "handshake":
            marks["handshake"] = time.perf_counter()
log = logging.getLogger("dsh.sdk")
log.addHandler(Mark())
log.setLevel(logging.DEBUG)
log.propagate = False
profile, patch, dsh_bin = sys.argv[1:4]
config = ClientConfig(profile=profile, patches=[patch], provider="scripted", model="scripted",
                      dsh_bin=dsh_bin or None)
t0 = time.perf_counter()
client = DshClient(config)
client.start()
t1 = time.perf_counter()
client.close()
t2 = time.perf_counter()
print(json.dumps({"ready": marks["handshake"] - t0, "start": t1 - t0, "close": t2 - t1,
                  "spawn": marks["spawn"] - t0}))
"""

_HARNESS_CLIENT = """
import json, os, sys, time
import deepseek_harness
marks = {}
""" + _SPAWN_MARK + """
profile, patch, dsh_bin = sys.argv[1:4]
config = deepseek_harness.HarnessConfig(dsh_bin=dsh_bin, profile=profile, patches=(patch,))
t0 = time.perf_counter()
client = deepseek_harness.HarnessClient(config)
client.start()
client.initialize(cwd=os.getcwd(), provider="scripted", model="scripted")
t1 = time.perf_counter()
client.close()
t2 = time.perf_counter()
print(json.dumps({"ready": t1 - t0, "close": t2 - t1, "spawn": marks["spawn"] - t0}))
"""

START_TO_READY = Metric(
    "sdk_start_to_ready", "ratio", "<=", 1.0,
    about="DshClient over the published DeepSeek Harness client (deepseek-harness-sdk), "
          "the same steps for both: build the client, spawn this install's dsh runtime "
          "(`--profile sdk` + the offline patch), initialize answered. DshClient finds the "
          "runtime by its own lookup (the frozen executable where dsh-runtime-bin is "
          "installed, else `python -m dsh`; `runtime` in the details); the Harness client "
          "is given that executable, or for the python carrier the `dsh` console script "
          "(the same code, starting about as fast), as its dsh_bin. Median of per-pair "
          "ratios, the clients interleaved in fresh interpreters that imported their SDK "
          "first. Details: each client's work before its spawn (to its `subprocess.Popen` "
          "audit event) and from there to the answer; DshClient given that same dsh_bin; "
          "closing.",
    changes="The client's own work before the spawn (runtime lookup, path checks) and "
            "around it (its event-loop thread and asyncio loading while the runtime "
            "boots), not the runtime's boot, which both wait for alike. A runtime the "
            "client did not locate itself (an explicit dsh_bin) is spawned by the loop "
            "thread, behind `setpriv --pdeathsig` (the kernel's parent-death signal, one "
            "more exec): that detail reads a few percent slower. DshClient's answer is "
            "read on its loop thread, the Harness client's on its caller's thread after a "
            "queue hand-off (~0.1 ms).")
READY_LADDER = Metric(
    "sdk_ready_ladder", "ms", "<", 5,
    about="What DshClient.start() does beyond spawn to initialize answered: the tool "
          "listing of its readiness ladder (stage tools_ready) and handing the result to "
          "the caller's thread.",
    changes="The number of requests start() waits for after initialize and the runtime's "
            "tools/list answer. Target 5 ms: a round trip or two on local pipes; more "
            "means start() waits for something the handshake does not need.")


@benchmark("sdk_start_to_ready", START_TO_READY, READY_LADDER, anchors=True)
def sdk_start_to_ready(opts: Options) -> list[Result]:
    """DshClient and the DeepSeek Harness client, same runtime, spawn to initialize."""
    from dsh.sdk import ClientConfig
    from dsh.sdk._locate import locate

    harness_python = sys.executable if _has_module("deepseek_harness") else (
        opts.anchors.python if opts.anchors is not None else None)
    # The clients differ by about a millisecond of a 100+ ms wait in which the runtime's
    # boot varies by several: 41 pairs, so that noise moves the median ratio less (it
    # still moves it by about 1% from run to run).
    runs = opts.reps(41, 9)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        # The runtime DshClient's own lookup chooses here, given to the Harness client.
        runtime = locate(ClientConfig(), environ)
        dsh_bin = runtime.path if runtime.carrier == "exe" else \
            shutil.which("dsh", path=str(Path(sys.executable).parent))
        patch = str(OFFLINE_PATCH)
        sides: dict[str, tuple[str, str, list[str]]] = {
            "dsh": (sys.executable, _DSH_CLIENT, ["sdk", patch, ""]),
        }
        if dsh_bin is not None and harness_python is not None:
            sides["deepseek-harness-sdk"] = (harness_python, _HARNESS_CLIENT,
                                             ["sdk", patch, dsh_bin])
            # the same dsh_bin given to DshClient: kernel-tied (a full fork)
            sides["dsh given the same dsh_bin"] = (sys.executable, _DSH_CLIENT,
                                                 ["sdk", patch, dsh_bin])
        baseline = PythonPass(environ, tmp)
        for python, code, args in sides.values():  # seeds the profile, writes bytecode
            timed_python(code, environ, tmp, *args, python=python)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for run in range(runs):
            baseline.sample()
            for name in balanced(list(sides), run):
                python, code, args = sides[name]
                samples[name].append(timed_python(code, environ, tmp, *args, python=python))
    ours = samples["dsh"]
    ladder = READY_LADDER.measure(
        median_ms([s["start"] - s["ready"] for s in ours]), runs=runs,
        python_pass_ms=baseline.median_ms, start_ms=median_ms([s["start"] for s in ours]))
    if "deepseek-harness-sdk" not in samples:
        reason = ("no `dsh` console script beside this interpreter" if dsh_bin is None else
                  "deepseek-harness-sdk is not installed (scripts/dev-setup.sh installs it "
                  "without its runtime; or run with --with-anchors)")
        return [START_TO_READY.skip(reason), ladder]
    theirs = samples["deepseek-harness-sdk"]
    scripted = samples["dsh given the same dsh_bin"]

    def paired(a: list[dict[str, float]], key: str = "ready") -> float:
        return round(statistics.median(x[key] / y[key] for x, y in zip(a, theirs,
                                                                       strict=True)), 3)

    return [
        START_TO_READY.measure(
            paired(ours), runs=runs, python_pass_ms=baseline.median_ms,
            runtime=f"{runtime.carrier} ({runtime.source})",
            dsh_ready_ms=median_ms([s["ready"] for s in ours]),
            harness_ready_ms=median_ms([s["ready"] for s in theirs]),
            dsh_to_spawn_ms=median_ms([s["spawn"] for s in ours]),
            harness_to_spawn_ms=median_ms([s["spawn"] for s in theirs]),
            dsh_spawn_to_ready_ms=median_ms([s["ready"] - s["spawn"] for s in ours]),
            harness_spawn_to_ready_ms=median_ms([s["ready"] - s["spawn"] for s in theirs]),
            dsh_given_bin_ready_ms=median_ms([s["ready"] for s in scripted]),
            dsh_given_bin_ratio=paired(scripted),
            dsh_close_ms=median_ms([s["close"] for s in ours]),
            harness_close_ms=median_ms([s["close"] for s in theirs]),
            close_ratio=paired(ours, "close"),
            pair_ratios=[round(a["ready"] / b["ready"], 3) for a, b in zip(ours, theirs,
                                                                           strict=True)]),
        ladder,
    ]


# -- sdk_end_to_end ---------------------------------------------------------------------------

_DSH_END_TO_END = """
import json, sys, time
t0 = time.perf_counter()
from dsh.sdk import ClientConfig, DshClient
client = DshClient(ClientConfig(profile="sdk"))
client.start()
t1 = time.perf_counter()
client.close()
print(json.dumps({"end_to_end": t1 - t0}))
"""

END_TO_END = Metric(
    "sdk_end_to_end", "ratio", "<=", 0.2, stretch=True,
    about="A user's whole wait before the first prompt: `from dsh.sdk import DshClient` + "
          "start() to ready (sdk profile as shipped, python carrier), over the fastest "
          "anchor's SDK import + its own runtime started to its initialize answer, same "
          "run, interleaved.",
    changes="dsh's import weight and runtime boot on one side; on the other, which anchor "
            "is fastest on this machine (its native or frozen runtime, its SDK's imports). "
            "Stretch target 1/5 (issue 21).")


@benchmark("sdk_end_to_end", END_TO_END, anchors=True)
def sdk_end_to_end(opts: Options) -> Result:
    """Import + start to ready, dsh against the fastest anchor (needs --with-anchors)."""
    if opts.anchors is None:
        return END_TO_END.skip("needs the anchors' own runtimes: run with --with-anchors")
    runs = opts.reps(11, 3)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        timed_python(_DSH_END_TO_END, environ, tmp)  # seeds the profile; not counted
        ours: list[float] = []
        theirs: dict[str, list[float]] = {name: [] for name in anchor_probes.READY_PROBES}
        for run in range(runs + 1):  # the first round writes the anchors' bytecode
            baseline.sample()
            for name in balanced(["dsh", *anchor_probes.READY_PROBES], run):
                if name == "dsh":
                    ours.append(timed_python(_DSH_END_TO_END, environ, tmp)["end_to_end"])
                else:
                    figure = opts.anchors.run(["-c", anchor_probes.READY_PROBES[name], tmp],
                                              cwd=tmp)
                    theirs[name].append(figure["import"] + figure["ready"])
    anchors = {name: median_ms(v[1:]) for name, v in theirs.items()}
    fastest = min(anchors, key=anchors.__getitem__)
    value = median_ms(ours[1:])
    return END_TO_END.measure(
        value / anchors[fastest], runs=runs, python_pass_ms=baseline.median_ms,
        dsh_end_to_end_ms=value, fastest_anchor=fastest, anchors=anchors,
        compared=(value, "ms"), anchor_runtimes=anchor_probes.RUNTIMES)


# -- sdk_clients_scaling ----------------------------------------------------------------------

CLIENT_COUNTS = (1, 5, 10, 25, 50)
CLIENTS = Metric(
    "sdk_clients_scaling", "ratio", "<", 25,
    about="1, 5, 10, 25 and 50 AsyncDshClients started at once, each with its own runtime "
          "(python carrier, one shared home): median start-to-ready at 50 over that at 1.",
    changes="Cores (on 2 cores, 25 means no worse than starting them one after another per "
            "core), the runtime's boot CPU, contention on the shared home.")


async def _start_clients(count: int, tmp: str) -> tuple[list[float], list[float]]:
    """Start ``count`` clients at once; each one's start-to-ready seconds and its
    runtime's RSS once all are up."""
    from dsh.sdk import AsyncDshClient, ClientConfig

    config = ClientConfig(dsh_home=str(Path(tmp, "home")), cwd=tmp,
                          patches=(str(OFFLINE_PATCH),), env=installed_environ(tmp),
                          inherit_env=False)
    clients = [AsyncDshClient(config) for _ in range(count)]

    async def start(client: AsyncDshClient) -> float:
        t0 = time.perf_counter()
        await client.start()
        return time.perf_counter() - t0

    try:
        ready = await asyncio.gather(*(start(client) for client in clients))
        await asyncio.sleep(0.3)
        rss = [rss_mb(client.pid) for client in clients if client.pid is not None]
    finally:
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
    return list(ready), rss


@benchmark("sdk_clients_scaling", CLIENTS, full_only=True)
def sdk_clients_scaling(opts: Options) -> Result:
    """Many SDK clients started at once: start-to-ready and RSS against the count."""
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        asyncio.run(_start_clients(1, tmp))  # seeds the profile and bytecode; not counted
        for count in CLIENT_COUNTS:
            ready: list[float] = []
            rss: list[float] = []
            for _ in range(max(1, 5 // count)):
                more_ready, more_rss = asyncio.run(_start_clients(count, tmp))
                ready += more_ready
                rss += more_rss
            points.append({"clients": count, "ready_ms": median_ms(ready),
                           "ready_max_ms": ms(max(ready)),
                           "rss_mb": round(statistics.median(rss), 1)})
    by = {p["clients"]: p for p in points}
    return CLIENTS.measure(by[50]["ready_ms"] / by[1]["ready_ms"], runs=5, points=points,
                           cpus=os.cpu_count())
