"""The runtime process on its own: spawn to the ``initialize`` answer per carrier and
profile (beside each anchor's runtime), its overhead over the interpreter's own start,
its idle memory, and live reload.

These talk to the runtime through the bare peer of :mod:`benchlib.rpc`, so they measure
the runtime, not a client.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import anchors as anchor_probes
from benchlib.carrier import exe_carrier
from benchlib.procs import PythonPass, balanced, installed_environ, median_ms, ms, rss_mb
from benchlib.registry import Metric, Options, Result, benchmark
from benchlib.rpc import Rpc

# The anchors' runtimes' resident memory as sdk_initialize's probes found it, so
# runtime_idle_rss need not start them as often again in the same run.
_ANCHOR_RSS: dict[str, list[float]] = {}


def _anchor_runtime(opts: Options, name: str, tmp: str) -> float:
    """Start anchor ``name``'s runtime to its initialize answer (seconds); keeps its RSS."""
    assert opts.anchors is not None
    figure = opts.anchors.run(["-c", anchor_probes.READY_PROBES[name], tmp], cwd=tmp)
    _ANCHOR_RSS.setdefault(name, []).append(figure["rss_mb"])
    return figure["ready"]


def no_anchors() -> dict[str, str]:
    """The anchors column when the anchors' venv was not asked for."""
    return {name: "needs --with-anchors" for name in anchor_probes.SDK_MODULES}


INITIALIZE = Metric(
    "sdk_initialize", "ms", "<", 150,
    about="`python -m dsh --profile sdk` (as shipped, python carrier) spawned to its "
          "`initialize` answer over a bare pipe peer; sdk-minimal, the offline patch and "
          "the exe carrier are details. Anchors: each SDK's own runtime spawned to its "
          "initialize answer, no API key.",
    changes="The runtime's boot: its imports (asyncio, yaml only on a layer-cache miss), "
            "the plugins the profile starts, the interpreter's start (site, .pth files); "
            "CPU speed and load, which `python -c pass` beside it shows. Target 150 ms: "
            "issue 3.")
OVERHEAD = Metric(
    "sdk_initialize_overhead", "ms", "<", 50, stretch=True,
    about="sdk_initialize minus `python -c pass` of the same interpreter, in the same "
          "loop: dsh's own boot, comparable across machines whose interpreters start at "
          "different speeds.",
    changes="Only dsh's boot work (imports, composition, plugin start, the SDK server); "
            "not the interpreter's start-up. Stretch target 50 ms (issue 21).")
EXE = Metric(
    "sdk_initialize_exe", "ratio", "<=", 1.3,
    about="The exe carrier (the frozen runtime of dsh-runtime-bin) spawned to its "
          "initialize answer, over the python carrier, same profile (sdk), same loop.",
    changes="The freeze: its bootloader (PyInstaller's one-folder re-exec), archive "
            "imports against .pyc files on disk, the bundled libraries. Target 1.3x: "
            "issue 6.")


