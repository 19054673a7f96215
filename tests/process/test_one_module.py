"""One process-control module: no module of dsh but ``dsh.core.process`` starts or signals
a process.

Issue 22's pin. The source of both packages is parsed (not imported) and every way Python
has to start a process or send a signal to one is looked for: the ``subprocess`` and
``pty`` modules, asyncio's subprocess functions and loop methods, and the ``os`` calls
(``kill``, ``killpg``, ``fork``, ``exec*``, ``spawn*``, ``posix_spawn*``, ``system``,
``popen``), and process pools. A second start path would skip the process group, the
parent tie, the limits
and the one stop ladder, which is why one is not allowed anywhere else.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "src",)
ALLOWED = {ROOT / "src" / "dsh" / "core" / "process.py"}

_MODULES = {"subprocess", "pty", "multiprocessing"}
_POOLS = {"process", "ProcessPoolExecutor"}
_OS = {"kill", "killpg", "fork", "forkpty", "system", "popen", "posix_spawn",
       "posix_spawnp"}
_OS_PREFIXES = ("exec", "spawn")
_ASYNCIO = {"create_subprocess_exec", "create_subprocess_shell", "subprocess"}
_LOOP = {"subprocess_exec", "subprocess_shell"}


def _forbidden_os(name: str) -> bool:
    return name in _OS or name.startswith(_OS_PREFIXES)


def violations(source: str, filename: str = "<source>") -> list[str]:
    """Every place in ``source`` that starts or signals a process, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        what = None
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] in _MODULES
                     or a.name in _MODULES]
            what = f"import {names[0]}" if names else None
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in _MODULES or node.module in _MODULES:
                what = f"from {node.module} import"
            elif node.module == "concurrent.futures" and any(a.name in _POOLS
                                                             for a in node.names):
                what = "a process pool"
            elif node.module == "os" and any(_forbidden_os(a.name) for a in node.names):
                what = "from os import " + ", ".join(a.name for a in node.names)
            elif node.module == "asyncio" and any(a.name in _ASYNCIO for a in node.names):
                what = "from asyncio import " + ", ".join(a.name for a in node.names)
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id == "os" and _forbidden_os(node.attr):
                what = f"os.{node.attr}"
            elif isinstance(base, ast.Name) and base.id == "asyncio" and node.attr in _ASYNCIO:
                what = f"asyncio.{node.attr}"
            elif node.attr in _LOOP or node.attr == "ProcessPoolExecutor":
                what = f".{node.attr}"
        if what is not None:
            found.append(f"{filename}:{node.lineno}: {what}")
    return found


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in package.rglob("*.py"))


def test_no_module_but_dsh_process_starts_or_signals_a_process() -> None:
    found = [v for path in _sources() if path not in ALLOWED
             for v in violations(path.read_text(encoding="utf-8"),
                                 str(path.relative_to(ROOT)))]
    assert not found, ("only src/dsh/core/process.py may start or signal processes:\n"
                       + "\n".join(found))


def test_the_process_module_is_in_the_core_layer() -> None:
    """``dsh.core.process`` (with ``dsh.core.limits`` and ``dsh.core.containers``, its
    planning halves, ``dsh.core.winjob``, its Windows job objects, and
    ``dsh.core.confinement`` with ``landlock`` and ``seccomp``, the sandbox's pre-exec
    step) imports only the standard library and the core (errors, JSON-RPC, version,
    atomic files) besides these: everything else of dsh may depend on them, so they may
    depend on nothing of dsh above the core."""
    core = {"dsh.core.errors", "dsh.core.jsonrpc", "dsh._version", "dsh.core.limits",
            "dsh.core.process", "dsh.core.winjob", "dsh.core.containers",
            "dsh.core.atomicfile", "dsh.core.confinement", "dsh.core.landlock",
            "dsh.core.seccomp"}
    for name in ("process.py", "limits.py", "winjob.py", "containers.py", "confinement.py",
                 "landlock.py", "seccomp.py"):
        tree = ast.parse((ROOT / "src" / "dsh" / "core" / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "dsh.core":
                modules = [f"dsh.core.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in modules:
                if module.split(".")[0] in ("dsh", "dsh_runtime"):
                    assert module in core, f"{name} imports {module}"


@pytest.mark.parametrize("line", [
    "import subprocess",
    "import subprocess as sp",
    "from subprocess import run",
    "import pty",
    "import multiprocessing",
    "from concurrent.futures import process",
    "import concurrent.futures\nconcurrent.futures.ProcessPoolExecutor()",
    "import os\nos.kill(1, 9)",
    "import os\nos.killpg(1, 9)",
    "import os\nos.system('x')",
    "import os\nos.execvp('x', ['x'])",
    "import os\nos.posix_spawn('x', ['x'], {})",
    "import os\nos.fork()",
    "from os import killpg",
    "import asyncio\nasyncio.create_subprocess_exec('x')",
    "import asyncio\nasyncio.create_subprocess_shell('x')",
    "from asyncio import create_subprocess_exec",
    "import asyncio\np: asyncio.subprocess.Process",
    "loop.subprocess_exec(f, 'x')",
])
def test_the_scan_finds_every_way_to_start_or_signal(line: str) -> None:
    """The scan itself fails on each forbidden form (so the pin above can fail)."""
    assert violations(line), line


def test_the_scan_leaves_ordinary_os_calls_alone() -> None:
    assert not violations("import os\nos.getpid(); os.path.join('a'); os._exit(0)\n"
                          "import signal\nsignal.signal(signal.SIGTERM, None)\n")
