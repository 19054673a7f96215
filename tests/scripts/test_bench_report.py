"""``scripts/bench.py``'s machinery: rows, verdicts, the runner, the report; no real benchmark.

Real benchmarks take minutes and measure the machine, not the code, so none runs here but
``runtime_wheel`` given a wheel that does not exist (it is skipped at once). The row and
verdict logic is tested as functions, the runner as a process over a registry of tiny
benchmarks, the report on fixed documents, and AGENTS.md's benchmark check is run as the
shell pipeline it is.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


@pytest.fixture()
def benchlib(monkeypatch: pytest.MonkeyPatch):
    """The ``benchlib`` package, importable as ``bench.py`` imports it."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import benchlib.registry
    import benchlib.report

    return benchlib


def _metric(benchlib, name: str = "x", unit: str = "ms", op: str = "<", target: float = 100,
            **kw):
    return benchlib.registry.Metric(name, unit, op, target, about="what it measures",
                                    changes="what moves it", **kw)


# -- rows and verdicts -----------------------------------------------------------------------


def test_a_measured_row_meets_or_misses_its_target_by_its_comparison(benchlib) -> None:
    below = _metric(benchlib, op="<", target=100)
    assert below.measure(99.9)["status"] == "met" and below.measure(99.9)["ok"] is True
    assert below.measure(100.0)["ok"] is False and below.measure(100.0)["status"] == "missed"
    at_most = _metric(benchlib, unit="ratio", op="<=", target=1.0)
    assert at_most.measure(1.0)["ok"] and not at_most.measure(1.001)["ok"]
    at_least = _metric(benchlib, unit="requests/s", op=">=", target=10000)
    assert at_least.measure(10000)["ok"] and not at_least.measure(9999)["ok"]


def test_a_failed_check_can_only_tighten_a_row(benchlib) -> None:
    metric = _metric(benchlib)
    assert metric.measure(1.0, ok=False)["ok"] is False  # e.g. a frame echoed altered
    with pytest.raises(ValueError, match="ok comes from the target"):
        metric.measure(1.0, ok=True)


def test_a_skipped_row_has_no_value_and_no_pass(benchlib) -> None:
    row = _metric(benchlib).skip("no runtime wheel")
    assert row["ok"] is None and row["median"] is None and row["status"] == "skipped"
    assert row["skipped"] == "no runtime wheel" and row["changes"] == "what moves it"
    with pytest.raises(ValueError, match="says why"):
        _metric(benchlib).skip("  ")


def test_a_row_must_say_what_it_measures_and_what_changes_it(benchlib) -> None:
    with pytest.raises(ValueError, match="what changes it"):
        benchlib.registry.Metric("x", "ms", "<", 1, about="a", changes="")
    with pytest.raises(ValueError, match="op"):
        benchlib.registry.Metric("x", "ms", "≤", 1, about="a", changes="b")


def test_verdict_is_met_only_when_every_row_met(benchlib) -> None:
    verdict = benchlib.registry.verdict
    met, missed = _metric(benchlib).measure(1), _metric(benchlib).measure(500)
    skipped, error = _metric(benchlib).skip("why"), _metric(benchlib).error("boom")
    assert verdict([met, met]) == "met"
    assert verdict([met, skipped]) == "incomplete"
    assert verdict([met, error]) == "incomplete"
    assert verdict([met, skipped, missed]) == "missed"  # a known miss outranks a gap
    assert verdict([]) == "incomplete"
    assert benchlib.registry.counts([met, missed, skipped, error, met]) == {
        "met": 2, "missed": 1, "skipped": 1, "error": 1}


def test_python_pass_ratio_is_the_value_over_the_yardstick_in_ms(benchlib) -> None:
    row = _metric(benchlib, unit="ms").measure(120.0, python_pass_ms=40.0)
    assert row["python_pass_ms"] == 40.0 and row["vs_python_pass"] == 3.0
    assert row["python_pass_source"] == "interleaved"
    seconds = _metric(benchlib, unit="s", target=10).measure(2.0, python_pass_ms=40.0)
    assert seconds["vs_python_pass"] == 50.0  # 2 s is 2,000 ms
    ratio = _metric(benchlib, unit="ratio", op="<=", target=1).measure(0.9,
                                                                     python_pass_ms=40.0)
    assert ratio["python_pass_ms"] == 40.0 and "vs_python_pass" not in ratio
    assert _metric(benchlib, unit="ms/step").timed and not _metric(benchlib, unit="MB").timed