@benchmark("sdk_initialize", INITIALIZE, OVERHEAD, EXE, anchors=True)
def sdk_initialize(opts: Options) -> list[Result]:
    """Spawn ``dsh --profile sdk|sdk-minimal`` (each carrier) to the initialize answer,
    beside each anchor's runtime started to its own initialize answer."""
    runs = opts.reps(21, 5)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        exe = exe_carrier(opts.wheel, Path(tmp))
        sides: dict[str, tuple[str, tuple[str, ...] | None, bool]] = {
            "sdk (python)": ("sdk", None, False),
            "sdk-minimal (python)": ("sdk-minimal", None, False),
            "sdk + offline (python)": ("sdk", None, True)}
        if exe is not None:
            sides.update({"sdk (exe)": ("sdk", exe.command, False),
                          "sdk-minimal (exe)": ("sdk-minimal", exe.command, False)})
        anchors = [] if opts.anchors is None else list(anchor_probes.READY_PROBES)
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        figures: dict[str, list[float]] = {name: [] for name in [*sides, *anchors]}

        def start(name: str) -> float:
            if name in anchors:
                return _anchor_runtime(opts, name, tmp)
            profile, runtime, offline = sides[name]
            rpc = Rpc(profile, environ, tmp, runtime, offline=offline)
            answer = rpc.call("initialize", {"cwd": tmp})
            elapsed = time.perf_counter() - rpc.t0
            rpc.close()
            if "result" not in answer:
                raise RuntimeError(f"{name}: initialize failed: {answer.get('error')}")
            return elapsed

        for run in range(runs + 1):  # the first round seeds profiles and bytecode
            if run:
                baseline.sample()
            for name in balanced(list(figures), run):
                figures[name].append(start(name))
    medians = {k: median_ms(v[1:]) for k, v in figures.items()}
    python_ms, pass_ms = medians["sdk (python)"], baseline.median_ms
    overheads = [t - p for t, p in zip(figures["sdk (python)"][1:], baseline.samples,
                                       strict=True)]
    rows = [
        INITIALIZE.measure(
            python_ms, runs=runs, python_pass_ms=pass_ms,
            sdk_minimal_ms=medians["sdk-minimal (python)"],
            offline_ms=medians["sdk + offline (python)"],
            anchors={name: medians[name] for name in anchors} if anchors else no_anchors(),
            samples_ms={name: [ms(t) for t in v[1:]] for name, v in figures.items()},
            anchor_runtimes=anchor_probes.RUNTIMES,
            exe_carrier=exe.label if exe is not None else "none"),
        OVERHEAD.measure(
            python_ms - pass_ms, runs=runs, python_pass_ms=pass_ms,
            sdk_initialize_ms=python_ms,
            paired_median_ms=median_ms(overheads)),
    ]
    if exe is None:
        rows.append(EXE.skip(
            "no exe carrier: no runtime wheel (--wheel PATH, --build-wheel or wheelhouse/), "
            "no DSH_RUNTIME_BIN and no installed dsh-runtime-bin"))
    else:
        pairs = [e / p for e, p in zip(figures["sdk (exe)"][1:], figures["sdk (python)"][1:],
                                       strict=True)]
        rows.append(EXE.measure(
            statistics.median(pairs), runs=runs, python_pass_ms=pass_ms,
            exe_ms=medians["sdk (exe)"], exe_sdk_minimal_ms=medians["sdk-minimal (exe)"],
            python_ms=python_ms, exe_carrier=exe.label))
    return rows


IDLE_RSS = Metric(
    "runtime_idle_rss", "MB", "<", 40,
    about="Resident memory of an initialized, idle `dsh --profile sdk` (python carrier) "
          "after a tools/list, beside each anchor's initialized runtime (with any "
          "processes it started).",
    changes="What the runtime imports and keeps (modules, the plugin tree, caches), the "
            "interpreter build; hardly the machine's load. Target 40 MB: issue 3.")


@benchmark("runtime_idle_rss", IDLE_RSS, anchors=True)
def runtime_idle_rss(opts: Options) -> Result:
    """Resident memory of an initialized, idle ``dsh --profile sdk`` runtime."""
    runs = opts.reps(5, 3)
    figures = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        for _ in range(runs):
            rpc = Rpc("sdk", installed_environ(tmp), tmp)
            rpc.call("initialize", {"cwd": tmp})
            rpc.call("tools/list")
            time.sleep(0.5)
            figures.append(rss_mb(rpc.proc.pid))
            rpc.close()
        anchors: dict[str, Any] = no_anchors()
        if opts.anchors is not None:
            for name in anchor_probes.READY_PROBES:
                while len(_ANCHOR_RSS.get(name, ())) < runs:
                    _anchor_runtime(opts, name, tmp)
            anchors = {name: round(statistics.median(_ANCHOR_RSS[name]), 1)
                       for name in anchor_probes.READY_PROBES}
    return IDLE_RSS.measure(statistics.median(figures), runs=runs, profile="sdk",
                            carrier="python", anchors=anchors)


RELOAD = Metric(
    "reload_latency", "ms", "<", 150,
    about="Live reload: a custom profile's patch.yml rewritten to the new value visible "
          "in config/get (watcher delay, recompose and reconcile included).",
    changes="The watcher's polling interval or inotify, recompose and reconcile cost, "
            "the filesystem's timestamp granularity; CPU load. Target 150 ms.")


def _live_profile(environ: dict[str, str], cwd: str) -> Path:
    """Custom profile ``p`` (a copy of ``sdk``) with live reload; its patch.yml path."""
    subprocess.run([sys.executable, "-m", "dsh", "--profile", "p", "--from-default-profile",
                    "sdk", "--dump-config"], env=environ, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL)
    profile = Path(environ["DSH_HOME"]) / "profiles" / "p"
    toml = profile / "profile.toml"
    toml.write_text(toml.read_text().replace('"startup"', '"live"'))
    return profile / "patch.yml"


