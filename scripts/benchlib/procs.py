"""Timing processes: the environments they run in, their wall time, and the yardstick.

Every process a benchmark starts runs in :func:`installed_environ`: no ``DSH_*`` of the
caller's, its own home, and bytecode kept (in the run's temporary folder) as an installed
wheel keeps it, so a figure never times the compilation of this checkout's sources.

The yardstick is ``python -c pass`` of the same interpreter, in the same environment:
:class:`PythonPass` takes its samples interleaved with a benchmark's own, and every
time-valued row reports its value beside it and as a ratio to it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_PATCH = ROOT / "examples" / "offline" / "patch.yml"
FIXTURES = ROOT / "tests" / "fixtures"


def ms(seconds: float) -> float:
    """Seconds as milliseconds, to the hundredth."""
    return round(seconds * 1000, 2)


def median_ms(samples: list[float]) -> float:
    """The median of ``samples`` (seconds), in milliseconds."""
    return ms(statistics.median(samples))


def balanced(sides: Sequence[T], turn: int) -> list[T]:
    """``sides`` in round ``turn``'s order of a balanced Latin square (Williams design):
    over ``n`` rounds (``2n`` when ``n`` is odd) each side runs first equally often and
    right after each other side equally often, so what a side leaves behind (a CPU still
    busy with its exit, caches it filled or evicted) falls on every side alike."""
    n = len(sides)
    if n < 2:
        return list(sides)
    base, low, high = [0], 1, n - 1
    while len(base) < n:
        base.append(low if len(base) % 2 else high)
        low, high = (low + 1, high) if len(base) % 2 == 0 else (low, high - 1)
    row = turn % (n if n % 2 == 0 else 2 * n)
    order = [(index + row) % n for index in base]
    if row >= n:  # odd n: the second half runs the first half's rows backwards
        order = [(index + row - n) % n for index in base][::-1]
    return [sides[index] for index in order]


def clean_environ(**extra: str) -> dict[str, str]:
    """The environment minus every ``DSH_*`` name, plus ``extra``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    environ.update(extra)
    return environ


def installed_environ(tmp: str) -> dict[str, str]:
    """A clean environment whose interpreters keep bytecode (in ``tmp``), as an installed
    wheel does, with its home at ``tmp/home``."""
    environ = clean_environ(DSH_HOME=str(Path(tmp, "home")),
                            PYTHONPYCACHEPREFIX=str(Path(tmp, "pycache")))
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return environ


def wall(argv: list[str], environ: dict[str, str], cwd: str) -> float:
    """Wall seconds of one process run to completion (output discarded; it must succeed)."""
    t0 = time.perf_counter()
    subprocess.run(argv, env=environ, cwd=cwd, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def timed_python(code: str, environ: dict[str, str], cwd: str, *args: str,
                 python: str = sys.executable) -> dict[str, float]:
    """Run ``code`` in a fresh interpreter; its last stdout line is a JSON object."""
    out = subprocess.run([python, "-c", code, *args], env=environ, cwd=cwd,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"probe failed ({out.returncode}): {tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class PythonPass:
    """``python -c pass`` of this interpreter, sampled when asked: the run's yardstick.

    Call :meth:`sample` once per repetition of a benchmark's own loop, so the yardstick
    sees the same load as the figure beside it.
    """

    def __init__(self, environ: dict[str, str], cwd: str) -> None:
        self._argv = [sys.executable, "-c", "pass"]
        self._environ = environ
        self._cwd = cwd
        self.samples: list[float] = []

    def sample(self, count: int = 1) -> None:
        """Time ``count`` more runs."""
        for _ in range(count):
            self.samples.append(wall(self._argv, self._environ, self._cwd))

    @property
    def median_ms(self) -> float:
        """The median so far, in milliseconds."""
        return median_ms(self.samples)


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` (Linux /proc), in MiB."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError("resident memory is read from /proc, which is Linux's")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")
