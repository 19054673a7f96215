"""``scripts/bench.py``'s report machinery, on fixed documents and trivial benchmarks.

No real benchmark runs here (they take minutes and measure the machine, not the code):
the table and report are rendered from a fixed result document, the command line is run
as a process with a registry holding only tiny benchmarks, and ``--list`` is run on the
real registry.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture()
def benchlib(monkeypatch: pytest.MonkeyPatch):
    """The ``benchlib`` package, importable as ``bench.py`` imports it."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import benchlib.registry
    import benchlib.report

    return benchlib


def _document(benchlib) -> dict:
    result = benchlib.registry.result
    return {
        "command": "python scripts/bench.py --with-anchors --markdown docs/benchmarks.md",
        "date": "2026-12-02 18:00 UTC", "duration_s": 612.0, "quick": False,
        "machine": {"cpu": "AMD EPYC", "cores": 2, "ram_gb": 23.5, "os": "Debian 12",
                    "kernel": "6.1", "python": "CPython 3.11.7",
                    "load_average_start": [1.5, 1.0, 0.8], "load_average_end": [4.0, 2.0, 1.0]},
        "anchors": {"venv": "/x", "versions": {"openai-codex": "0.163.0"}},
        "results": [
            result("sdk_initialize", 120.0, "ms", 150, runs=21, exe="dsh-runtime-bin not installed",
                   samples_ms={"sdk (python)": [130.0, 120.0, 110.0],
                               "openai-codex": [250.0, 240.0, 230.0]},
                   anchor_runtimes={"openai-codex": "codex app-server"},
                   anchors={"deepseek-harness-sdk": 1000.0, "openai-codex": 240.0,
                            "claude-agent-sdk": "needs a key"}),
            result("sdk_throughput", 9000.0, "requests/s", 10000, higher_is_better=True),
            {"name": "broken", "ok": False, "error": "RuntimeError: runtime | died"},
            result("sessions_db_scaling", 1.1, "ratio", 2, points={
                "10%": {"append_us": 50.0, "resume_ms": 1.0, "events": 10000},
                "100%": {"append_us": 55.0, "resume_ms": 1.1, "events": 100000}}),
        ],
    }


def test_result_row_computes_ok_and_ratios_only_for_measured_anchors(benchlib) -> None:
    result = benchlib.registry.result
    row = result("x", 50.0, "ms", 100, runs=3, anchors={"a": 200.0, "b": "not installed"})
    assert row["median"] == 50.0 and row["ok"] and row["runs"] == 3
    assert row["ratios"] == {"a": 0.25}
    assert not result("x", 100.0, "ms", 100)["ok"]
    assert result("rate", 100.0, "1/s", 100, higher_is_better=True)["ok"]
    assert not result("rate", 99.0, "1/s", 100, higher_is_better=True)["ok"]


def test_table_leads_with_ratios_and_marks_misses_and_errors(benchlib) -> None:
    lines = benchlib.report.table(_document(benchlib)).splitlines()
    assert lines[0].startswith("| benchmark | dsh / deepseek-harness-sdk | dsh / openai-codex |")
    init = next(line for line in lines if line.startswith("| sdk_initialize "))
    cells = [c.strip() for c in init.strip("|").split("|")]
    assert cells[1:4] == ["**0.12** (1,000 ms)", "**0.5** (240 ms)", "—"]
    assert cells[4:] == ["120 ms", "< 150 ms", "yes", "21"]
    rate = next(line for line in lines if line.startswith("| sdk_throughput "))
    assert "≥ 10,000 requests/s" in rate and "**NO**" in rate
    broken = next(line for line in lines if line.startswith("| broken "))
    assert "**error**: RuntimeError: runtime \\| died" in broken
    assert all(line.count(" | ") == lines[0].count(" | ") for line in lines if "broken" not in
               line)


def test_markdown_describes_machine_command_series_and_skipped_plots(benchlib) -> None:
    text = benchlib.report.markdown(_document(benchlib), {}, "Plots skipped: no matplotlib.")
    assert "`python scripts/bench.py --with-anchors --markdown docs/benchmarks.md`" in text
    assert "AMD EPYC, 2 cores; RAM 23.5 GB" in text
    assert "at start [1.5, 1.0, 0.8], at end [4.0, 2.0, 1.0]: the machine was shared" in text
    quiet = _document(benchlib)
    quiet["machine"]["load_average_end"] = [0.2, 0.2, 0.2]
    quiet["machine"]["load_average_start"] = [0.9, 0.5, 0.5]
    assert "at end [0.2, 0.2, 0.2].\n" in benchlib.report.markdown(quiet, {}, None)
    assert "`openai-codex` 0.163.0" in text
    assert "| events | append_us | resume_ms |" in text and "| 100,000 | 55 | 1.1 |" in text
    assert "Plots skipped: no matplotlib." in text
    assert ("- `sdk_initialize`: medians: sdk (python) 120 ms, codex app-server 240 ms; "
            "exe carrier: `dsh-runtime-bin not installed`") in text
    with_plot = benchlib.report.markdown(_document(benchlib), {"a": "benchmarks/a.png"}, None)
    assert "![a](benchmarks/a.png)" in with_plot


def test_list_names_every_benchmark_and_flags_the_scaling_series() -> None:
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--list"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    rows = {line.split("\t")[0]: line for line in out.splitlines()}
    for name in ("compose_100x50", "sdk_import", "sdk_initialize", "runtime_idle_rss",
                 "sessions_db_scaling", "install_size", "mcp_tool_overhead",
                 "session_lease_acquire"):
        assert name in rows and not rows[name].endswith("(full run only)")
    for name in ("compose_scaling", "sdk_sessions_throughput", "sdk_clients_scaling"):
        assert rows[name].endswith("\t(full run only)")
    assert all(len(line.split("\t")) >= 2 for line in rows.values())


