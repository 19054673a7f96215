"""The benchmark report: the machine it ran on, and Markdown rendered from a result document.

Everything here is a pure function of the document (plus /proc for :func:`machine`), so the
tests render fixed documents. Ratios (dsh's figure over an anchor's, same run) lead the
table: on a shared 2-core machine absolute times move with the load, ratios much less.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from benchlib.anchors import SDK_MODULES

ANCHOR_COLUMNS = tuple(SDK_MODULES)  # deepseek-harness-sdk, openai-codex, claude-agent-sdk
# The x and y keys of each scaling series' points, for its table.
SERIES = {
    "compose_scaling": ("layers", ("rows", "ms")),
    "sessions_db_scaling": ("events", ("append_us", "resume_ms")),
    "sdk_sessions_throughput": ("sessions", ("turns_per_s",)),
    "sdk_clients_scaling": ("clients", ("ready_ms", "ready_max_ms", "rss_mb")),
}


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
    mem = _field("/proc/meminfo", "MemTotal")
    os_name = _field("/etc/os-release", "PRETTY_NAME", "=")
    return {
        "cpu": _field("/proc/cpuinfo", "model name\t") or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "ram_gb": round(int(mem.split()[0]) / 2**20, 1) if mem else None,
        "os": (os_name or "").strip('"') or platform.system(),
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load_average_start": load_average(),
    }


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
    sign = "≥" if row.get("higher_is_better") else "<"
    return f"{sign} {number(row['target'])} {row['unit']}"


def _ratio_cell(row: dict[str, Any], anchor: str) -> str:
    """``0.41 (98 ms)``: dsh over the anchor, and the anchor's own figure; ``—`` when the
    row has no such anchor or it was not measured."""
    ratio = row.get("ratios", {}).get(anchor)
    if ratio is None:
        return "—"
    return f"**{number(ratio)}** ({number(row['anchors'][anchor])} {row['unit']})"


def table(document: dict[str, Any]) -> str:
    """The results as one Markdown table, ratio columns first."""
    head = ["benchmark", *(f"dsh / {a}" for a in ANCHOR_COLUMNS), "dsh median", "target",
            "ok", "runs"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in document["results"]:
        if "error" in row:
            cells = [row["name"], *("—" for _ in ANCHOR_COLUMNS), "—", "—",
                     f"**error**: {row['error']}", "—"]
        else:
            skipped = row.get("skipped")
            cells = [row["name"], *(_ratio_cell(row, a) for a in ANCHOR_COLUMNS),
                     "skipped" if skipped else f"{number(row['median'])} {row['unit']}",
                     _target(row), "yes" if row["ok"] else "**NO**", str(row.get("runs", 1))]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


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


def notes(document: dict[str, Any]) -> str:
    """Each row's own words on what it measured (its ``note``/``measured`` details)."""
    out = []
    for row in document["results"]:
        said = [str(row[k]) for k in ("measured", "note", "skipped") if row.get(k)]
        samples = row.get("samples_ms") or {}
        if samples:
            labels = row.get("anchor_runtimes", {})
            said.append("medians: " + ", ".join(
                f"{labels.get(name, name)} {number(sorted(v)[len(v) // 2])} ms"
                for name, v in samples.items() if v))
        if isinstance(row.get("exe"), str):
            said.append(f"exe carrier: `{row['exe']}`")
        if said:
            out.append(f"- `{row['name']}`: " + "; ".join(said))
    return "\n".join(out)


def _machine_lines(document: dict[str, Any]) -> list[str]:
    m = document.get("machine", {})
    load = m.get("load_average_start"), m.get("load_average_end")
    return [
        f"- CPU: {m.get('cpu', '?')}, {m.get('cores', document.get('cpus'))} cores; "
        f"RAM {m.get('ram_gb', '?')} GB",
        f"- OS: {m.get('os', document.get('platform'))} (kernel {m.get('kernel', '?')}); "
        f"Python: {m.get('python', document.get('python'))}",
        f"- Load average (1, 5, 15 min) at start {load[0]}, at end {load[1]}"
        + (": the machine was shared with other work during the run, so absolute times are "
           "noisy; ratios, taken in the same run, much less so." if _busy(m) else "."),
    ]


def _busy(m: dict[str, Any]) -> bool:
    """Whether other work loaded the machine: a 1-minute load above half its cores."""
    loads = [*(m.get("load_average_start") or [0])[:1], *(m.get("load_average_end") or [0])[:1]]
    return max(loads) > 0.5 * (m.get("cores") or 1)


HOW_TO_READ = """\
- **dsh / anchor** columns are the headline: dsh's median over the same figure measured,
  in the same run and on the same machine, of each anchor SDK (`deepseek-harness-sdk` with
  `deepseek-harness-runtime-bin`, `openai-codex` with `openai-codex-cli-bin`,
  `claude-agent-sdk`). Below 1 means dsh is faster or smaller. The anchor's own figure is
  in brackets. `—`: that figure has no anchor counterpart or needs an API key.
- **dsh median** is the median of **runs** repetitions, interleaved with the anchors' so a
  load spike slows every side alike; **ok** says whether it meets its **target**.
- Anchor runtimes are measured keyless: each is spawned to its answer to `initialize`
  (the DeepSeek Harness runtime through its own SDK client; `codex app-server` and the
  Claude Code CLI bundled by `claude-agent-sdk` over their stdio protocols).
- Scaling series (ratios of the largest to the smallest size) are in full runs only;
  their points are tabled and plotted below.
- Each row's details (minimums, breakdowns, notes) are in the JSON document
  (`python scripts/bench.py --json PATH`)."""


def markdown(document: dict[str, Any], figures: dict[str, str], plot_note: str | None) -> str:
    """The whole ``docs/benchmarks.md``: how to read it, the machine, the command, the table,
    the scaling series and the plots (paths relative to the document)."""
    anchors = document.get("anchors") or {}
    versions = anchors.get("versions") or {}
    out = [
        "# dsh benchmarks", "",
        f"Generated by `{document.get('command', 'python scripts/bench.py')}` on "
        f"{document.get('date', '?')} ({document.get('duration_s', '?')} s"
        f"{', quick run' if document.get('quick') else ''}). Regenerate with the same "
        "command; `python scripts/bench.py --quick` prints the table without writing files."
        + (" `DSH_RUNTIME_BIN` names the frozen runtime (exe carrier) measured, as the SDK "
           "reads it, where the `dsh-runtime-bin` wheel is not installed; without either, "
           "only the python carrier is measured." if "DSH_RUNTIME_BIN=" in
           document.get("command", "") else ""),
        "", "## How to read this", "", HOW_TO_READ, "", "## Machine", "",
        *_machine_lines(document), "",
        "Anchors: " + (", ".join(f"`{k}` {v}" for k, v in sorted(versions.items()))
                       if versions else "not measured (run with `--with-anchors`)") + ".",
        "", "## Results", "", table(document), "",
    ]
    said = notes(document)
    if said:
        out += ["## What each row measured", "", said, ""]
    series = series_tables(document)
    if series:
        out += ["## Scaling", "", series]
    out += ["## Plots", ""]
    if figures:
        out += [f"![{name}]({path})\n" for name, path in figures.items()]
    if plot_note:
        out += [plot_note, ""]
    return "\n".join(out).rstrip() + "\n"
