"""The SDK suite hides nothing: every test it holds is collected, on every system.

What a system cannot run is skipped with its reason (``pytest -rs`` lists them), never
left uncollected: a conftest's ``collect_ignore_glob`` once kept this whole suite from the
macOS and Windows jobs, which then reported nothing about the embedding path and passed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def defined_tests() -> set[str]:
    """``file::name`` of every test function the suite's files define."""
    found = set()
    for path in sorted(HERE.glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    node.name.startswith("test_")):
                found.add(f"{path.name}::{node.name}")
    return found


def test_the_conftests_hide_no_test_of_the_sdk_suite() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         str(HERE)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = {f"{Path(node.split('::')[0]).name}::{node.split('::')[1].split('[')[0]}"
                 for node in done.stdout.splitlines() if "::" in node}
    defined = defined_tests()
    assert len(defined) > 50 and "test_collection.py::" + (
        "test_the_conftests_hide_no_test_of_the_sdk_suite") in defined
    assert collected == defined, {"not collected": sorted(defined - collected),
                                  "unexpected": sorted(collected - defined)}
