"""The dependency order of ``docs/architecture.md``, checked on the code as it is.

* The import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``): core, SDK,
  configuration, runtime, CLI, nothing importing upward; the agent importing no protocol.
  They are run here as a user would run them (``lint-imports``), and on a copy of the
  tree given one upward import, which must break the layers: a contract that cannot fail
  would pin nothing.
* No circular imports between modules: the import graph (grimp, import-linter's own) has
  no cycle. Imports made only for type checkers (``if TYPE_CHECKING:``) never run, so
  they are not edges here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dsh",)


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``tree`` (its pyproject.toml, its packages first on the path),
    without a cache folder: nothing is written into the tree."""
    env = {"PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(tree / 'src')}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import "
         "lint_imports_command; sys.exit(lint_imports_command())", "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_layers_hold() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " kept, 0 broken" in done.stdout and "BROKEN" not in done.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    for package in ("src",):
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    redact = tree / "src" / "dsh" / "core" / "redact.py"
    redact.write_text(redact.read_text(encoding="utf-8")
                      + "\n\ndef _upward() -> None:\n    from dsh.config import profiles  # noqa\n",
                      encoding="utf-8")
    done = lint_imports(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert " kept, 1 broken" in done.stdout
    assert "(nothing imports upward) BROKEN" in " ".join(done.stdout.split())
    assert "dsh.core.redact -> dsh.config.profiles" in done.stdout


def test_the_picture_draws_the_contract() -> None:
    """docs/architecture.md's picture lists the contract's layers, top to bottom."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [layers] = [c["layers"] for c in settings["tool"]["importlinter"]["contracts"]
                if c["type"] == "layers"]
    picture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("```")[1]
    drawn = [line.split("│")[1].split()[0] for line in picture.splitlines()
             if line.strip()[:1].isalpha()]
    assert drawn == layers


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(
                        graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert "dsh.core.errors" in graph.modules  # the graph is the installed code's
    found = cycles(graph)
    assert found == [], "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(module)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.d")
    graph.add_import(importer="a.d", imported="a.b")
    assert cycles(graph) == [["a.b", "a.c", "a.d"]]
