"""The trust boundary: what the race-free open of the file tools costs against a plain one.

``safe_open`` times :func:`dsh.runtime.tools.safeopen.open_regular` as the file tools
use it (from the workspace root's fd, ``openat2(RESOLVE_BENEATH)`` where the kernel has
it, the regular-file check, blocking mode restored, then close) on a file four components
below the root; ``safe_open_walk`` the same through the ``O_NOFOLLOW`` component walk
that other kernels (and a root holding a protected directory) use. Each is timed beside a
plain ``os.open`` + close of the same file, interleaved in one loop, in this process.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable

from benchlib.procs import PythonPass, installed_environ
from benchlib.registry import Metric, Options, Result, benchmark

DEPTH = ("src", "pkg", "sub")
_CHANGES = ("The kernel (openat2 exists on Linux 5.6+; the walk costs one openat and fstat "
            "per component, so depth adds to it), the filesystem and its dentry cache, "
            "load. Target 50 µs a call: the race-free open must be invisible beside a "
            "tool call.")
SAFE_OPEN = Metric(
    "safe_open", "µs", "<", 50,
    about="open_regular (openat2 RESOLVE_BENEATH from the root's fd, fstat, close) of a "
          "file 4 components below the workspace root, in-process; a plain os.open + "
          "close of the same file in the same loop is the detail plain_open_us.",
    changes=_CHANGES)
SAFE_OPEN_WALK = Metric(
    "safe_open_walk", "µs", "<", 50,
    about="open_regular through the O_NOFOLLOW|O_DIRECTORY component walk (openat2 "
          "switched off) of the same file; plain os.open + close beside it as "
          "plain_open_us.",
    changes=_CHANGES)


def _per_call_us(fn: Callable[[], None], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _measure(metric: Metric, opts: Options, *, openat2: bool) -> Result:
    from dsh.runtime.tools import safeopen

    if openat2 and not safeopen.openat2_available():
        return metric.skip("this kernel has no openat2 (the walk is measured by "
                           "safe_open_walk)")
    rounds, calls = opts.reps(15, 5), opts.reps(4000, 1000)
    safe_us: list[float] = []
    plain_us: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
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
            for _ in range(rounds):
                baseline.sample()
                safe_us.append(_per_call_us(safe, calls))
                plain_us.append(_per_call_us(plain, calls))
        finally:
            safeopen.use_openat2(True)
    safe_median, plain_median = statistics.median(safe_us), statistics.median(plain_us)
    return metric.measure(safe_median, runs=rounds, python_pass_ms=baseline.median_ms,
                          calls_per_run=calls, depth=len(DEPTH) + 1,
                          plain_open_us=round(plain_median, 2),
                          ratio_to_plain_open=round(safe_median / plain_median, 2))


@benchmark("safe_open", SAFE_OPEN)
def safe_open(opts: Options) -> Result:
    """The race-free open as the file tools use it here (openat2 where the kernel has it)."""
    return _measure(SAFE_OPEN, opts, openat2=True)


@benchmark("safe_open_walk", SAFE_OPEN_WALK)
def safe_open_walk(opts: Options) -> Result:
    """The race-free open by the component walk (other kernels, protected dirs below)."""
    return _measure(SAFE_OPEN_WALK, opts, openat2=False)