@benchmark("reload_latency", RELOAD)
def reload_latency(opts: Options) -> Result:
    """Live reload: patch.yml written to the new value visible in config/get."""
    runs = opts.reps(21, 5)
    figures = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        patch = _live_profile(environ, tmp)
        baseline = PythonPass(environ, tmp)
        rpc = Rpc("p", environ, tmp)
        try:
            if "result" not in rpc.call("initialize", {"cwd": tmp}):
                raise RuntimeError("initialize failed")
            for i in range(runs + 1):  # the first round also waits for the watcher to arm
                baseline.sample()
                steps = 10 + i
                t0 = time.perf_counter()
                patch.write_text(f"- {{id: agent, merge: {{config: {{max_steps: {steps}}}}}}}\n")
                while True:
                    rows = rpc.call("config/get")["result"]["config"]["rows"]
                    agent = next(r for r in rows if r["id"] == "agent")
                    if agent["config"]["max_steps"] == steps:
                        break
                    if time.perf_counter() - t0 > 10:
                        raise RuntimeError("the edit never reached config/get")
                figures.append(time.perf_counter() - t0)
        finally:
            rpc.close()
    return RELOAD.measure(median_ms(figures[1:]), runs=runs, python_pass_ms=baseline.median_ms,
                          max_ms=ms(max(figures[1:])))



SWEEP = Metric(
    "orphan_sweep_100", "ms", "<", 200,
    about="What a runtime's start pays to end what a SIGKILLed runtime of the same home "
          "left running: 100 processes that left their group and parent (setsid -f, from "
          "one shell command), in the containment this machine offers; "
          "dsh.core.process.sweep on the home, from reading the dead record to the last "
          "kill. The subreaper's sweep (no cgroup: the marker scan alone) is a detail.",
    changes="How many processes run on the machine (each one's environment is read for "
            "the dead runtime's marker), the containment (cgroup.kill or a kill each), the "
            "kernel; load. Target 200 ms (issue 32).")
_LEFT = 100
_LEAVER = """
import sys, time
from dsh.core import containers, process

home, left = sys.argv[1], int(sys.argv[2])
process.contain(home)
process.spawn(["bash", "-c", f"for i in $(seq {left}); do setsid -f sleep 600; done; sleep 600"],
              stdout=process.DEVNULL, stderr=process.DEVNULL)
prefix = containers.identity().token + "/"


def sleeping(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read() == "sleep\\n"
    except OSError:
        return False


deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    marked = [p for p in containers.all_pids()
              if any(w.startswith(prefix) for w in containers.markers(p))]
    if sum(sleeping(p) for p in marked) > left:
        print("ready", flush=True)
        time.sleep(600)
    time.sleep(0.02)
"""


def _left_behind(environ: dict[str, str], tmp: str, home: str) -> None:
    """Start a contained process that leaves :data:`_LEFT` orphans, then SIGKILL it."""
    leaver = subprocess.Popen([sys.executable, "-c", _LEAVER, home, str(_LEFT)], env=environ,
                              cwd=tmp,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        assert leaver.stdout is not None
        if leaver.stdout.readline().strip() != "ready":
            raise RuntimeError("the orphans were never all running")
    finally:
        leaver.kill()
        leaver.wait()
        if leaver.stdout is not None:
            leaver.stdout.close()


def _timed_sweep(environ: dict[str, str], tmp: str, home: str) -> float:
    """Seconds :func:`dsh.core.process.sweep` takes on what a killed process left."""
    from dsh.core.process import sweep

    _left_behind(environ, tmp, home)
    t0 = time.perf_counter()
    ended = sweep(home)
    took = time.perf_counter() - t0
    if ended < _LEFT:
        raise RuntimeError(f"the sweep ended {ended} of {_LEFT} leftovers")
    return took


@benchmark("orphan_sweep_100", SWEEP)
def orphan_sweep_100(opts: Options) -> Result:
    """The sweep a start runs, on 100 leftovers, in this machine's containment and in the
    subreaper's (interleaved)."""
    if not sys.platform.startswith("linux"):
        return SWEEP.skip("containment and its sweep are Linux's")
    from dsh.core.process import CONTAINMENT_ENV, containment

    runs = opts.reps(11, 3)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        modes = {"auto": environ, "subreaper": {**environ, CONTAINMENT_ENV: "subreaper"}}
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for run in range(runs):
            baseline.sample()
            for mode in balanced(list(modes), run):
                home = str(Path(tmp, f"home-{mode}-{run}"))
                times[mode].append(_timed_sweep(modes[mode], tmp, home))
    return SWEEP.measure(median_ms(times["auto"]), runs=runs, python_pass_ms=baseline.median_ms,
                         containment=containment().split(":")[0], leftovers=_LEFT,
                         subreaper_ms=median_ms(times["subreaper"]),
                         processes_on_machine=len(os.listdir("/proc")))
