"""One exit point: ``dsh.cli.main.main`` is the only code that ends the process normally.

Commands raise typed errors (or click's ``Exit`` once their outcome is said) and the one
top-level handler turns them into the exit code, click's habit. The only other way out is
the runtime's forced exit (``os._exit``), for a second signal or a disposal that overran
its bound, where no exception could reach a handler.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ALLOWED = {("dsh/cli/main.py", "main", "sys.exit"),
           ("dsh/runtime/app.py", "_force_exit", "os._exit")}


def exits(tree: ast.AST) -> list[tuple[str, str]]:
    """``(function, what)`` for every exit call or ``raise SystemExit`` in ``tree``."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef,
                                                    ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                called = ast.unparse(child.func)
                if called in ("sys.exit", "os._exit", "exit", "quit"):
                    found.append((function, called))
            if isinstance(child, ast.Raise) and child.exc is not None and "SystemExit" in (
                    ast.unparse(child.exc)):
                found.append((function, "raise SystemExit"))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_only_main_exits() -> None:
    found = {(path.relative_to(SRC).as_posix(), function, what)
             for path in SRC.rglob("*.py")
             for function, what in exits(ast.parse(path.read_text(encoding="utf-8")))}
    assert found == ALLOWED


def test_the_finder_sees_each_way_out() -> None:
    tree = ast.parse("import sys, os\ndef a():\n    sys.exit(1)\ndef b():\n"
                     "    raise SystemExit(2)\nos._exit(3)\n")
    assert exits(tree) == [("a", "sys.exit"), ("b", "raise SystemExit"),
                           ("<module>", "os._exit")]
