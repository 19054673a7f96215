"""Every POSIX-only use in dsh sits behind a platform guard (a scan of the source).

On Windows ``signal.SIGKILL``, ``SIGHUP``, ``SIGQUIT``, ``os.killpg``, ``os.setsid``,
``os.getpgid`` and the ``fcntl`` module do not exist, and ``/proc`` is Linux's alone, so
any of them reached unguarded is an ``AttributeError`` (``DshClient.close()`` once raised
exactly that) or a silent no-op. The source of the launcher, the runtime, the wheel build
and the scripts is parsed, never imported, and each use must be guarded in one of these
forms:

1. **inside the branch of an** ``if`` **or conditional expression whose test says POSIX**:
   the test names ``_POSIX``, ``_LINUX``, ``_MACOS``, ``LINUX``, ``MACOS``, ``POSIX``,
   ``sys.platform`` (``.startswith("linux")``, ``== "darwin"``), ``os.name == "posix"``
   or ``hasattr(module, "name")``, or a name the module assigned from such a test
   (``linux = sys.platform.startswith("linux")``), in the positive branch (``not
   _WINDOWS``, ``os.name != "nt"`` and ``sys.platform != "win32"`` count as POSIX too);
   in an ``and`` chain, the operands after such a test;
2. **after an early exit** in the same function or block: ``if not _POSIX: return ...``
   (or ``raise``, ``continue``, ``break``) earlier in an enclosing statement list;
3. **an import inside** ``try`` **whose handler catches** ``ImportError`` (or
   ``ModuleNotFoundError``), or a use inside ``try`` catching ``AttributeError``;
4. ``getattr(module, "NAME", default)``: the default is the guard;
5. **a line marked** ``# platform: <why>``, for a use whose guard is its caller's (say
   a function only a Linux branch calls); the reason is required and each marked line is
   listed by :func:`test_marked_lines_say_why`.

The test of the scan itself (:func:`test_the_scan_finds_unguarded_uses`,
:func:`test_the_scan_accepts_each_guard_form`) shows both that it can fail and what it
accepts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = (ROOT / "src", ROOT / "wheels",
           ROOT / "scripts")

POSIX_SIGNALS = {"SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGALRM",
                 "SIGPIPE", "SIGSTOP", "SIGCONT", "SIGTSTP", "SIGXCPU"}
POSIX_OS = {"killpg", "setsid", "getpgid", "setpgid", "getpgrp", "fork", "forkpty",
            "getuid", "geteuid", "getgid", "getegid", "setuid",
            "pidfd_open", "sched_getaffinity", "mkfifo", "setpgrp", "tcsetpgrp"}
POSIX_MODULES = {"fcntl", "pwd", "grp", "termios", "resource", "pty", "tty"}
GUARD_NAMES = {"_POSIX", "_LINUX", "_MACOS", "LINUX", "MACOS", "POSIX", "_DARWIN"}
NEGATIVE_NAMES = {"_WINDOWS", "WINDOWS", "_WIN"}
MARK = re.compile(r"#\s*platform:\s*(\S.*)$")


def _says_posix(test: ast.expr, aliases: dict[str, bool] | None = None) -> bool | None:
    """True: the test holds only on POSIX; False: it holds only off POSIX (its ``else``
    branch is the POSIX one); None: it says nothing about the platform. ``aliases`` are
    names the module assigned from such a test (``linux = sys.platform == "linux"``)."""
    aliases = aliases or {}
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _says_posix(test.operand, aliases)
        return None if inner is None else not inner
    if isinstance(test, ast.Name):
        if test.id in GUARD_NAMES:
            return True
        if test.id in NEGATIVE_NAMES:
            return False
        return aliases.get(test.id)
    if isinstance(test, ast.BoolOp):
        found = [_says_posix(value, aliases) for value in test.values]
        if isinstance(test.op, ast.And) and True in found:
            return True
        if isinstance(test.op, ast.Or) and found and all(f is True for f in found):
            return True
        if isinstance(test.op, ast.Or) and False in found:
            return False
        return None
    if isinstance(test, ast.Call):
        func = test.func
        if isinstance(func, ast.Name) and func.id == "hasattr":
            return True
        if isinstance(func, ast.Attribute) and func.attr == "startswith" \
                and _is_platform(func.value):
            prefix = _constant(test.args[0]) if test.args else None
            return prefix in ("linux", "darwin", "freebsd") or None
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        if _is_platform(left) or _is_os_name(left):
            value = _constant(right)
            if value is None:
                return None
            posix = value in ("linux", "darwin", "posix")
            windows = value in ("win32", "nt", "cygwin")
            if isinstance(op, ast.Eq):
                return True if posix else (False if windows else None)
            if isinstance(op, ast.NotEq):
                return True if windows else (False if posix else None)
    return None


def _is_platform(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "platform" \
        and isinstance(node.value, ast.Name) and node.value.id == "sys"


def _is_os_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "name" \
        and isinstance(node.value, ast.Name) and node.value.id == "os"


def _constant(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) \
        else None


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue,
                                                ast.Break))


def _catches(handler: ast.ExceptHandler, names: set[str]) -> bool:
    kinds = handler.type
    items = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds] if kinds else []
    return any(isinstance(k, ast.Name) and k.id in names for k in items)


class _Scan(ast.NodeVisitor):
    """Walks one module keeping the guards in force; records each unguarded use."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.found: list[tuple[int, str]] = []
        self.guard = 0
        self.imports_guarded = 0
        self.attributes_guarded = 0
        self.docstrings: set[int] = set()
        self.aliases: dict[str, bool] = {}

    # -- guards ---------------------------------------------------------------------------

    def _guarded(self, node: ast.AST, *, import_: bool = False,
                 attribute: bool = False) -> bool:
        if self.guard > 0:
            return True
        if import_ and self.imports_guarded > 0:
            return True
        if attribute and self.attributes_guarded > 0:
            return True
        line = self.lines[node.lineno - 1] if node.lineno <= len(self.lines) else ""
        return bool(MARK.search(line))

    def _block(self, body: list[ast.stmt]) -> None:
        """Visit a statement list; an early exit on non-POSIX guards the rest of it."""
        raised = 0
        for stmt in body:
            self.visit(stmt)
            if isinstance(stmt, ast.If) and self._says(stmt.test) is False \
                    and _exits(stmt.body):
                self.guard += 1
                raised += 1
        self.guard -= raised

    def _branch(self, body: list[ast.stmt], posix: bool) -> None:
        if posix:
            self.guard += 1
        self._block(body)
        if posix:
            self.guard -= 1

    def generic_visit(self, node: ast.AST) -> None:
        for field, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                if field == "body" and isinstance(
                        node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                               ast.ClassDef)) and isinstance(value[0], ast.Expr) \
                        and isinstance(value[0].value, ast.Constant) \
                        and isinstance(value[0].value.value, str):
                    self.docstrings.add(id(value[0].value))
                self._block(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def _says(self, test: ast.expr) -> bool | None:
        return _says_posix(test, self.aliases)

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            says = self._says(node.value)
            if says is not None:
                self.aliases[node.targets[0].id] = says
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        says = self._says(node.test)
        self.visit(node.test)
        self._branch(node.body, says is True)
        self._branch(node.orelse, says is False)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        says = self._says(node.test)
        self.visit(node.test)
        for branch, posix in ((node.body, says is True), (node.orelse, says is False)):
            self.guard += posix
            self.visit(branch)
            self.guard -= posix

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        raised = 0
        for value in node.values:
            self.visit(value)
            if isinstance(node.op, ast.And) and self._says(value) is True:
                self.guard += 1
                raised += 1
        self.guard -= raised

    def visit_Try(self, node: ast.Try) -> None:
        imports = any(_catches(h, {"ImportError", "ModuleNotFoundError"})
                      for h in node.handlers)
        attributes = any(_catches(h, {"AttributeError"}) for h in node.handlers)
        self.imports_guarded += imports
        self.attributes_guarded += attributes
        self._block(node.body)
        self.imports_guarded -= imports
        self.attributes_guarded -= attributes
        for handler in node.handlers:
            self.visit(handler)
        self._block(node.orelse)
        self._block(node.finalbody)

    # -- uses -----------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in POSIX_MODULES and not self._guarded(
                    node, import_=True):
                self.found.append((node.lineno, f"import {alias.name}"))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = (node.module or "").split(".")[0]
        if module in POSIX_MODULES and not self._guarded(node, import_=True):
            self.found.append((node.lineno, f"from {node.module} import"))
        if module == "os" and any(a.name in POSIX_OS for a in node.names) \
                and not self._guarded(node):
            self.found.append((node.lineno, "from os import a POSIX-only name"))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name) and isinstance(node.ctx, ast.Load):
            posix = (base.id == "signal" and node.attr in POSIX_SIGNALS) or \
                (base.id == "os" and node.attr in POSIX_OS)
            if posix and not self._guarded(node, attribute=True):
                self.found.append((node.lineno, f"{base.id}.{node.attr}"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2:
            # getattr(signal, "SIGKILL", default) / hasattr(os, "killpg"): the guard itself.
            for arg in node.args[2:]:
                self.visit(arg)
            return
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.docstrings \
                and re.match(r"/proc(/|$)", node.value) and not self._guarded(node):
            self.found.append((node.lineno, f"the path {node.value!r}"))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        first = node.values[0] if node.values else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str) \
                and re.match(r"/proc(/|$)", first.value) and not self._guarded(node):
            self.found.append((node.lineno, f"the path f{first.value!r}..."))
            return
        self.generic_visit(node)


def unguarded(source: str, filename: str = "<source>") -> list[str]:
    """Each POSIX-only use in ``source`` that no guard form covers, as ``file:line: what``."""
    scan = _Scan(source.splitlines())
    scan.visit(ast.parse(source, filename))
    return [f"{filename}:{line}: {what}" for line, what in sorted(scan.found)]


def _sources() -> list[Path]:
    """The project's own Python files (not a build's, e.g. ``wheels/build/``'s venv)."""
    skip = {"build", "dist", "venv", ".venv", "site-packages", "__pycache__"}
    return sorted(p for folder in SCANNED for p in folder.rglob("*.py")
                  if not skip.intersection(p.relative_to(ROOT).parts))


def test_every_posix_only_use_is_guarded() -> None:
    found = [hit for path in _sources()
             for hit in unguarded(path.read_text(encoding="utf-8"),
                                  str(path.relative_to(ROOT)))]
    assert not found, ("POSIX-only uses without a platform guard (see this test's "
                       "docstring for the forms accepted):\n" + "\n".join(found))


def test_marked_lines_say_why() -> None:
    marked = [(path, number, match.group(1))
              for path in _sources()
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if (match := MARK.search(line))]
    for path, number, why in marked:
        assert len(why.split()) >= 3, f"{path}:{number}: '# platform:' needs a reason"


@pytest.mark.parametrize("source", [
    "import os, signal\nos.killpg(1, signal.SIGKILL)\n",
    "import signal\nx = signal.SIGHUP\n",
    "import signal\nx = signal.SIGQUIT\n",
    "import os\nos.setsid()\n",
    "import os\nos.getpgid(0)\n",
    "import fcntl\n",
    "def f():\n    import fcntl\n",
    "open('/proc/self/status')\n",
    "pid = 1\nopen(f'/proc/{pid}/status')\n",
    "import os\nif os.name == 'nt':\n    os.killpg(1, 9)\n",
    "import sys, os\nif sys.platform == 'win32':\n    os.setsid()\n",
    "_WINDOWS = True\nimport os\nif _WINDOWS:\n    os.getpgid(0)\n",
    "_POSIX = True\nimport os\nif _POSIX:\n    pass\nos.killpg(1, 9)\n",
    "_POSIX = True\nimport os\nif not _POSIX:\n    os.killpg(1, 9)\n",
    "import os\ntry:\n    os.killpg(1, 9)\nexcept OSError:\n    pass\n",
    "_LINUX = True\nimport os\nx = 1 if _LINUX else os.killpg(1, 9)\n",
    "import os\ndef f():\n    if os.name == 'nt':\n        pass\n    os.setsid()\n",
    "import sys, os\nwin = sys.platform == 'win32'\nif win:\n    os.setsid()\n",
])
def test_the_scan_finds_unguarded_uses(source: str) -> None:
    assert unguarded(source), source


@pytest.mark.parametrize("source", [
    "_POSIX = True\nimport os, signal\nif _POSIX:\n    os.killpg(1, signal.SIGKILL)\n",
    "_POSIX = True\nimport os\nif not _POSIX:\n    pass\nelse:\n    os.setsid()\n",
    "_WINDOWS = True\nimport os\nif _WINDOWS:\n    pass\nelse:\n    os.getpgid(0)\n",
    "import sys\nif sys.platform.startswith('linux'):\n    open('/proc/self/status')\n",
    "import sys\nif sys.platform == 'darwin':\n    import fcntl\n",
    "import os\nif os.name == 'posix':\n    import fcntl\n",
    "import os\nif os.name != 'nt':\n    os.setsid()\n",
    "import os\nif hasattr(os, 'killpg'):\n    os.killpg(1, 9)\n",
    "_POSIX = True\nimport os\ndef f():\n    if not _POSIX:\n        return\n"
    "    os.killpg(1, 9)\n",
    "_LINUX = True\ndef f():\n    for x in []:\n        if not _LINUX:\n            continue\n"
    "        open(f'/proc/{x}')\n",
    "try:\n    import fcntl\nexcept ImportError:\n    fcntl = None\n",
    "import signal\ntry:\n    x = signal.SIGKILL\nexcept AttributeError:\n    x = 9\n",
    "import signal\nx = getattr(signal, 'SIGKILL', 9)\n",
    "_LINUX = True\nimport os\nx = _LINUX and os.path.exists('/proc/self')\n",
    "_POSIX = True\nimport os\nx = os.getpgid(0) if _POSIX else 0\n",
    "open('/proc/self/status')  # platform: only the Linux branch calls this\n",
    "import sys, signal\nposix = hasattr(signal, 'SIGALRM')\nif posix:\n    signal.alarm(1)\n",
    "import sys\nwin = sys.platform == 'win32'\nif not win:\n    open('/proc/x')\n",
    "def f():\n    '''Reads /proc/self/status.'''\n",
])
def test_the_scan_accepts_each_guard_form(source: str) -> None:
    assert not unguarded(source), unguarded(source)


def test_the_test_suites_platform_table_names_real_tests() -> None:
    """``tests/conftest.py``'s ``PLATFORM_NEEDS`` skips tests off Linux or POSIX by name: a
    renamed file or test must not leave an entry that silently skips nothing."""
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    table = next(node.value for node in tree.body if isinstance(node, ast.AnnAssign)
                 and isinstance(node.target, ast.Name) and node.target.id == "PLATFORM_NEEDS")
    entries = ast.literal_eval(table)
    assert entries
    for key, (need, why) in entries.items():
        path, _, test = key.partition("::")
        source = (ROOT / "tests" / path).read_text(encoding="utf-8")
        assert not test or f"def {test}(" in source, key
        assert need in ("linux", "posix") and why, key
