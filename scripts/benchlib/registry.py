"""The benchmark registry, the rows each benchmark declares, and the run's verdict.

A *benchmark* is a function registered with :func:`benchmark` under its ``--only`` key; it
declares up front the rows (:class:`Metric`) it reports, so the registry knows every row's
unit, target and notes before anything runs: ``--list`` prints them, the runner checks the
function returned exactly those rows, and a benchmark that raises still reports each of
its rows (as an error). Kept apart from the family modules so the report machinery and
its tests can build rows and documents without importing (or running) a benchmark.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchlib.anchors import AnchorEnv
from benchlib.carrier import RuntimeWheel

Result = dict[str, Any]

# The families, in report order: ``scripts/benchlib/<family>.py`` each registers its
# benchmarks when imported (:func:`load_families`).
FAMILIES = ("compose", "sdk", "runtime", "wheel", "throughput", "providers", "agent",
            "sessions", "trust", "web", "plugins", "shell", "mcp", "telemetry", "chat")

# Units whose figures are times, with their factor to milliseconds: each such row reports
# the same run's ``python -c pass`` beside it (:func:`with_python_pass`).
TIME_UNITS = {"ms": 1.0, "ms/step": 1.0, "s": 1000.0, "µs": 0.001}
_OPS = {"<": lambda v, t: v < t, "<=": lambda v, t: v <= t, ">=": lambda v, t: v >= t}
VERDICTS = ("met", "missed", "incomplete")


@dataclass(frozen=True)
class Options:
    """What every benchmark may read: whether this is a quick run, the anchors' environment
    when ``--with-anchors`` asked for one, and the runtime wheel (found, built, or why
    there is none)."""

    quick: bool
    anchors: AnchorEnv | None = None
    wheel: RuntimeWheel | None = None

    def reps(self, full: int, quick: int) -> int:
        """The number of repetitions for this run."""
        return quick if self.quick else full


@dataclass(frozen=True)
class Metric:
    """One row's definition: what it measures, its unit and its fixed target.

    ``op`` compares the measured value with ``target`` (``"<"``, ``"<="`` or ``">="``).
    ``about`` says what is measured, ``changes`` what would change the number (code,
    machine, load, configuration): both are printed with every row of the report.
    ``stretch`` marks a target set beyond the contract (said so in the report; it counts
    in the verdict like any other).
    """

    name: str
    unit: str
    op: str
    target: float
    about: str
    changes: str
    stretch: bool = False

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"{self.name}: op {self.op!r} is not one of {sorted(_OPS)}")
        if not self.about.strip() or not self.changes.strip():
            raise ValueError(f"{self.name}: a row says what it measures and what changes it")

    @property
    def timed(self) -> bool:
        """Whether the value is a time (it then carries ``python -c pass`` beside it)."""
        return self.unit in TIME_UNITS

    def _base(self) -> Result:
        return {"name": self.name, "unit": self.unit, "op": self.op, "target": self.target,
                "stretch": self.stretch, "about": self.about, "changes": self.changes}

    def measure(self, value: float, *, runs: int = 1, python_pass_ms: float | None = None,
                anchors: dict[str, Any] | None = None, compared: tuple[float, str] | None = None,
                ok: bool | None = None, **details: Any) -> Result:
        """The row for a measured ``value``: ``ok`` is the comparison with the target.

        ``ok=False`` may only tighten it (a check the number cannot show failed, e.g. an
        echoed frame that came back altered). ``anchors`` maps each anchor SDK to the same
        figure measured of it (or why it was not); ``ratios`` is dsh's figure over each
        measured one: ``value``, or ``compared`` (figure, unit) when the value is itself a
        ratio and the anchors were measured in another unit. ``python_pass_ms`` is the
        same run's interpreter start, taken interleaved with this row's samples
        (:func:`with_python_pass`).
        """
        if ok is True:
            raise ValueError(f"{self.name}: ok comes from the target; pass ok=False only")
        met = _OPS[self.op](value, self.target) and ok is not False
        row = {**self._base(), "median": round(value, 3 if abs(value) < 10 else 2),
               "ok": met, "status": "met" if met else "missed", "runs": runs, **details}
        if anchors is not None:
            ours, unit = compared if compared is not None else (value, self.unit)
            row["anchors"] = anchors
            row["anchors_unit"] = unit
            row["ratios"] = {k: float(f"{ours / v:.3g}") for k, v in anchors.items()
                             if isinstance(v, (int, float)) and v > 0}
        if python_pass_ms is not None:
            with_python_pass(row, python_pass_ms, source="interleaved")
        return row

    def skip(self, reason: str, **details: Any) -> Result:
        """The row for a figure that was not taken: ``ok`` is ``None`` and the reason is
        said, so the run's verdict is ``incomplete``, never a pass."""
        if not reason.strip():
            raise ValueError(f"{self.name}: a skipped row says why")
        return {**self._base(), "median": None, "ok": None, "status": "skipped",
                "skipped": reason, "runs": 0, **details}

    def error(self, message: str) -> Result:
        """The row of a benchmark that raised: not measured, the error said."""
        return {**self._base(), "median": None, "ok": None, "status": "error",
                "error": message, "runs": 0}


