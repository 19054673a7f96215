"""The benchmark report: the machine it ran on, and Markdown rendered from a result document.

Everything here is a pure function of the document (plus /proc for :func:`machine` and the
paths :func:`scrub` removes), so the tests render fixed documents. Each row is shown as
met, missed or skipped (with the reason), beside the same run's ``python -c pass`` and the
anchors' figures: on a shared machine absolute times move with the load, ratios much less.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib.anchors import SDK_MODULES

ROOT = Path(__file__).resolve().parents[2]
ANCHOR_COLUMNS = tuple(SDK_MODULES)  # deepseek-harness-sdk, openai-codex, claude-agent-sdk
# The x and y keys of each scaling series' points, for its table.
SERIES = {
    "compose_scaling": ("layers", ("rows", "ms")),
    "sessions_db_scaling": ("events", ("append_us", "resume_ms")),
    "sdk_sessions_throughput": ("sessions", ("turns_per_s",)),
    "sdk_clients_scaling": ("clients", ("ready_ms", "ready_max_ms", "rss_mb")),
}
# A run "started loaded" when the 1-minute load average at its start was at least this
# share of the cores: other work then had the CPU about half the time, and every absolute
# figure is inflated (the ratios to python -c pass much less).
LOADED_SHARE = 0.5
_OP_SIGNS = {"<": "<", "<=": "≤", ">=": "≥"}


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _field(path: str, key: str, sep: str = ":") -> str | None:
    """The value of the first ``key<sep>value`` line of a /proc or /etc file, if any."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + sep):
                return line.split(sep, 1)[1].strip()
    except OSError:
        return None
    return None


def machine() -> dict[str, Any]:
    """What the figures were taken on: CPU, cores, RAM, OS, Python, load at the start."""
    linux = sys.platform.startswith("linux")
    mem = _field("/proc/meminfo", "MemTotal") if linux else None
    os_name = _field("/etc/os-release", "PRETTY_NAME", "=")
    return {
        "cpu": (_field("/proc/cpuinfo", "model name\t") if linux else None)
        or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "ram_gb": round(int(mem.split()[0]) / 2**20, 1) if mem else None,
        "os": (os_name or "").strip('"') or platform.system(),
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load_average_start": load_average(),
    }


# -- no machine paths ----------------------------------------------------------------------

_ABSOLUTE = re.compile(r"(?<![\w.~<>-])/(?:root|home|tmp|work|usr|opt|var|private|Users|mnt|"
                       r"srv|nix)(?:/[\w.+@=-]+)+")


def _replacements() -> list[tuple[str, str]]:
    """Machine-specific path prefixes and what the report says instead, longest first."""
    pairs = [(sys.executable, "python"), (str(ROOT) + os.sep, ""), (str(ROOT), "."),
             (sys.prefix, "<venv>"), (tempfile.gettempdir(), "<tmp>"),
             (str(Path.home()), "~")]
    return sorted(((a, b) for a, b in pairs if len(a) > 1), key=lambda p: -len(p[0]))


def scrub(value: Any, replacements: list[tuple[str, str]] | None = None) -> Any:
    """``value`` with every machine path in its strings replaced: this checkout's own
    paths become relative, the interpreter ``python``, the venv ``<venv>``, temporary
    folders ``<tmp>``, the home ``~``, and any other absolute path its last part
    (``…/name``). The report then reads the same on any machine."""
    if replacements is None:
        replacements = _replacements()
    if isinstance(value, str):
        for prefix, said in replacements:
            value = value.replace(prefix, said)
        return _ABSOLUTE.sub(lambda m: "…/" + m.group(0).rsplit("/", 1)[-1], value)
    if isinstance(value, dict):
        return {k: scrub(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, replacements) for v in value]
    return value


# -- figures ---------------------------------------------------------------------------------