def test_anchor_ratios_only_for_measured_anchors(benchlib) -> None:
    row = _metric(benchlib).measure(50.0, anchors={"a": 200.0, "b": "not installed"})
    assert row["ratios"] == {"a": 0.25} and row["anchors"]["b"] == "not installed"
    assert row["anchors_unit"] == "ms"
    # a ratio-valued row compares the anchors with the dsh figure behind the ratio
    ratio = _metric(benchlib, unit="ratio", op="<=", target=0.2).measure(
        0.1, anchors={"a": 1000.0}, compared=(100.0, "ms"))
    assert ratio["ratios"] == {"a": 0.1} and ratio["anchors_unit"] == "ms"


@pytest.mark.parametrize("count", [2, 3, 4, 5])
def test_interleaving_puts_each_side_after_each_other_equally_often(benchlib,
                                                                    count: int) -> None:
    from benchlib.procs import balanced

    sides = [f"side{i}" for i in range(count)]
    rounds = [balanced(sides, turn) for turn in range(count if count % 2 == 0 else 2 * count)]
    assert all(sorted(order) == sides for order in rounds)
    firsts = [order[0] for order in rounds]
    assert len({firsts.count(side) for side in sides}) == 1
    pairs = [pair for order in rounds for pair in itertools.pairwise(order)]
    expected = {(a, b) for a in sides for b in sides if a != b}
    assert set(pairs) == expected and len({pairs.count(p) for p in expected}) == 1
    assert balanced(sides, len(rounds)) == rounds[0] and balanced([], 3) == []


def test_registration_refuses_a_row_declared_twice(benchlib) -> None:
    registry = benchlib.registry
    metric = _metric(benchlib, name="test_only_unique_row")
    registry.benchmark("test_only_bench_a", metric)(lambda opts: metric.measure(1))
    try:
        with pytest.raises(ValueError, match="row names used twice"):
            registry.benchmark("test_only_bench_b", metric)(lambda opts: metric.measure(1))
        with pytest.raises(ValueError, match="declares no row"):
            registry.benchmark("test_only_bench_c")
    finally:
        registry.BENCHMARKS.pop("test_only_bench_a", None)
        registry._ROW_NAMES.discard("test_only_unique_row")


# -- the report ------------------------------------------------------------------------------


def _document(benchlib, load_start: float = 1.5) -> dict:
    m = _metric(benchlib)
    init = benchlib.registry.Metric(
        "sdk_initialize", "ms", "<", 150, about="spawn to initialize",
        changes="the runtime's boot")
    return {
        "schema": 2, "verdict": "missed",
        "command": "python scripts/bench.py --with-anchors --markdown docs/benchmarks.md",
        "date": "2026-12-02 18:00 UTC", "duration_s": 612.0, "quick": False,
        "python_pass_ms": 40.0, "runtime_wheel": "dsh_runtime_bin-0.1.0.whl (wheelhouse/)",
        "machine": {"cpu": "AMD EPYC", "cores": 2, "ram_gb": 23.5, "os": "Debian 12",
                    "kernel": "6.1", "python": "CPython 3.11.7",
                    "load_average_start": [load_start, 1.0, 0.8],
                    "load_average_end": [0.2, 0.2, 0.2]},
        "anchors": {"versions": {"openai-codex": "0.163.0"}},
        "results": [
            init.measure(120.0, runs=21, python_pass_ms=40.0,
                         samples_ms={"sdk (python)": [130.0, 120.0, 110.0],
                                     "openai-codex": [250.0, 240.0, 230.0]},
                         anchor_runtimes={"openai-codex": "codex app-server"},
                         anchors={"deepseek-harness-sdk": 1000.0, "openai-codex": 240.0,
                                  "claude-agent-sdk": "needs a key"}),
            _metric(benchlib, name="rate", unit="requests/s", op=">=",
                    target=10000).measure(9000.0),
            {**m.error("RuntimeError: runtime | died"), "name": "broken"},
            _metric(benchlib, name="runtime_wheel", unit="MB", target=15).skip(
                "no runtime wheel in wheelhouse/"),
            _metric(benchlib, name="sessions_db_scaling", unit="ratio", target=2).measure(
                1.1, points={"10%": {"append_us": 50.0, "resume_ms": 1.0, "events": 10000},
                             "100%": {"append_us": 55.0, "resume_ms": 1.1,
                                      "events": 100000}}),
        ],
    }


