"""``scripts/bench.py``'s command line: select, run, and write the JSON document and report.

The JSON document goes to stdout unless ``--json PATH`` says otherwise (AGENTS.md's
"benchmarks" button parses stdout); the Markdown table goes to stderr with ``--quick`` or
``--table``, and to a file with ``--markdown PATH`` (plots beside it). A benchmark that
raises reports each of its rows as an error (not measured), so one fault does not lose a
long run; ``--render JSON`` redraws the report from a saved document without running
anything. The exit status is 0 only when the verdict is ``met``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchlib import anchors, carrier, plots, report
from benchlib.procs import PythonPass, installed_environ
from benchlib.registry import (
    BENCHMARKS,
    Benchmark,
    Options,
    Result,
    counts,
    verdict,
    with_python_pass,
)

SCHEMA = 2  # the result document's layout; --render refuses others
# Environment variables that change what is measured, so the recorded command keeps them.
_COMMAND_ENV = ("DSH_RUNTIME_BIN",)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench.py", description="Run dsh's benchmarks; one JSON document on stdout.")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME",
                        help="run only this benchmark (repeatable; includes full-run series)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions, no scaling series; prints the table")
    parser.add_argument("--list", action="store_true",
                        help="list the benchmarks and their rows, and exit")
    parser.add_argument("--json", metavar="PATH", help="write the JSON document here, not stdout")
    parser.add_argument("--markdown", metavar="PATH",
                        help="write the Markdown report here, its plots in PATH's stem folder")
    parser.add_argument("--table", action="store_true", help="print the table to stderr")
    parser.add_argument("--timeout", type=int, default=900, metavar="SECONDS",
                        help="fail a benchmark still running after this long (default 900)")
    parser.add_argument("--render", metavar="JSON",
                        help="run nothing: render --markdown/--table from a saved document")
    parser.add_argument("--with-anchors", action="store_true",
                        help="measure the anchor SDKs too, from a venv created on first use")
    parser.add_argument("--anchors-venv", metavar="DIR", type=Path, default=anchors.DEFAULT_VENV,
                        help="the anchors' venv (default ~/.cache/dsh-bench/anchors)")
    wheel = parser.add_mutually_exclusive_group()
    wheel.add_argument("--wheel", metavar="PATH", type=Path,
                       help="the dsh-runtime-bin wheel to weigh and start (default: the "
                            "newest in wheelhouse/)")
    wheel.add_argument("--build-wheel", action="store_true",
                       help="build (and smoke-test) the runtime wheel into wheelhouse/ first")
    return parser


def listing() -> str:
    """Each benchmark (name, first docstring sentence, whether full runs only), and under
    it each row it reports with its target."""
    lines = []
    for bench in BENCHMARKS.values():
        doc = " ".join((bench.func.__doc__ or "").split())
        first = doc.split(". ")[0].rstrip(".")
        lines.append(f"{bench.name}\t{first}" + ("\t(full run only)" if bench.full_only
                                                   else ""))
        for metric in bench.metrics:
            stretch = " (stretch)" if metric.stretch else ""
            lines.append(f"  {metric.name}\t{metric.op} {metric.target:g} {metric.unit}"
                         f"{stretch}")
    return "\n".join(lines) + "\n"


def selected(only: list[str] | None, quick: bool) -> list[str]:
    """The benchmarks to run, in registry order: ``--only`` ones, else all but the scaling
    series in a quick run."""
    if only:
        return [name for name in BENCHMARKS if name in only]
    return [name for name in BENCHMARKS if not (quick and BENCHMARKS[name].full_only)]


def _run_one(bench: Benchmark, opts: Options, timeout: int) -> list[Result]:
    """Run one benchmark; its rows, each checked against the declared ones. A fault, a
    stall past ``timeout`` seconds or rows other than declared make every row an error."""

    def stalled(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {timeout} s")

    t0 = time.perf_counter()
    alarm = hasattr(signal, "SIGALRM")  # POSIX: elsewhere a stalled row is not cut short
    previous = signal.signal(signal.SIGALRM, stalled) if alarm else None
    if alarm:
        signal.alarm(timeout)
    try:
        returned = bench.func(opts)
        rows = returned if isinstance(returned, list) else [returned]
        names = [row.get("name") for row in rows]
        declared = [metric.name for metric in bench.metrics]
        if names != declared:
            raise RuntimeError(f"returned rows {names}, declared {declared}")
    except Exception as exc:  # any fault becomes error rows; the run goes on
        traceback.print_exc(file=sys.stderr)
        rows = [metric.error(f"{type(exc).__name__}: {exc}") for metric in bench.metrics]
    finally:
        if alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    seconds = round(time.perf_counter() - t0, 1)
    for row in rows:
        row["seconds"] = seconds
    return rows


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temp file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make a report only root can read
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks and write the document; exit 0 only on ``met``."""
    args = _parser().parse_args(argv)
    if args.list:
        sys.stdout.write(listing())
        return 0
    if args.render:
        document = json.loads(Path(args.render).read_text(encoding="utf-8"))
        if document.get("schema") != SCHEMA:
            print(f"bench.py: {Path(args.render).name}: not a schema-{SCHEMA} result document "
                  "(written by an older bench.py, without verdicts); run the benchmarks "
                  "again to get one", file=sys.stderr)
            return 2
    else:
        document = run(args, argv if argv is not None else sys.argv[1:])
        if not args.json:
            sys.stdout.write(json.dumps(document, indent=2) + "\n")
    if args.markdown:
        path = Path(args.markdown)
        figures, note = plots.render(document, path.parent / path.stem)
        write_atomic(path, report.markdown(
            document, {k: os.path.relpath(v, path.parent) for k, v in figures.items()}, note))
    if args.quick or args.table:
        sys.stderr.write(report.table(document) + "\n\n" + report.headline(document) + "\n")
    return 0 if document["verdict"] == "met" else 1


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Run the benchmarks ``args`` select; the result document. With ``--json`` the file
    is rewritten after each benchmark (``complete`` false until the last), so a long run
    cut short still leaves what it measured."""
    names = selected(args.only, args.quick)
    env = None
    if args.with_anchors and any(BENCHMARKS[name].anchors for name in names):
        env = anchors.ensure(args.anchors_venv.expanduser())
    wheel = carrier.find_wheel(args.wheel, args.build_wheel)
    opts = Options(quick=args.quick, anchors=env, wheel=wheel)
    machine = report.machine()
    started = time.time()
    results: list[Result] = []
    yardstick: list[float] = []
    bracket = 3 if args.quick else 5
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        for name in names:
            bench = BENCHMARKS[name]
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            # python -c pass just before and after: the yardstick of every time-valued
            # row that did not sample it in its own loop.
            around = PythonPass(installed_environ(tmp), tmp)
            around.sample(bracket)
            rows = _run_one(bench, opts, args.timeout)
            around.sample(bracket)
            yardstick += around.samples
            timed = {metric.name for metric in bench.metrics if metric.timed}
            for row in rows:
                if row["name"] in timed and row.get("median") is not None \
                        and "python_pass_ms" not in row:
                    with_python_pass(row, around.median_ms, source="bracketing")
            results += rows
            if args.json:
                write_atomic(Path(args.json), json.dumps(
                    {**_document(args, argv, env, wheel, machine, started, results, yardstick),
                     "complete": False}, indent=2) + "\n")
    machine["load_average_end"] = report.load_average()
    document = _document(args, argv, env, wheel, machine, started, results, yardstick)
    if args.json:
        write_atomic(Path(args.json), json.dumps(document, indent=2) + "\n")
    return document


def _document(args: argparse.Namespace, argv: list[str], env: anchors.AnchorEnv | None,
              wheel: carrier.RuntimeWheel | None, machine: dict[str, Any], started: float,
              results: list[Result], yardstick: list[float]) -> dict[str, Any]:
    document = {
        "schema": SCHEMA,
        "verdict": verdict(results),
        "counts": counts(results),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "command": " ".join([*(f"{k}={os.environ[k]}" for k in _COMMAND_ENV if os.environ.get(k)),
                             "python scripts/bench.py", *argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "python_pass_ms": round(statistics.median(yardstick) * 1000, 2) if yardstick else None,
        "machine": machine,
        "anchors": None if env is None else {"versions": env.versions},
        "runtime_wheel": None if wheel is None else (wheel.label if wheel.path else
                                                      f"none: {wheel.reason}"),
        "results": results,
        "complete": True,
    }
    return report.scrub(document)