def number(value: Any) -> str:
    """A figure as a reader wants it: three significant digits, no float noise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _target(row: dict[str, Any]) -> str:
    if "target" not in row:
        return "—"
    sign = _OP_SIGNS.get(row.get("op", "<"), row.get("op", "<"))
    return f"{sign} {number(row['target'])} {row['unit']}" + (
        " (stretch)" if row.get("stretch") else "")


def status(row: dict[str, Any]) -> str:
    """``met``, ``missed``, ``skipped`` or ``error``, as the row says."""
    return row.get("status") or ("met" if row.get("ok") else "missed")


def _status_cell(row: dict[str, Any]) -> str:
    said = status(row)
    if said == "missed":
        return "**missed**"
    if said == "skipped":
        return f"skipped: {row.get('skipped', '?')}"
    if said == "error":
        return f"**error**: {row.get('error', '?')}"
    return "met"


def _ratio_cell(row: dict[str, Any], anchor: str) -> str:
    """``0.41 (98 ms)``: dsh over the anchor, and the anchor's own figure; ``—`` when the
    row has no such anchor or it was not measured."""
    ratio = row.get("ratios", {}).get(anchor)
    if ratio is None:
        return "—"
    unit = row.get("anchors_unit", row["unit"])
    return f"**{number(ratio)}** ({number(row['anchors'][anchor])} {unit})"


def _pass_cells(row: dict[str, Any]) -> list[str]:
    """The same run's ``python -c pass`` and the row's value as a multiple of it."""
    if row.get("python_pass_ms") is None:
        return ["—", "—"]
    ratio = row.get("vs_python_pass")
    return [f"{number(row['python_pass_ms'])} ms", "—" if ratio is None else f"{number(ratio)}x"]


def table(document: dict[str, Any]) -> str:
    """The results as one Markdown table: each row's verdict first, then its figures."""
    head = ["row", "result", "dsh median", "target", "python -c pass", "median / pass",
            *(f"dsh / {a}" for a in ANCHOR_COLUMNS), "runs"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in document["results"]:
        value = row.get("median")
        cells = [row["name"], _status_cell(row),
                 "—" if value is None else f"{number(value)} {row.get('unit', '')}".strip(),
                 _target(row), *_pass_cells(row),
                 *(_ratio_cell(row, a) for a in ANCHOR_COLUMNS), str(row.get("runs", "—"))]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def headline(document: dict[str, Any]) -> str:
    """One line: the verdict and which rows made it what it is."""
    rows = document["results"]
    by = {said: [r["name"] for r in rows if status(r) == said]
          for said in ("met", "missed", "skipped", "error")}
    parts = [f"{len(by['met'])} met"]
    parts += [f"{len(by[s])} {s} ({', '.join(by[s])})" for s in ("missed", "skipped", "error")
              if by[s]]
    return f"Verdict: **{document.get('verdict', '?')}**: " + "; ".join(parts) + "."


# -- the document ----------------------------------------------------------------------------


def series_tables(document: dict[str, Any]) -> str:
    """A small table for each scaling series present (its points, as measured)."""
    out = []
    for row in document["results"]:
        spec = SERIES.get(row["name"])
        points = row.get("points")
        if spec is None or not points:
            continue
        x, ys = spec
        rows = points.values() if isinstance(points, dict) else points
        out += [f"**{row['name']}**", "", f"| {x} | " + " | ".join(ys) + " |",
                "|" + " --- |" * (1 + len(ys))]
        out += [f"| {number(p[x])} | " + " | ".join(number(p.get(y, '—')) for y in ys) + " |"
                for p in rows]
        out.append("")
    return "\n".join(out)


# Details of a row the report does not repeat in its notes (shown elsewhere or bulky).
_SHOWN = {"name", "unit", "op", "target", "stretch", "about", "changes", "median", "ok",
          "status", "skipped", "error", "runs", "anchors", "ratios", "python_pass_ms",
          "python_pass_source", "vs_python_pass", "seconds", "samples_ms", "points",
          "anchor_runtimes", "anchors_unit", "pair_ratios", "largest_kb"}


def _details(row: dict[str, Any]) -> str:
    said = [f"{key} {number(value)}" for key, value in row.items()
            if key not in _SHOWN and not isinstance(value, (dict, list))]
    samples = row.get("samples_ms") or {}
    if samples:
        labels = row.get("anchor_runtimes", {})
        said.append("medians: " + ", ".join(
            f"{labels.get(name, name)} {number(sorted(v)[len(v) // 2])} ms"
            for name, v in samples.items() if v))
    return "; ".join(said)


def notes(document: dict[str, Any]) -> str:
    """Each row: its verdict, what it measured, its details, and what would change it."""
    out = []
    for row in document["results"]:
        said = status(row)
        head = f"- **`{row['name']}`**: {said}"
        if said == "skipped":
            head += f" ({row.get('skipped')})"
        elif said == "error":
            head += f" ({row.get('error')})"
        elif row.get("python_pass_ms") is not None and row.get("vs_python_pass") is not None:
            head += (f"; {number(row['median'])} {row['unit']} = "
                     f"{number(row['vs_python_pass'])}x `python -c pass` "
                     f"({number(row['python_pass_ms'])} ms, {row.get('python_pass_source')})")
        lines = [head + ".", f"  {row.get('about', '')}"]
        details = _details(row)
        if details:
            lines.append(f"  Details: {details}.")
        if row.get("changes"):
            lines.append(f"  *What would change it:* {row['changes']}")
        out.append("\n".join(lines))
    return "\n".join(out)


def started_loaded(document: dict[str, Any]) -> bool:
    """Whether the run started loaded: a 1-minute load average at its start of at least
    :data:`LOADED_SHARE` of the cores."""
    m = document.get("machine", {})
    start = (m.get("load_average_start") or [0])[0]
    return start >= LOADED_SHARE * (m.get("cores") or document.get("cpus") or 1)


def _load_lines(document: dict[str, Any]) -> list[str]:
    m = document.get("machine", {})
    cores = m.get("cores") or document.get("cpus") or 1
    start, end = m.get("load_average_start") or [], m.get("load_average_end") or []
    rule = (f"(rule: a run started loaded when the 1-minute load average at its start is "
            f"at least {LOADED_SHARE:g} x the cores, here {LOADED_SHARE * cores:g})")
    if started_loaded(document):
        return [f"> **This run started on a loaded machine**: 1-minute load average "
                f"{start[0]} on {cores} cores {rule}. Absolute times are inflated by other "
                "work; the ratios to `python -c pass` and to the anchors, taken in the same "
                "run, much less so.", ""]
    if end and end[0] >= LOADED_SHARE * cores:
        return [f"> The run started quiet (1-minute load {start[0] if start else '?'}) but "
                f"the load rose to {end[0]} by its end {rule}: later rows may read slow.",
                ""]
    return [f"The machine was quiet at the start (1-minute load average "
            f"{start[0] if start else '?'} on {cores} cores) {rule}.", ""]


def _machine_lines(document: dict[str, Any]) -> list[str]:
    m = document.get("machine", {})
    return [
        f"- CPU: {m.get('cpu', '?')}, {m.get('cores', document.get('cpus'))} cores; "
        f"RAM {m.get('ram_gb', '?')} GB",
        f"- OS: {m.get('os', document.get('platform'))} (kernel {m.get('kernel', '?')}); "
        f"Python: {m.get('python', document.get('python'))}",
        f"- Load average (1, 5, 15 min) at start {m.get('load_average_start')}, at end "
        f"{m.get('load_average_end')}",
        f"- `python -c pass` in this run: {number(document.get('python_pass_ms'))} ms "
        "(median of the samples taken around each benchmark)",
        f"- Runtime wheel: {document.get('runtime_wheel') or 'not looked for'}",
    ]


HOW_TO_READ = """\
- **result** is met, **missed** or skipped (with the reason) against the row's fixed
  **target**; a row that raised says **error**. The verdict is `met` only when every row
  met its target: one missed row makes it `missed`, one row not measured `incomplete`.
  Stretch targets (set beyond the contract) count like the others.
- **dsh median** is the median of **runs** repetitions. **python -c pass** is the same
  interpreter's start, sampled in the same loop as the row (or just before and after it),
  and **median / pass** the row's time as a multiple of it: that ratio moves far less with
  the machine and its load than the time itself.
- **dsh / anchor** columns: dsh's median over the same figure measured, in the same run, of
  each anchor SDK (`deepseek-harness-sdk` with `deepseek-harness-runtime-bin`,
  `openai-codex` with `openai-codex-cli-bin`, `claude-agent-sdk`); below 1 means dsh is
  faster or smaller; the anchor's own figure in brackets. Anchor runtimes are measured
  keyless, each spawned to its answer to `initialize`.
- Scaling series (ratios of the largest to the smallest size) are in full runs only;
  their points are tabled and plotted below. Every detail is in the JSON document
  (`python scripts/bench.py --json PATH`)."""


def markdown(document: dict[str, Any], figures: dict[str, str], plot_note: str | None) -> str:
    """The whole ``docs/benchmarks.md``: the verdict and the machine's load first, then how
    to read it, the machine, the table, each row's notes, the scaling series and the plots
    (paths relative to the document)."""
    anchors = document.get("anchors") or {}
    versions = anchors.get("versions") or {}
    out = [
        "# dsh benchmarks", "",
        headline(document), "",
        *_load_lines(document),
        f"Generated by `{document.get('command', 'python scripts/bench.py')}` on "
        f"{document.get('date', '?')} ({document.get('duration_s', '?')} s"
        f"{', quick run' if document.get('quick') else ''}). Regenerate with the same "
        "command on a quiet machine; `python scripts/bench.py --quick` prints the table "
        "without writing files.",
        "", "## How to read this", "", HOW_TO_READ, "", "## Machine", "",
        *_machine_lines(document), "",
        "Anchors: " + (", ".join(f"`{k}` {v}" for k, v in sorted(versions.items()))
                       if versions else "not measured (run with `--with-anchors`)") + ".",
        "", "## Results", "", table(document), "",
        "## Each row: what it measured, and what would change it", "", notes(document), "",
    ]
    series = series_tables(document)
    if series:
        out += ["## Scaling", "", series]
    out += ["## Plots", ""]
    if figures:
        out += [f"![{name}]({path})\n" for name, path in figures.items()]
    if plot_note:
        out += [plot_note, ""]
    return "\n".join(out).rstrip() + "\n"
