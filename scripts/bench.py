"""dsh benchmarks, run by hand (not part of the test suite); one JSON document on stdout.

    python scripts/bench.py --quick          # a few minutes; the table also goes to stderr
    python scripts/bench.py --with-anchors --build-wheel \
        --json docs/benchmarks/results.json --markdown docs/benchmarks.md
                                             # the full run behind docs/benchmarks.md
    python scripts/bench.py --render docs/benchmarks/results.json --markdown docs/benchmarks.md
    python scripts/bench.py --only compose_100x50 [--only ...]
    python scripts/bench.py --list           # every benchmark and the rows it reports

The document's ``verdict`` is ``met``, ``missed`` or ``incomplete`` and the exit status is
0 only for ``met``. The benchmarks live in ``scripts/benchlib/<family>.py``, one module per
family; the rules every row follows are in ``scripts/benchlib/__init__.py``.
"""

from __future__ import annotations

import sys

from benchlib.cli import main
from benchlib.registry import load_families

if __name__ == "__main__":
    load_families()
    sys.exit(main())
