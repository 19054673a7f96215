"""``scripts/bench.py``'s command line: select, run, and write the JSON document and report.

The JSON document goes to stdout unless ``--json PATH`` says otherwise (AGENTS.md's
"benchmarks" button parses stdout); the Markdown table goes to stderr with ``--quick`` or
``--table``, and to a file with ``--markdown PATH`` (plots beside it). A benchmark that
raises becomes a failed row naming the error, so one fault does not lose a long run;
``--render JSON`` redraws the report from a saved document without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchlib import anchors, plots, report
from benchlib.registry import BENCHMARKS, FULL_ONLY, Options, Result

# Environment variables that change what is measured, so the recorded command keeps them.
_COMMAND_ENV = ("DSH_RUNTIME_BIN",)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench.py", description="Run dsh's benchmarks; one JSON document on stdout.")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME",
                        help="run only this benchmark (repeatable; includes full-run series)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions, no scaling series (< 1 min); prints the table")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
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
                        help=f"the anchors' venv (default {anchors.DEFAULT_VENV})")
    return parser


def listing() -> str:
    """One line per benchmark: name, first docstring sentence, whether full runs only."""
    lines = []
    for name, func in BENCHMARKS.items():
        doc = " ".join((func.__doc__ or "").split())
        first = doc.split(". ")[0].rstrip(".")
        lines.append(f"{name}\t{first}" + ("\t(full run only)" if name in FULL_ONLY else ""))
    return "\n".join(lines) + "\n"


def selected(only: list[str] | None, quick: bool) -> list[str]:
    """The benchmarks to run, in registry order: ``--only`` ones, else all but the scaling
    series in a quick run."""
    if only:
        return [name for name in BENCHMARKS if name in only]
    return [name for name in BENCHMARKS if not (quick and name in FULL_ONLY)]


def _run_one(name: str, opts: Options, timeout: int) -> Result:
    """Run one benchmark; a fault or a stall past ``timeout`` seconds becomes a failed row."""

    def stalled(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {timeout} s")

    t0 = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, stalled)
    signal.alarm(timeout)
    try:
        row = BENCHMARKS[name](opts)
    except Exception as exc:  # any fault becomes a failed row; the run goes on
        traceback.print_exc(file=sys.stderr)
        row = {"name": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


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
    """Run the selected benchmarks and write the document; exit 1 if a target is missed."""
    args = _parser().parse_args(argv)
    if args.list:
        sys.stdout.write(listing())
        return 0
    if args.render:
        document = json.loads(Path(args.render).read_text(encoding="utf-8"))
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
        sys.stderr.write(report.table(document) + "\n")
    return 0 if document["ok"] else 1


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Run the benchmarks ``args`` select; the result document. With ``--json`` the file
    is rewritten after each benchmark (``complete`` false until the last), so a long run
    cut short still leaves what it measured."""
    env = anchors.ensure(args.anchors_venv.expanduser()) if args.with_anchors else None
    opts = Options(quick=args.quick, anchors=env)
    names = selected(args.only, args.quick)
    machine = report.machine()
    started = time.time()
    results: list[Result] = []
    for name in names:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        results.append(_run_one(name, opts, args.timeout))
        if args.json:
            write_atomic(Path(args.json), json.dumps(
                {**_document(args, argv, env, machine, started, results), "complete": False},
                indent=2) + "\n")
    machine["load_average_end"] = report.load_average()
    document = _document(args, argv, env, machine, started, results)
    if args.json:
        write_atomic(Path(args.json), json.dumps(document, indent=2) + "\n")
    return document


def _document(args: argparse.Namespace, argv: list[str], env: anchors.AnchorEnv | None,
              machine: dict[str, Any], started: float, results: list[Result]) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "command": " ".join([*(f"{k}={os.environ[k]}" for k in _COMMAND_ENV if os.environ.get(k)),
                             "python scripts/bench.py", *argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": machine,
        "anchors": None if env is None else {"venv": str(args.anchors_venv),
                                             "versions": env.versions},
        "results": results,
        "ok": all(r["ok"] for r in results),
        "complete": True,
    }