def test_table_shows_each_rows_verdict_its_yardstick_and_the_anchor_ratios(benchlib) -> None:
    lines = benchlib.report.table(_document(benchlib)).splitlines()
    assert lines[0] == ("| row | result | dsh median | target | python -c pass | median / pass "
                        "| dsh / deepseek-harness-sdk | dsh / openai-codex "
                        "| dsh / claude-agent-sdk | runs |")
    cells = {line.split(" | ")[0].strip("| "): [c.strip() for c in line.strip("|").split(" | ")]
             for line in lines[2:]}
    assert cells["sdk_initialize"][1:] == ["met", "120 ms", "< 150 ms", "40 ms", "3x",
                                           "**0.12** (1,000 ms)", "**0.5** (240 ms)", "—", "21"]
    assert cells["rate"][1] == "**missed**" and cells["rate"][3] == "≥ 10,000 requests/s"
    assert cells["runtime_wheel"][1:3] == ["skipped: no runtime wheel in wheelhouse/", "—"]
    broken = next(line for line in lines if line.startswith("| broken "))
    assert "**error**: RuntimeError: runtime \\| died" in broken
    assert all(line.count(" | ") == lines[0].count(" | ") for line in lines if "broken" not in
               line)


def test_markdown_leads_with_the_verdict_and_says_when_the_run_started_loaded(
        benchlib) -> None:
    text = benchlib.report.markdown(_document(benchlib, load_start=1.5), {}, None)
    head = text.split("## How to read this")[0]
    assert "Verdict: **missed**: 2 met; 1 missed (rate); 1 skipped (runtime_wheel); " \
           "1 error (broken)." in head
    assert "**This run started on a loaded machine**: 1-minute load average 1.5 on 2 cores" \
           in head
    assert "at least 0.5 x the cores, here 1" in head
    quiet = benchlib.report.markdown(_document(benchlib, load_start=0.3), {}, None)
    assert "loaded machine" not in quiet.split("## How to read")[0]
    assert "quiet at the start (1-minute load average 0.3 on 2 cores)" in quiet


def test_markdown_says_per_row_what_it_measured_and_what_would_change_it(benchlib) -> None:
    text = benchlib.report.markdown(_document(benchlib), {"a": "benchmarks/a.png"},
                                    "Plots skipped: no matplotlib.")
    notes = text.split("## Each row: what it measured, and what would change it")[1]
    assert ("- **`sdk_initialize`**: met; 120 ms = 3x `python -c pass` (40 ms, interleaved)."
            in notes)
    assert "  *What would change it:* the runtime's boot" in notes
    assert "- **`runtime_wheel`**: skipped (no runtime wheel in wheelhouse/)." in notes
    assert "medians: sdk (python) 120 ms, codex app-server 240 ms" in notes
    assert "- `python -c pass` in this run: 40 ms" in text
    assert "`openai-codex` 0.163.0" in text and "![a](benchmarks/a.png)" in text
    assert "| events | append_us | resume_ms |" in text and "| 100,000 | 55 | 1.1 |" in text
    assert "Plots skipped: no matplotlib." in text


def test_scrub_leaves_no_machine_path(benchlib, tmp_path: Path) -> None:
    import tempfile

    document = {"command": f"python scripts/bench.py --json {tmp_path}/out.json",
                "error": f"RuntimeError: probe {sys.executable} failed in "
                         f"{tempfile.gettempdir()}/dsh-bench-x/home",
                "rows": [{"exe": f"{ROOT}/examples/offline/patch.yml"},
                         {"note": f"{Path.home()}/.cache/dsh-bench/anchors, /srv/x/y.whl,"
                                  " /opt/tool/bin/rg; GET /api/tools"}]}
    clean = json.dumps(benchlib.report.scrub(document), ensure_ascii=False)
    assert not re.search(r"(?<![\w.~<>-])/(root|home|tmp|work|usr|opt)/", clean), clean
    assert "examples/offline/patch.yml" in clean and "GET /api/tools" in clean
    assert "probe python failed in <tmp>/dsh-bench-x/home" in clean
    assert "…/y.whl" in clean and "…/rg" in clean