def with_python_pass(row: Result, python_pass_ms: float, *, source: str) -> Result:
    """Attach the same run's ``python -c pass`` median and the row's value over it.

    The ratio is what stays comparable across machines and loads: on a shared machine
    every time moves with the load by about the factor ``python -c pass`` moves.
    ``source`` says how it was taken: ``interleaved`` with the row's own samples, or
    ``bracketing`` (just before and after the benchmark, by the runner).
    """
    row["python_pass_ms"] = round(python_pass_ms, 2)
    row["python_pass_source"] = source
    value = row.get("median")
    if isinstance(value, (int, float)) and python_pass_ms > 0 and row["unit"] in TIME_UNITS:
        row["vs_python_pass"] = float(f"{value * TIME_UNITS[row['unit']] / python_pass_ms:.3g}")
    return row


def verdict(rows: Sequence[Result]) -> str:
    """``missed`` if any row missed its target, else ``incomplete`` if any row was not
    measured (skipped or an error), else ``met``. An empty run is ``incomplete``."""
    if any(row.get("ok") is False for row in rows):
        return "missed"
    if not rows or any(row.get("ok") is not True for row in rows):
        return "incomplete"
    return "met"


def counts(rows: Sequence[Result]) -> dict[str, int]:
    """How many rows met, missed, were skipped, or failed with an error."""
    out = {"met": 0, "missed": 0, "skipped": 0, "error": 0}
    for row in rows:
        out[row.get("status", "error")] += 1
    return out


@dataclass(frozen=True)
class Benchmark:
    """A registered benchmark: its function and the rows it reports, in order."""

    name: str
    func: Callable[[Options], Result | list[Result]]
    metrics: tuple[Metric, ...]
    full_only: bool
    anchors: bool


BENCHMARKS: dict[str, Benchmark] = {}
_ROW_NAMES: set[str] = set()


def benchmark(name: str, *metrics: Metric, full_only: bool = False, anchors: bool = False,
              ) -> Callable[[Callable[[Options], Any]], Callable[[Options], Any]]:
    """Register a benchmark under ``name`` (the ``--only`` key) reporting ``metrics``.

    ``full_only`` leaves it out of ``--quick`` (scaling series). ``anchors``: it measures
    the anchor SDKs when ``--with-anchors`` gives it their venv (which is only created,
    a large download, when a selected benchmark says so). Row names are unique across
    the registry, as the report keys rows by name.
    """
    if not metrics:
        raise ValueError(f"benchmark {name!r} declares no row")

    def register(func: Callable[[Options], Any]) -> Callable[[Options], Any]:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} registered twice")
        taken = _ROW_NAMES & {m.name for m in metrics}
        if taken or len({m.name for m in metrics}) != len(metrics):
            raise ValueError(f"benchmark {name!r}: row names used twice: {sorted(taken)}")
        BENCHMARKS[name] = Benchmark(name, func, tuple(metrics), full_only, anchors)
        _ROW_NAMES.update(m.name for m in metrics)
        return func

    return register


def load_families() -> None:
    """Import every family module (each registers its benchmarks), in report order."""
    for family in FAMILIES:
        importlib.import_module(f"benchlib.{family}")
