"""Every exception that crosses a module boundary is in the ``DshError`` tree (issue 22).

The packages are imported module by module and every exception class they define is
listed. One outside the tree must be a control-flow class private to its module: no
other module of dsh names it. A class another module names (raises, catches or
subclasses) belongs in the tree, where one handler, the servers' table and the CLI's
exit codes know it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from functools import cache
from pathlib import Path

import dsh
from dsh.core.errors import DshError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "src").rglob("*.py"))
# Modules that need an optional driver to import; their exceptions are checked by source.
OPTIONAL = ("dsh.runtime.sessions.postgres.",)


def exception_classes() -> list[type[BaseException]]:
    found = []
    for package in (dsh,):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.startswith(OPTIONAL) or info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            found += [value for _, value in inspect.getmembers(module, inspect.isclass)
                      if issubclass(value, BaseException) and value.__module__ == info.name]
    return found


@cache
def names_in(path: Path) -> frozenset[str]:
    """Every name the code of ``path`` uses: variables, attributes and imported names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rpartition(".")[2])
    return frozenset(found)


def named_elsewhere(kind: type[BaseException]) -> list[str]:
    """The source files, other than its own module's, whose code names ``kind``."""
    own = Path(inspect.getfile(kind)).resolve()
    return [str(p.relative_to(ROOT)) for p in SOURCES
            if p.resolve() != own and kind.__name__ in names_in(p)]


def test_exceptions_outside_the_tree_stay_in_their_module() -> None:
    classes = exception_classes()
    assert DshError in classes and len(classes) > 40
    outside = [kind for kind in classes if not issubclass(kind, DshError)]
    crossing = {f"{kind.__module__}.{kind.__name__}": named_elsewhere(kind)
                for kind in outside}
    assert {name: files for name, files in crossing.items() if files} == {}


def test_the_check_sees_a_crossing_class() -> None:
    """The control: a class outside the tree that another module names is found."""
    from dsh.config import yamlreader

    class CrossingError(Exception):
        pass

    CrossingError.__module__ = yamlreader.__name__
    CrossingError.__name__ = "ProfileNotFoundError"  # named by every module that raises it
    assert named_elsewhere(CrossingError)
