"""``wheels/import_audit.py``: a frozen module that imports an excluded one at module level
fails the build; imports the runtime may never reach (optional, conditional, in a
function) do not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .conftest import WHEELS


class TestModuleLevelImports:
    def test_plain_imports_name_every_package_on_the_way(self, audit: ModuleType) -> None:
        source = "import a.b.c\nfrom d.e import f, g\nfrom h import *\n"
        assert audit.module_level_imports(source, "m", package=False) == {
            "a", "a.b", "a.b.c", "d", "d.e", "d.e.f", "d.e.g", "h"}

    def test_imports_that_may_not_run_are_not_judged(self, audit: ModuleType) -> None:
        source = (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    import checking\n"
            "try:\n    import optional\nexcept ImportError:\n    optional = None\n"
            "else:\n    import after_optional\n"
            "def f():\n    import delayed\n"
            "async def g():\n    import delayed_async\n"
            "for _ in ():\n    import looped\n")
        assert audit.module_level_imports(source, "m", package=False) == {
            "typing", "typing.TYPE_CHECKING"}

    def test_with_blocks_class_bodies_and_finally_always_run(self, audit: ModuleType) -> None:
        source = ("import contextlib\nwith contextlib.suppress(OSError):\n    import in_with\n"
                  "class C:\n    import in_class\n"
                  "try:\n    pass\nfinally:\n    import in_finally\n")
        assert audit.module_level_imports(source, "m", package=False) == {
            "contextlib", "in_with", "in_class", "in_finally"}

    def test_relative_imports_resolve_against_the_module(self, audit: ModuleType) -> None:
        assert audit.module_level_imports("from . import m\nfrom .x import y\n", "pkg.sub",
                                          package=True) == {
            "pkg", "pkg.sub", "pkg.sub.m", "pkg.sub.x", "pkg.sub.x.y"}
        assert audit.module_level_imports("from .. import q\nfrom . import r\n",
                                          "pkg.sub.mod", package=False) == {
            "pkg", "pkg.q", "pkg.sub", "pkg.sub.r"}

    def test_bytes_are_decoded_by_their_coding_line(self, audit: ModuleType) -> None:
        source = "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\nimport xml\n".encode("latin-1")
        assert audit.module_level_imports(source, "m", package=False) == {"xml"}


class TestAudit:
    def test_a_module_importing_an_excluded_one_is_named(self, audit: ModuleType) -> None:
        sources = {"pkg.uses_xml": ("from xml.etree.ElementTree import Element\n", False),
                   "pkg.fine": ("import json\n", False)}
        assert audit.audit(sources, {"xml"}) == [
            "pkg.uses_xml imports the excluded xml at module level, so it could never be "
            "imported frozen"]

    def test_excluded_submodule_and_excluded_importer(self, audit: ModuleType) -> None:
        sources = {"uvicorn.config": ("from uvicorn.protocols.http import httptools_impl\n",
                                      False),
                   # Excluded itself: it is not in the frozen tree's import paths at all.
                   "uvicorn.workers": ("import gunicorn\nimport xml\n", False)}
        assert audit.audit(sources, {"uvicorn.protocols.http.httptools_impl",
                                     "uvicorn.workers", "xml"}) == [
            "uvicorn.config imports the excluded uvicorn.protocols.http.httptools_impl at "
            "module level, so it could never be imported frozen"]

    def test_a_module_without_source_or_unparsable_is_a_problem(self,
                                                                audit: ModuleType) -> None:
        problems = audit.audit({"ghost": None, "broken": ("def (:\n", False)}, set())
        assert problems[0].startswith("broken: cannot parse its source")
        assert problems[1] == "ghost: no source found to audit"

    def test_frozen_modules_from_support_paths(self, audit: ModuleType) -> None:
        assert audit.frozen_modules([
            "json/__init__.pyc", "json/decoder.pyc", "os.pyc", "libssl.so.3",
            "certifi/cacert.pem", "python3.12/lib-dynload/_ssl.cpython-312.so"]) == {
            "json": True, "json.decoder": False, "os": False}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def run_audit(support: Path, sources: Path, *excluded: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(WHEELS / "import_audit.py"), "--support", str(support),
            "--path", str(sources)]
    for module in excluded:
        argv += ["--exclude", module]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


class TestProgram:
    @pytest.fixture
    def tree(self, tmp_path: Path) -> tuple[Path, Path]:
        support = _tree(tmp_path / "_internal", {
            "shop/__init__.pyc": "", "shop/till.pyc": "", "shop/receipts.pyc": ""})
        sources = _tree(tmp_path / "src", {
            "shop/__init__.py": "from . import till\n",
            "shop/till.py": "import json\ndef export():\n    from . import receipts\n",
            "shop/receipts.py": "import csv\n"})
        return support, sources

    def test_lazy_import_of_an_excluded_module_passes(self, tree: tuple[Path, Path]) -> None:
        done = run_audit(*tree, "shop.receipts", "xml")
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")

    def test_module_level_import_of_an_excluded_module_fails(
            self, tree: tuple[Path, Path]) -> None:
        done = run_audit(*tree, "shop.till")
        assert done.returncode == 1
        assert done.stdout == ("shop imports the excluded shop.till at module level, so it "
                               "could never be imported frozen\n")

    def test_a_frozen_module_without_a_source_fails(self, tree: tuple[Path, Path]) -> None:
        support, sources = tree
        (support / "shop/vanished.pyc").write_bytes(b"")
        done = run_audit(support, sources, "xml")
        assert (done.returncode, done.stdout) == (1, "shop.vanished: no source found to "
                                                     "audit\n")

    def test_the_standard_library_is_found_on_sys_path(self, tmp_path: Path) -> None:
        support = _tree(tmp_path / "_internal", {"json/__init__.pyc": "",
                                                 "json/decoder.pyc": ""})
        assert run_audit(support, tmp_path / "none", "xml").returncode == 0
        done = run_audit(support, tmp_path / "none", "json.scanner")
        assert done.returncode == 1 and done.stdout.startswith(
            "json.decoder imports the excluded json.scanner at module level")