# -- the runner, as a process ----------------------------------------------------------------

# A registry of tiny benchmarks driven through the real command line: a timed row that
# samples no yardstick of its own, a full-run series, and rows that fail, stall, skip or
# return something undeclared on demand.
_DRIVER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from benchlib.registry import Metric, benchmark

    TINY = Metric("tiny", "ms", "<", 10, about="a tiny figure", changes="nothing real")
    SERIES = Metric("tiny_series", "ratio", "<", 2, about="a series", changes="nothing")
    PATHY = Metric("pathy", "MB", "<", 5, about="a size", changes="nothing")

    @benchmark("tiny", TINY)
    def tiny(opts):
        if os.environ.get("TINY_FAIL"):
            raise RuntimeError("tiny broke")
        if os.environ.get("TINY_STALL"):
            time.sleep(60)
        if os.environ.get("TINY_SKIP"):
            return TINY.skip("nothing to measure here")
        if os.environ.get("TINY_UNDECLARED"):
            return SERIES.measure(1.0)
        return TINY.measure(1.5 if opts.quick else 2.5, runs=3)

    @benchmark("tiny_series", SERIES, full_only=True)
    def tiny_series(opts):
        return SERIES.measure(1.0, points=[{"layers": 1, "ms": 1.0},
                                           {"layers": 10, "ms": 9.0}])

    @benchmark("pathy", PATHY)
    def pathy(opts):
        return PATHY.measure(1.0, where=sys.executable + " in " + sys.argv[1])

    from benchlib.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def _drive(*args: str, **flags: bool) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", **{f"TINY_{k.upper()}": "1" for k, v in flags.items()
                                       if v}}
    return subprocess.run([sys.executable, "-c", _DRIVER, str(SCRIPTS), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_quick_prints_the_document_and_attaches_the_yardstick_to_timed_rows() -> None:
    run = _drive("--quick")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["schema"] == 2 and document["verdict"] == "met"
    assert [r["name"] for r in document["results"]] == ["tiny", "pathy"]  # series: full only
    tiny = document["results"][0]
    assert tiny["median"] == 1.5 and tiny["python_pass_source"] == "bracketing"
    assert tiny["python_pass_ms"] > 0 and tiny["vs_python_pass"] > 0
    assert "python_pass_ms" not in document["results"][1]  # MB: not a time
    assert document["python_pass_ms"] > 0 and document["command"] == \
        "python scripts/bench.py --quick"
    assert "| tiny | met | 1.5 ms | < 10 ms |" in run.stderr
    assert "Verdict: **met**: 2 met." in run.stderr


def test_the_document_names_no_machine_path() -> None:
    run = _drive("--only", "pathy")
    document = json.loads(run.stdout)
    assert document["results"][0]["where"] == "python in scripts"  # relative to the checkout
    assert sys.executable not in run.stdout and str(SCRIPTS) not in run.stdout


def test_a_skipped_row_makes_the_run_incomplete_and_exits_1() -> None:
    run = _drive("--only", "tiny", skip=True)
    assert run.returncode == 1
    document = json.loads(run.stdout)
    assert document["verdict"] == "incomplete"
    assert document["counts"] == {"met": 0, "missed": 0, "skipped": 1, "error": 0}
    assert document["results"][0]["ok"] is None


def test_a_failing_benchmark_reports_its_rows_as_errors() -> None:
    run = _drive("--only", "tiny", "--only", "tiny_series", fail=True)
    assert run.returncode == 1
    document = json.loads(run.stdout)
    rows = {r["name"]: r for r in document["results"]}
    assert rows["tiny"]["status"] == "error" and rows["tiny"]["ok"] is None
    assert rows["tiny"]["error"] == "RuntimeError: tiny broke"
    assert rows["tiny_series"]["ok"] and document["verdict"] == "incomplete"
    assert "tiny broke" in run.stderr  # the traceback, for whoever runs it


def test_rows_other_than_declared_are_an_error() -> None:
    document = json.loads(_drive("--only", "tiny", undeclared=True).stdout)
    assert document["results"][0]["name"] == "tiny"
    assert "returned rows ['tiny_series'], declared ['tiny']" in \
        document["results"][0]["error"]


def test_full_run_writes_json_and_markdown_files_atomically(tmp_path: Path) -> None:
    report = tmp_path / "docs" / "benchmarks.md"
    run = _drive("--json", str(tmp_path / "out.json"), "--markdown", str(report))
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""  # the document went to the file
    document = json.loads((tmp_path / "out.json").read_text())
    assert [r["name"] for r in document["results"]] == ["tiny", "tiny_series", "pathy"]
    text = report.read_text()
    assert "| tiny_series | met |" in text and "## Machine" in text
    assert "No plots: this run has no series to draw." in text
    assert sorted(p.name for p in report.parent.iterdir()) == ["benchmarks.md"]  # no temp file


def test_a_stalled_benchmark_times_out_and_the_json_file_keeps_each_row(
        tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    run = _drive("--timeout", "1", "--json", str(out), stall=True)
    assert run.returncode == 1
    document = json.loads(out.read_text())
    assert document["complete"] and [r["name"] for r in document["results"]] == [
        "tiny", "tiny_series", "pathy"]
    assert document["results"][0]["error"] == "TimeoutError: still running after 1 s"
    assert document["results"][1]["ok"]


def test_render_redraws_a_saved_document_and_refuses_an_old_one(benchlib,
                                                               tmp_path: Path) -> None:
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(_document(benchlib)))
    report = tmp_path / "benchmarks.md"
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--render", str(saved),
                          "--markdown", str(report), "--table"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1  # the saved document missed a target
    assert run.stdout == "" and "| sdk_initialize | met | 120 ms |" in run.stderr
    assert "Generated by `python scripts/bench.py --with-anchors" in report.read_text()
    old = {k: v for k, v in _document(benchlib).items() if k not in ("schema", "verdict")}
    saved.write_text(json.dumps(old))
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--render", str(saved),
                          "--table"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "not a schema-2 result document" in run.stderr


def test_list_names_every_benchmark_its_rows_and_the_scaling_series() -> None:
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--list"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    benches = {line.split("\t")[0]: line for line in out.splitlines()
               if not line.startswith(" ")}
    rows = {line.split("\t")[0].strip(): line for line in out.splitlines()
            if line.startswith("  ")}
    for name in ("compose_100x50", "sdk_import", "sdk_start_to_ready", "sdk_initialize",
                 "runtime_idle_rss", "install_size", "runtime_wheel", "mcp_tool_overhead",
                 "session_lease_acquire", "provider_chunk_overhead_openai",
                 "provider_chunk_overhead_anthropic", "provider_chunk_overhead_responses"):
        assert name in benches and not benches[name].endswith("(full run only)")
    for name in ("compose_scaling", "sdk_sessions_throughput", "sdk_clients_scaling"):
        assert benches[name].endswith("\t(full run only)")
    assert rows["compose_100x50_cold"].endswith("< 150 ms")
    assert rows["compose_100x50_warm"].endswith("< 100 ms")
    assert rows["sdk_start_to_ready"].endswith("<= 1 ratio")
    assert rows["sdk_initialize_overhead"].endswith("< 50 ms (stretch)")
    assert rows["sdk_end_to_end"].endswith("<= 0.2 ratio (stretch)")
    assert rows["session_lease_acquire"].endswith("< 5 ms")
    assert rows["provider_chunk_overhead_anthropic"].endswith("< 50 µs")
    assert rows["provider_chunk_overhead_responses"].endswith("< 50 µs")


# -- AGENTS.md's benchmark check -------------------------------------------------------------


def _agents_check() -> tuple[str, str]:
    """AGENTS.md's "benchmarks" button, split at the pipe: the producer and the check."""
    text = (ROOT / "AGENTS.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| benchmarks"))
    command = re.search(r"`(.+?)`", row.split(" | ")[1]).group(1).replace("\\|", "|")
    producer, check = command.split(" | ", 1)
    assert producer.startswith("python3 scripts/bench.py "), producer
    return producer, check


