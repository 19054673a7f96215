"""File-access benchmarks: what the race-free open costs against a plain one (issue 19).

``safe_open`` times :func:`dsh_runtime.tools.safeopen.open_regular` (the way the file
tools open a file beneath the workspace root: anchor fd, ``openat2`` where the kernel has
it, regular-file check, blocking mode restored) on a path three directories deep, and
``safe_open_walk`` the same through the component walk every other machine (and a
workspace holding the dsh home) uses; each beside a plain ``os.open`` of the same file
in the same run, interleaved, with the fd closed each time. Target: under 50 µs a call.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable

from benchlib.registry import Options, Result, benchmark, result

TARGET_US = 50
DEPTH = ("src", "pkg", "sub")


def _per_call_us(fn: Callable[[], None], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _measure(name: str, opts: Options, *, openat2: bool) -> Result:
    from dsh_runtime.tools import safeopen

    rounds, calls = opts.reps(15, 5), opts.reps(4000, 1000)
    safe_us: list[float] = []
    plain_us: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        root = os.path.realpath(tmp)
        os.makedirs(os.path.join(root, *DEPTH))
        rel = "/".join((*DEPTH, "file.txt"))
        path = os.path.join(root, rel)
        with open(path, "w") as f:
            f.write("x\n")
        anchor = safeopen.Anchor(root)

        def safe() -> None:
            os.close(safeopen.open_regular(anchor, rel))

        def plain() -> None:
            os.close(os.open(path, os.O_RDONLY))

        safeopen.use_openat2(openat2)
        try:
            used = "openat2" if openat2 and safeopen.openat2_available() else "walk"
            for _ in range(rounds):
                safe_us.append(_per_call_us(safe, calls))
                plain_us.append(_per_call_us(plain, calls))
        finally:
            safeopen.use_openat2(True)
    if openat2 and used != "openat2":
        return {"name": name, "median": None, "unit": "µs", "target": TARGET_US,
                "ok": None, "runs": 0, "reason": "no openat2 on this machine (the walk is "
                                                   "measured by safe_open_walk)"}
    safe_median, plain_median = statistics.median(safe_us), statistics.median(plain_us)
    return result(name, safe_median, "µs", TARGET_US, runs=rounds,
                  calls_per_run=calls, strategy=used, depth=len(DEPTH) + 1,
                  plain_open_us=round(plain_median, 2),
                  ratio_to_plain_open=round(safe_median / plain_median, 2),
                  measured="open + fstat + close of a regular file 4 components below "
                           "the anchor, in-process, interleaved with os.open")


@benchmark("safe_open")
def safe_open(opts: Options) -> Result:
    """The race-free open as the file tools use it here (openat2 where the kernel has it)."""
    return _measure("safe_open", opts, openat2=True)


@benchmark("safe_open_walk")
def safe_open_walk(opts: Options) -> Result:
    """The race-free open through the component walk (macOS, old kernels, a workspace
    holding the dsh home)."""
    return _measure("safe_open_walk", opts, openat2=False)
