"""The dependency order of ``docs/architecture.md``, checked on the code as it is.

* The import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``): core, SDK,
  configuration, runtime, CLI, nothing importing upward; inside the runtime, its
  subpackages in their order (every one of them placed); the agent importing no protocol.
  They are run here as a user would run them (``lint-imports``), and on copies of the
  tree given one upward import, which must break the contract: a contract that cannot
  fail would pin nothing.
* No circular imports, between modules or between packages at any depth, counting the
  imports made only for type checkers (``if TYPE_CHECKING:``) too: a pair that needs each
  other even just for annotations has a type on the wrong side. The one exception is an
  object's type-only back reference to its owner, each listed in
  :data:`KEPT_BACK_REFERENCES` with its reason; none may touch the plugin API.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dsh", "dsh_runtime")

PLUGIN_API = frozenset({"dsh.runtime.kernel.plugin", "dsh.runtime.tools.base",
                        "dsh_runtime.plugin", "dsh_runtime.tools.base"})
"""What plugin authors import (``docs/plugins.md``), with the old paths kept for a release."""

KEPT_BACK_REFERENCES = {
    ("dsh.sdk._session", "dsh.sdk._client"):
        "an AsyncSession is made only by its AsyncDshClient and works through it (request, "
        "subscribe, history): the client imports the session module when it makes one, "
        "and the session names its owner's class for the type checker alone",
}
"""Type-only imports that close a cycle, kept on purpose: (importer, imported) → why."""


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


def copy_of_the_tree(tmp_path: Path) -> Path:
    """``pyproject.toml`` and ``src`` copied under ``tmp_path``, to plant a fault in."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def plant(module: Path, statement: str) -> None:
    """Append a function to ``module`` that runs ``statement`` (an import) when called."""
    module.write_text(module.read_text(encoding="utf-8")
                      + f"\n\ndef _upward() -> None:\n    {statement}  # noqa\n",
                      encoding="utf-8")


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    tree = copy_of_the_tree(tmp_path)
    plant(tree / "src" / "dsh" / "core" / "redact.py", "from dsh.config import profiles")
    done = lint_imports(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert " kept, 1 broken" in done.stdout
    assert "(nothing imports upward) BROKEN" in " ".join(done.stdout.split())
    assert "dsh.core.redact -> dsh.config.profiles" in done.stdout


def test_an_upward_import_inside_the_runtime_breaks_the_contract(tmp_path: Path) -> None:
    """The kernel reaching up to the agent breaks the runtime's layers, and only them."""
    tree = copy_of_the_tree(tmp_path)
    plant(tree / "src" / "dsh" / "runtime" / "kernel" / "hooks.py",
          "from dsh.runtime.agent import events")
    done = lint_imports(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert " kept, 1 broken" in done.stdout
    flat = " ".join(done.stdout.split())
    assert "the runtime's subpackages" in flat and "(nothing imports upward) BROKEN" in flat
    assert "dsh.runtime.kernel is not allowed to import dsh.runtime.agent" in done.stdout
    assert "dsh.runtime.kernel.hooks -> dsh.runtime.agent.events" in done.stdout


def test_a_runtime_subpackage_without_a_place_breaks_the_contract(tmp_path: Path) -> None:
    """A new subpackage of the runtime must be given its layer (``exhaustive``)."""
    tree = copy_of_the_tree(tmp_path)
    (tree / "src" / "dsh" / "runtime" / "gadgets").mkdir()
    (tree / "src" / "dsh" / "runtime" / "gadgets" / "__init__.py").write_text("")
    done = lint_imports(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert " kept, 1 broken" in done.stdout
    assert "dsh.runtime.gadgets" in done.stdout


def test_the_picture_draws_the_contract() -> None:
    """docs/architecture.md's picture lists the contract's layers, top to bottom."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [layers] = [c["layers"] for c in settings["tool"]["importlinter"]["contracts"]
                if c["id"] == "layers"]
    picture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("```")[1]
    # a layer is its first word, or words joined by " | " (siblings: dsh.runtime | dsh.chat)
    drawn = [re.match(r"\S+(?: \| \S+)*", line.split("│")[1].strip()).group(0)
             for line in picture.splitlines() if line.strip()[:1].isalpha()]
    assert drawn == layers


def test_the_runtime_table_draws_the_runtime_contract() -> None:
    """docs/architecture.md's table of the runtime's subpackages lists the runtime-layers
    contract's rows, top to bottom."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [layers] = [c["layers"] for c in settings["tool"]["importlinter"]["contracts"]
                if c["id"] == "runtime-layers"]
    section = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split(
        "\n## Inside the runtime\n")[1].split("\n## ")[0]
    rows = [line.split("|")[1] for line in section.splitlines()
            if line.startswith("| `")]
    drawn = [" | ".join(re.findall(r"`([a-z]+)`", row)) for row in rows]
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


def squashed(graph: grimp.ImportGraph, depth: int) -> grimp.ImportGraph:
    """``graph`` with every module folded into its package ``depth`` names deep
    (``dsh.runtime.agent`` at 3): an import between two packages is an edge between them."""
    def name(module: str) -> str:
        return ".".join(module.split(".")[:depth])

    packages = grimp.ImportGraph()
    for module in graph.modules:
        packages.add_module(name(module))
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if name(module) != name(imported):
                packages.add_import(importer=name(module), imported=name(imported))
    return packages


def the_graph() -> grimp.ImportGraph:
    """Every import of the installed code, type-only ones included, less the kept ones."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False, cache_dir=None)
    assert "dsh.core.errors" in graph.modules and "dsh_runtime.plugin" in graph.modules
    for importer, imported in KEPT_BACK_REFERENCES:
        graph.remove_import(importer=importer, imported=imported)
    return graph


def test_the_kept_back_references_are_type_only_and_close_a_cycle() -> None:
    running = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    checked = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False, cache_dir=None)
    for (importer, imported), why in KEPT_BACK_REFERENCES.items():
        assert why
        assert not {importer, imported} & PLUGIN_API, "no exception through the plugin API"
        assert checked.direct_import_exists(importer=importer, imported=imported), (
            f"{importer} no longer imports {imported}: drop it from KEPT_BACK_REFERENCES")
        assert not running.direct_import_exists(importer=importer, imported=imported), (
            f"{importer} imports {imported} at run time, not for type checkers only")
        assert checked.direct_import_exists(importer=imported, imported=importer), (
            f"{imported} does not import {importer}: the reference closes no cycle")


def test_no_module_imports_itself_through_others() -> None:
    found = cycles(the_graph())
    assert found == [], "\n".join(" <-> ".join(c) for c in found)


def test_no_package_imports_itself_through_others() -> None:
    """At every depth: the five layers, the runtime's subpackages, theirs."""
    graph = the_graph()
    deepest = max(len(module.split(".")) for module in graph.modules)
    found = [c for depth in range(2, deepest) for c in cycles(squashed(graph, depth))]
    assert found == [], "\n".join(" <-> ".join(c) for c in found)


def test_the_package_view_sees_a_circle_between_packages() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.b.x", "a.c", "a.c.y"):
        graph.add_module(module)
    graph.add_import(importer="a.b.x", imported="a.c.y")
    graph.add_import(importer="a.c", imported="a.b")
    assert cycles(graph) == []
    assert cycles(squashed(graph, 2)) == [["a.b", "a.c"]]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(module)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.d")
    graph.add_import(importer="a.d", imported="a.b")
    assert cycles(graph) == [["a.b", "a.c", "a.d"]]
