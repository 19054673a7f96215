"""The freeze's import audit: no frozen module imports an excluded one unconditionally.

The build hook (``hatch_build.py``) leaves modules out of the freeze
(``EXCLUDED_MODULES``), each because nothing the runtime runs imports it. PyInstaller's
own analysis cannot tell an import dsh reaches from one it never does, so the proof is
in the reasons beside the list; what this script adds is the check a dependency upgrade
would otherwise slip past: a frozen module that imports an excluded one at module level,
outside any ``if``, ``try`` or function, could itself never be imported, so the frozen
runtime would fail where the python carrier works. Imports under ``if``/``try`` (optional,
platform or ``TYPE_CHECKING`` branches) and inside functions are not judged here.

The hook runs it after PyInstaller with the freeze venv's interpreter, whose ``sys.path``
(plus ``--path``) holds the sources the frozen bytecode was compiled from::

    python import_audit.py --support DIR [--path DIR ...] --exclude MODULE [...]

It prints one line per problem and exits 1 when there is any, 0 otherwise (2 for bad
arguments). Every frozen module must have a source it can read: one it cannot find is a
problem too, since it could not be audited.
"""

from __future__ import annotations

import argparse
import ast
import importlib.machinery
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath


def frozen_modules(relative_paths: Iterable[str]) -> dict[str, bool]:
    """``{module name: is a package}`` of the compiled modules in a support folder,
    from paths relative to it (``a/b.pyc`` is ``a.b``, ``a/__init__.pyc`` the package
    ``a``); other files are not Python modules with a source."""
    found: dict[str, bool] = {}
    for path in relative_paths:
        parts = PurePosixPath(path).parts
        if not parts or not parts[-1].endswith(".pyc"):
            continue
        names = [*parts[:-1], parts[-1].removesuffix(".pyc")]
        package = names[-1] == "__init__"
        if package:
            names.pop()
        found[".".join(names)] = package
    return found


def is_excluded(module: str, excluded: Collection[str]) -> bool:
    """Whether ``module`` or a package it is in is ``excluded``."""
    parts = module.split(".")
    return any(".".join(parts[:n]) in excluded for n in range(1, len(parts) + 1))


def _unconditional(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of ``body`` that run whenever the module runs: those at its top,
    in ``with`` blocks and class bodies, and the ``finally`` of a ``try``."""
    for node in body:
        yield node
        if isinstance(node, (ast.With, ast.AsyncWith, ast.ClassDef)):
            yield from _unconditional(node.body)
        elif isinstance(node, ast.Try):
            yield from _unconditional(node.finalbody)


def module_level_imports(source: str | bytes, module: str, *, package: bool) -> set[str]:
    """Every module name ``source`` (the module ``module``; bytes are decoded as Python
    decodes a source file) imports whenever it runs.

    ``import a.b`` imports ``a`` and ``a.b``; ``from a import b`` imports ``a`` and, where
    ``b`` is a submodule, ``a.b`` (listed either way: only a name on the excluded list
    matters); relative imports are resolved against ``module``.
    """
    found: set[str] = set()
    for node in _unconditional(ast.parse(source).body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                found.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                anchor = anchor if package else anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            parts = base.split(".")
            found.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def audit(sources: Mapping[str, tuple[str | bytes, bool] | None],
          excluded: Collection[str]) -> list[str]:
    """The problems of a frozen tree: ``sources`` maps each frozen module to ``(source
    text, is a package)``, or ``None`` where no source was found."""
    problems = []
    for module, entry in sorted(sources.items()):
        if entry is None:
            problems.append(f"{module}: no source found to audit")
            continue
        if is_excluded(module, excluded):
            continue
        text, package = entry
        try:
            imported = module_level_imports(text, module, package=package)
        except SyntaxError as exc:
            problems.append(f"{module}: cannot parse its source: {exc}")
            continue
        bad = {name for name in imported if is_excluded(name, excluded)}
        # "fractions", not also "fractions.Fraction": the outermost excluded name says it.
        bad = sorted(name for name in bad
                     if not any(other != name and name.startswith(f"{other}.") for other in bad))
        if bad:
            problems.append(f"{module} imports the excluded {', '.join(bad)} at module "
                            "level, so it could never be imported frozen")
    return problems


def locate(module: str, path: list[str]) -> tuple[Path, bool] | None:
    """``(source file, is a package)`` of ``module`` found on ``path``, without importing
    anything; ``None`` where it has no Python source there."""
    search: list[str] | None = path
    spec = None
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        if search is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:n]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or []) or None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin), spec.submodule_search_locations is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--support", type=Path, required=True,
                        help="the frozen tree's support folder (_internal)")
    parser.add_argument("--path", action="append", default=[],
                        help="a folder searched for sources before sys.path")
    parser.add_argument("--exclude", action="append", default=[], required=True,
                        help="an excluded module (repeat)")
    args = parser.parse_args(argv)
    relative = (p.relative_to(args.support).as_posix() for p in args.support.rglob("*.pyc"))
    search = [*args.path, *sys.path]
    sources: dict[str, tuple[str | bytes, bool] | None] = {}
    for module in frozen_modules(relative):
        found = locate(module, search)
        sources[module] = None if found is None else (
            found[0].read_bytes(), found[1])
    problems = audit(sources, set(args.exclude))
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