# A registry of two trivial benchmarks (one of them full-run only, one failing on demand)
# driven through the real command line.
_DRIVER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from benchlib.registry import benchmark, result

    @benchmark("tiny")
    def tiny(opts):
        if os.environ.get("TINY_FAIL"):
            raise RuntimeError("tiny broke")
        if os.environ.get("TINY_STALL"):
            time.sleep(60)
        return result("tiny", 1.5 if opts.quick else 2.5, "ms", 10, runs=3)

    @benchmark("tiny_series", full_only=True)
    def tiny_series(opts):
        return result("tiny_series", 1.0, "ratio", 2, points=[{"layers": 1, "ms": 1.0},
                      {"layers": 10, "ms": 9.0}])

    from benchlib.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def _drive(*args: str, fail: bool = False, stall: bool = False,
           ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", **({"TINY_FAIL": "1"} if fail else {}),
           **({"TINY_STALL": "1"} if stall else {})}
    return subprocess.run([sys.executable, "-c", _DRIVER, str(SCRIPTS), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_quick_prints_json_on_stdout_and_the_table_on_stderr() -> None:
    run = _drive("--quick")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert [r["name"] for r in document["results"]] == ["tiny"]  # the series is full-only
    assert document["quick"] and document["ok"] and document["results"][0]["median"] == 1.5
    assert document["command"] == "python scripts/bench.py --quick"
    assert "| tiny | — | — | — | 1.5 ms | < 10 ms | yes | 3 |" in run.stderr


def test_full_run_writes_json_and_markdown_files_atomically(tmp_path: Path) -> None:
    report = tmp_path / "docs" / "benchmarks.md"
    run = _drive("--json", str(tmp_path / "out.json"), "--markdown", str(report))
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""  # the document went to the file
    document = json.loads((tmp_path / "out.json").read_text())
    assert [r["name"] for r in document["results"]] == ["tiny", "tiny_series"]
    text = report.read_text()
    assert "| tiny_series |" in text and "## Machine" in text
    assert "No plots: this run has no series to draw." in text
    assert sorted(p.name for p in report.parent.iterdir()) == ["benchmarks.md"]  # no temp file


def test_a_failing_benchmark_becomes_an_error_row_and_exit_1() -> None:
    run = _drive("--only", "tiny", "--only", "tiny_series", fail=True)
    assert run.returncode == 1
    document = json.loads(run.stdout)
    rows = {r["name"]: r for r in document["results"]}
    assert rows["tiny"] == {"name": "tiny", "ok": False, "error": "RuntimeError: tiny broke",
                            "seconds": rows["tiny"]["seconds"]}
    assert rows["tiny_series"]["ok"] and not document["ok"]
    assert "tiny broke" in run.stderr  # the traceback, for whoever runs it


def test_render_redraws_the_report_from_a_saved_document(benchlib, tmp_path: Path) -> None:
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(_document(benchlib)))
    report = tmp_path / "benchmarks.md"
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--render", str(saved),
                          "--markdown", str(report), "--table"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1  # the saved document missed a target
    assert run.stdout == "" and "| sdk_initialize | **0.12** (1,000 ms) |" in run.stderr
    assert "Generated by `python scripts/bench.py --with-anchors" in report.read_text()


def test_a_stalled_benchmark_times_out_and_the_json_file_keeps_each_row(
        tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    run = _drive("--timeout", "1", "--json", str(out), stall=True)
    assert run.returncode == 1
    document = json.loads(out.read_text())
    assert document["complete"] and [r["name"] for r in document["results"]] == [
        "tiny", "tiny_series"]
    assert document["results"][0]["error"] == "TimeoutError: still running after 1 s"
    assert document["results"][1]["ok"]


def test_plots_are_drawn_as_png_or_skipped_with_a_note(benchlib, tmp_path: Path) -> None:
    import benchlib.plots

    document = _document(benchlib)
    document["results"].append(benchlib.registry.result(
        "compose_scaling", 1.0, "ratio", 2, points=[
            {"layers": 1, "ms": 1.0}, {"layers": 10, "ms": 9.0}, {"layers": 100, "ms": 95.0}]))
    pytest.importorskip("matplotlib")
    figures, note = benchlib.plots.render(document, tmp_path)
    assert note is None
    assert sorted(figures) == ["compose-vs-layers", "sessions-db-vs-size",
                              "start-to-ready-per-carrier"]
    for path in figures.values():
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_plots_without_matplotlib_say_skipped(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        sys.modules["matplotlib"] = None  # an interpreter where it is not installed
        from pathlib import Path
        from benchlib import plots
        print(plots.render({"results": []}, Path(sys.argv[2])))
    """)
    out = subprocess.run([sys.executable, "-c", code, str(SCRIPTS), str(tmp_path / "p")],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert "Plots skipped: matplotlib is not installed" in out
    assert not (tmp_path / "p").exists()


def test_scaled_target_takes_the_smallest_slowdown_any_anchor_shows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import bench

    scaled = bench._scaled_target(150, {"deepseek-harness-sdk": 1350.0, "openai-codex": 330.0,
                                        "claude-agent-sdk": 500.0})
    assert scaled["machine_scale"] == 1.5  # DeepSeek 1.5x, Codex 3x: the smaller counts
    assert scaled["scaled_target_ms"] == 225.0
    faster = bench._scaled_target(150, {"openai-codex": 55.0})
    assert faster["scaled_target_ms"] == 75.0  # a faster machine tightens the target
    assert bench._scaled_target(150, {}) == {}
