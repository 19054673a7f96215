"""The benchmark registry and the result row every benchmark returns.

Kept apart from ``bench.py`` so the report machinery and its tests can build rows and
documents without importing (or running) a benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchlib.anchors import AnchorEnv

Result = dict[str, Any]


@dataclass(frozen=True)
class Options:
    """What every benchmark may read: whether this is a quick run, and the anchors'
    environment when ``--with-anchors`` asked for one (else anchors installed here count)."""

    quick: bool
    anchors: AnchorEnv | None = None

    def reps(self, full: int, quick: int) -> int:
        """The number of repetitions for this run."""
        return quick if self.quick else full


BENCHMARKS: dict[str, Callable[[Options], Result]] = {}
FULL_ONLY: set[str] = set()  # scaling series: too slow for --quick


def benchmark(name: str, *, full_only: bool = False,
              ) -> Callable[[Callable[[Options], Result]], Callable[[Options], Result]]:
    """Register a benchmark function under ``name`` (the ``--only`` key)."""

    def register(func: Callable[[Options], Result]) -> Callable[[Options], Result]:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} registered twice")
        BENCHMARKS[name] = func
        if full_only:
            FULL_ONLY.add(name)
        return func

    return register


def result(name: str, value: float, unit: str, target: float, *, runs: int = 1,
           higher_is_better: bool = False, anchors: dict[str, Any] | None = None,
           **details: Any) -> Result:
    """A result row: ``ok`` is ``value < target`` (``>=`` when higher is better).

    ``anchors`` maps each anchor SDK to the same figure measured of it ("not installed" or
    a reason when it was not); ``ratios`` is dsh's figure over each measured one, the
    headline of the report.
    """
    row: Result = {"name": name, "median": round(value, 2), "unit": unit, "target": target,
                   "ok": value >= target if higher_is_better else value < target,
                   "runs": runs, **details}
    if higher_is_better:
        row["higher_is_better"] = True
    if anchors is not None:
        row["anchors"] = anchors
        row["ratios"] = {k: float(f"{value / v:.3g}") for k, v in anchors.items()
                         if isinstance(v, (int, float)) and v > 0}
    return row
