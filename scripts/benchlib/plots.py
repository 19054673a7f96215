"""PNG plots for the report, where a curve says more than a number.

matplotlib is optional: it is imported here, lazily, and when it is missing the report says
"plots skipped" instead of failing. Each plot is drawn only when its benchmark is in the
document, so a ``--quick`` or ``--only`` run plots what it has.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def _rows(document: dict[str, Any]) -> dict[str, Row]:
    return {row["name"]: row for row in document["results"] if "error" not in row}


def _legend(left: Any, right: Any, loc: str) -> None:
    """One legend inside the plot for the lines of both y axes."""
    lines = left.get_lines() + right.get_lines()
    left.legend(lines, [line.get_label() for line in lines], loc=loc)


def _compose(plt: Any, row: Row) -> Any:
    points = row["points"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog([p["layers"] for p in points], [p["ms"] for p in points], "o-", label="dsh")
    first = points[0]
    ax.loglog([p["layers"] for p in points],
              [first["ms"] * p["layers"] / first["layers"] for p in points], ":",
              color="grey", label="linear from 1 layer")
    ax.set(xlabel="patch layers (50 rows each)", ylabel="parse + compose, ms (median)",
           title="Composition time against layer count")
    ax.legend()
    return fig


def _sessions_db(plt: Any, row: Row) -> Any:
    points = sorted(row["points"].values(), key=lambda p: p["events"])
    events = [p["events"] for p in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(events, [p["append_us"] for p in points], "o-", label="append, µs/event")
    ax.set(xlabel="events in the database", ylabel="append, µs per event (median)",
           title="Session database: append and resume against size", ylim=(0, None))
    right = ax.twinx()
    right.plot(events, [p["resume_ms"] for p in points], "s--", color="tab:orange",
               label="resume, ms/session")
    right.set(ylabel="resume one session, ms (median)", ylim=(0, None))
    _legend(ax, right, "lower left")
    return fig


def _carriers(plt: Any, row: Row) -> Any:
    samples = row["samples_ms"]
    names = list(samples)
    labels = [row.get("anchor_runtimes", {}).get(n, n if n.startswith("python") else
                                                 f"dsh {n}") for n in names]
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(names) + 1.5))
    rows = range(len(names))
    medians = [sorted(samples[n])[len(samples[n]) // 2] for n in names]
    ax.barh(rows, medians, color="lightsteelblue", label="median")
    for row, name in zip(rows, names, strict=True):
        ax.plot(samples[name], [row] * len(samples[name]), "k.", alpha=0.5)
    ax.set_yticks(list(rows), labels)
    ax.set(xlabel="spawn to initialize answer, ms (bar: median; dots: each run)",
           xscale="log", title="Start-to-ready per carrier (and each anchor's runtime)")
    return fig


def _clients(plt: Any, row: Row) -> Any:
    points = row["points"]
    clients = [p["clients"] for p in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(clients, [p["ready_ms"] for p in points], "o-", label="start-to-ready, median")
    ax.plot(clients, [p["ready_max_ms"] for p in points], "^:", label="start-to-ready, slowest")
    ax.set(xlabel="SDK clients started at once (one runtime each)", ylabel="ms",
           title=f"Concurrent SDK clients on {row.get('cpus', '?')} cores", ylim=(0, None))
    right = ax.twinx()
    right.plot(clients, [p["rss_mb"] for p in points], "s--", color="tab:green",
               label="RSS per runtime")
    right.set(ylabel="RSS per runtime, MB (median)",
              ylim=(0, 1.5 * max(p["rss_mb"] for p in points)))  # clear of the legend
    _legend(ax, right, "upper left")
    return fig


def _sessions(plt: Any, row: Row) -> Any:
    points = row["points"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogx([p["sessions"] for p in points], [p["turns_per_s"] for p in points], "o-")
    ax.set(xlabel="sessions prompted at once (one runtime)", ylabel="turns completed per s",
           title="Runtime throughput against concurrent sessions", ylim=(0, None))
    return fig


PLOTS: dict[str, tuple[str, Callable[[Any, Row], Any]]] = {
    "compose_scaling": ("compose-vs-layers", _compose),
    "sessions_db_scaling": ("sessions-db-vs-size", _sessions_db),
    "sdk_initialize": ("start-to-ready-per-carrier", _carriers),
    "sdk_clients_scaling": ("concurrent-clients", _clients),
    "sdk_sessions_throughput": ("throughput-vs-sessions", _sessions),
}


def render(document: dict[str, Any], outdir: Path) -> tuple[dict[str, Path], str | None]:
    """Draw every plot the document has data for into ``outdir``; the files by title, and
    a note for the report when plots were skipped."""
    try:
        import matplotlib
    except ImportError:
        return {}, "Plots skipped: matplotlib is not installed (`pip install matplotlib`)."
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(document)
    figures: dict[str, Path] = {}
    failed: list[str] = []
    for name, (stem, draw) in PLOTS.items():
        row = rows.get(name)
        if row is None or not (row.get("points") or row.get("samples_ms")):
            continue
        outdir.mkdir(parents=True, exist_ok=True)
        try:
            fig = draw(plt, row)
            path = outdir / f"{stem}.png"
            fig.savefig(path, dpi=100, bbox_inches="tight")
        except Exception as exc:  # a plot is a bonus: never lose the report to one
            failed.append(f"{stem} ({type(exc).__name__}: {exc})")
            continue
        finally:
            plt.close("all")
        figures[stem] = path
    if failed:
        return figures, "Plots not drawn: " + "; ".join(failed) + "."
    return figures, None if figures else "No plots: this run has no series to draw."