def test_agents_benchmark_check_fails_on_a_skipped_row(tmp_path: Path) -> None:
    # The button's own producer, narrowed to one benchmark that skips at once (the wheel
    # named does not exist), piped into the button's check exactly as AGENTS.md has it.
    producer, check = _agents_check()
    missing = tmp_path / "dsh_runtime_bin-0-py3-none-any.whl"
    line = f"{producer} --only runtime_wheel --wheel {missing} | {check}"
    run = subprocess.run(line, shell=True, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0
    assert "AssertionError: ('incomplete', [('runtime_wheel', 'skipped', '--wheel " \
           f"{missing.name}: no such file')])" in run.stderr
    document = subprocess.run(f"{producer} --only runtime_wheel --wheel {missing}",
                              shell=True, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    assert json.loads(document.stdout)["verdict"] == "incomplete"


def test_agents_benchmark_check_passes_a_run_where_every_row_met() -> None:
    _, check = _agents_check()
    driver = subprocess.list2cmdline([sys.executable, "-c", _DRIVER, str(SCRIPTS), "--quick"])
    run = subprocess.run(f"{driver} | {check}", shell=True, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr


# -- plots -----------------------------------------------------------------------------------


def test_plots_are_drawn_as_png_or_skipped_with_a_note(benchlib, tmp_path: Path) -> None:
    import benchlib.plots

    document = _document(benchlib)
    document["results"].append(_metric(benchlib, name="compose_scaling", unit="ratio",
                                       target=2).measure(1.0, points=[
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


# -- the runtime wheel -----------------------------------------------------------------------


def _wheel(path: Path, executable: str = "dsh-runtime-linux-x64") -> Path:
    """A wheel-shaped zip: the payload folder, its manifest, an executable script."""
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("dsh_runtime_bin/runtime.json", json.dumps(
            {"format": 1, "version": "0.1.0", "platform": "linux-x64",
             "executable": executable, "source": {"commit": "a" * 40, "dirty": False}}))
        exe = zipfile.ZipInfo(f"dsh_runtime_bin/{executable}")
        exe.external_attr = 0o100755 << 16
        archive.writestr(exe, "#!/bin/sh\necho frozen \"$@\"\n")
        archive.writestr("dsh_runtime_bin-0.1.0.dist-info/RECORD", "")
    return path


def test_the_wheel_is_found_explicitly_or_in_the_wheelhouse_or_said_missing(
        benchlib, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchlib import carrier

    missing = carrier.find_wheel(tmp_path / "nope.whl", build=False)
    assert missing.path is None and missing.reason == "--wheel nope.whl: no such file"
    monkeypatch.setattr(carrier, "WHEELHOUSE", tmp_path / "wheelhouse")
    empty = carrier.find_wheel(None, build=False)
    assert empty.path is None and empty.reason.startswith("no runtime wheel in wheelhouse/")
    (tmp_path / "wheelhouse").mkdir()
    older = _wheel(tmp_path / "wheelhouse" / "dsh_runtime_bin-0.0.9-py3-none-any.whl")
    newer = _wheel(tmp_path / "wheelhouse" / "dsh_runtime_bin-0.1.0-py3-none-any.whl")
    import os

    os.utime(older, (1, 1))
    found = carrier.find_wheel(None, build=False)
    assert found.path == newer and found.label == f"{newer.name} (wheelhouse/)"
    assert found.manifest()["source"]["commit"] == "a" * 40


def test_the_exe_carrier_is_unpacked_from_the_wheel_and_named_without_its_path(
        benchlib, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchlib import carrier

    monkeypatch.delenv("DSH_RUNTIME_BIN", raising=False)
    wheel = carrier.RuntimeWheel(_wheel(tmp_path / "dsh_runtime_bin-0.1.0-x.whl"), "--wheel")
    exe = carrier.exe_carrier(wheel, tmp_path / "scratch")
    assert exe is not None and exe.label == "exe carrier (dsh_runtime_bin-0.1.0-x.whl)"
    out = subprocess.run([*exe.command, "--version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout == "frozen --version\n"
    monkeypatch.setenv("DSH_RUNTIME_BIN", exe.command[0])
    assert carrier.exe_carrier(wheel, tmp_path / "other").label == \
        "exe carrier (DSH_RUNTIME_BIN)"
