"""Verify that ``dsh`` is the only application launcher in the tree (``docs/contracts.md``,
"Carriers and wheels").

The scan finds every way a file in the repository could start an application:

``console-script``
    ``[project.scripts]``, ``console_scripts`` entry points (in ``[project.entry-points]``,
    ``setup.cfg`` or, by a regex scan, ``setup.py``) and ``[tool.poetry.scripts]``.
``gui-script``
    ``[project.gui-scripts]`` and ``gui_scripts`` entry points. Never allowed.
``wheel-script``
    hatch ``shared-scripts``: files a wheel installs into ``bin/``. Never allowed.
``shebang``
    any file whose first two bytes are ``#!``.
``main-module``
    any ``__main__.py`` (``python -m package``).
``main-guard``
    any ``.py`` module with an ``if __name__ == "__main__":`` test, found with :mod:`ast`
    so strings and comments do not count.
``unreadable``
    a ``pyproject.toml``, ``setup.cfg``, ``setup.py`` or module mentioning ``__main__``
    that could not be parsed, or scripts declared dynamic: the verifier cannot see what it
    would start, so it is never classified.

Plugin entry-point groups (``dsh.plugins``, ``dsh.bundles``, anything but the two script
groups) are not launchers and are ignored.

Each finding must match an entry of :data:`ALLOWLIST` with a role; a finding inside a
:data:`FORBIDDEN_ZONES` path fails whatever the allowlist says. Exit status: 0 when every
entry point is classified, 1 with one line per problem, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import fnmatch
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    try:
        import tomli as tomllib
    except ImportError:  # reported by main() as a usage error, not a traceback
        tomllib = None  # type: ignore[assignment]

ROLES: dict[str, str] = {
    "launcher": "the dsh launcher: the `dsh` console script and `python -m dsh`",
    "freeze-entry": "the PyInstaller entry script frozen into dsh-runtime-<platform>-<arch>",
    "test-runtime-peer": "a test-only fake runtime or peer, spawned by tests as a real process",
    "test-model-server": "a test-only fake model server, spawned by provider tests",
    "build-script": "a build, CI or development script that is never installed",
}

KINDS = ("console-script", "gui-script", "wheel-script", "shebang", "main-module",
         "main-guard", "unreadable")
# Kinds that no allowlist entry may ever accept.
NEVER_ALLOWED = frozenset({"gui-script", "wheel-script", "unreadable"})


@dataclass(frozen=True)
class Allow:
    """One allowlist entry: findings of ``kinds`` at ``path`` (a glob) have ``role``.

    ``path`` is matched segment by segment against the finding's path relative to the
    scanned root: ``*`` stays inside one segment, ``**`` spans any number of them.
    ``name`` and ``target`` narrow a script entry to one script name and one
    ``module:function``.
    """

    role: str
    kinds: tuple[str, ...]
    path: str
    reason: str
    name: str | None = None
    target: str | None = None


# First match wins, so the narrower roles come before the wider ones that share a folder.
ALLOWLIST: tuple[Allow, ...] = (
    Allow("launcher", ("console-script",), "pyproject.toml",
          "the one launcher, declared once by the pure distribution",
          name="dsh", target="dsh.cli.main:main"),
    Allow("launcher", ("main-module",), "src/dsh/__main__.py",
          "`python -m dsh`, the python carrier of the same dsh entry point"),
    Allow("freeze-entry", ("main-guard",), "wheels/*entry.py",
          "PyInstaller entry script: freezes the dsh entry point, accepts exactly its argv"),
    Allow("test-model-server", ("main-guard", "shebang"), "tests/providers/fake_*.py",
          "fake model HTTP servers for the provider tests, never installed"),
    Allow("test-model-server", ("main-guard", "shebang"), "tests/**/fake_*model*.py",
          "fake model servers next to the suites that drive them, never installed"),
    Allow("test-model-server", ("main-guard",), "tests/fixtures/*_standin.py",
          "model-API stand-ins written from the public docs (DeepSeek, Anthropic Messages), "
          "run in-thread by tests/providers and the bench, or as their own process; "
          "never installed"),
    Allow("test-runtime-peer", ("main-guard",), "tests/fixtures/mcp_*_server.py",
          "the test MCP servers tests/mcp and the bench spawn over stdio or HTTP, never "
          "installed"),
    Allow("test-runtime-peer", ("main-guard", "shebang"), "tests/**/fake_*.py",
          "fake runtimes and peers that tests spawn as real stdio programs, never installed"),
    Allow("build-script", ("main-guard", "shebang"), "scripts/*.py",
          "build, bench and verification scripts, run from a checkout only"),
    Allow("build-script", ("shebang",), "scripts/*.sh",
          "development setup scripts, run from a checkout only"),
    Allow("build-script", ("shebang",), ".ci/run",
          "the CI entry that installs the tree and runs the test suite"),
    Allow("build-script", ("main-guard", "shebang"), "wheels/*.py",
          "runtime-wheel build tools at the top of wheels/, never inside the package"),
)

# Paths where nothing may start an application, whatever the allowlist says.
FORBIDDEN_ZONES: tuple[tuple[str, str], ...] = (
    ("src/dsh/runtime/**",
     "the runtime is never an application by itself; it runs only under the dsh launcher"),
    ("wheels/**/dsh_runtime_bin/**",
     "the runtime wheel adds no launcher of its own; its executable takes the dsh command line"),
)

SKIP_DIRS = frozenset({
    ".git", "__pycache__", "build", "dist", ".venv", "node_modules", ".hypothesis",
    ".pytest_cache", ".ruff_cache", ".mypy_cache", ".tox", ".nox", ".benchmarks",
    "wheelhouse",
})
SKIP_DIR_SUFFIXES = (".egg-info",)

_SCRIPT_GROUPS = {"console_scripts": "console-script", "gui_scripts": "gui-script"}
_RUNTIME_ROOTS = frozenset({"dsh", "dsh_runtime", "dsh_runtime_bin"})


@dataclass
class Finding:
    """One entry point: where it is, what kind, its name and (once checked) its verdict."""

    path: str
    line: int | None
    kind: str
    name: str
    target: str | None = None
    detail: str | None = None
    imports: tuple[str, ...] = ()
    role: str | None = None
    reason: str | None = None
    ok: bool = False

    @property
    def where(self) -> str:
        """``path`` or ``path:line``, as compilers print locations."""
        return self.path if self.line is None else f"{self.path}:{self.line}"


@dataclass
class Report:
    """The outcome of one scan."""

    root: str
    findings: list[Finding] = field(default_factory=list)
    unused: list[Allow] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        """Findings that no allowlist entry classifies."""
        return [f for f in self.findings if not f.ok]


# --------------------------------------------------------------------------- matching


def glob_match(pattern: str, path: str) -> bool:
    """Whether the relative posix ``path`` matches ``pattern`` segment by segment."""
    return _match_parts(tuple(pattern.split("/")), tuple(path.split("/")))


def _match_parts(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match_parts(rest, parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], head) and _match_parts(rest, parts[1:])


def validate_allowlist(entries: tuple[Allow, ...] = ALLOWLIST) -> list[str]:
    """Mistakes in the allowlist itself: unknown roles or kinds, blanket globs.

    A pattern with ``**`` must end in a file name with a literal prefix (``fake_*.py``),
    so no entry can quietly cover a whole folder such as ``tests/**``.
    """
    errors = []
    for entry in entries:
        label = f"allowlist entry {entry.path!r}"
        if entry.role not in ROLES:
            errors.append(f"{label}: unknown role {entry.role!r}")
        for kind in entry.kinds:
            if kind not in KINDS:
                errors.append(f"{label}: unknown kind {kind!r}")
            elif kind in NEVER_ALLOWED:
                errors.append(f"{label}: kind {kind!r} can never be allowed")
        if not entry.reason.strip():
            errors.append(f"{label}: missing reason")
        segments = entry.path.split("/")
        if "**" in segments and segments[-1][:1] in ("", "*", "?", "[", "."):
            errors.append(f"{label}: a '**' pattern must end in a named file glob")
        if (entry.name or entry.target) and set(entry.kinds) - {"console-script"}:
            errors.append(f"{label}: name/target only narrow console scripts")
    return errors


def classify(finding: Finding, entries: tuple[Allow, ...], used: set[int]) -> None:
    """Set the finding's verdict: the first allowlist entry that matches, or why none does."""
    for zone, why in FORBIDDEN_ZONES:
        if glob_match(zone, finding.path):
            finding.reason = why
            return
    path_only: Allow | None = None
    for index, entry in enumerate(entries):
        if not glob_match(entry.path, finding.path):
            continue
        if finding.kind not in entry.kinds:
            path_only = path_only or entry
            continue
        if entry.name is not None and entry.name != finding.name:
            continue
        if entry.target is not None and entry.target != finding.target:
            continue
        finding.ok, finding.role, finding.reason = True, entry.role, entry.reason
        used.add(index)
        return
    finding.reason = _why_not(finding, path_only)


def _why_not(finding: Finding, path_only: Allow | None) -> str:
    """The most specific reason a finding is not allowed."""
    kind = finding.kind
    if kind == "unreadable":
        return finding.detail or "could not be read"
    if kind == "gui-script":
        return "gui scripts are never allowed: dsh is the only launcher"
    if kind == "wheel-script":
        return "installs a file into the environment's bin/: a second launcher beside dsh"
    if kind == "console-script":
        if finding.name == "dsh" and finding.path != "pyproject.toml":
            return ("only the root pyproject.toml declares `dsh`; a second distribution "
                    "claiming it would clash")
        if finding.name == "dsh":
            return f"the dsh launcher must point at dsh.cli.main:main, not {finding.target}"
        return ("dsh is the only console script; applications are profiles run as "
                "`dsh --profile NAME`")
    if path_only is not None:
        return (f"{path_only.path} is allowlisted as {path_only.role} for "
                f"{', '.join(path_only.kinds)} only")
    if finding.imports:
        started = ", ".join(finding.imports)
        return (f"starts {started} directly, outside the launcher; run it as "
                "`dsh --profile NAME` with a patch instead")
    if kind == "main-module":
        return (f"`python -m {finding.name}` would be a second launcher; "
                "`python -m dsh` is the only one")
    if kind == "main-guard":
        return ("a __main__ guard makes this module an application; only the launcher, "
                "the freeze entry, test peers and build scripts may have one")
    return ("an executable script outside scripts/, .ci/run, wheels/ and the test peers "
            "(tests/**/fake_*.py)")


# --------------------------------------------------------------------------- scanning


def iter_files(root: Path) -> Iterator[Path]:
    """Every file under ``root``, skipping caches, build output and virtual environments."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIP_DIRS and not d.endswith(SKIP_DIR_SUFFIXES)
            and not (here / d / "pyvenv.cfg").exists()
        )
        for name in sorted(filenames):
            yield here / name


def scan(root: Path) -> list[Finding]:
    """All entry points under ``root``, in path order."""
    findings: list[Finding] = []
    for path in iter_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            if path.name.endswith((".py", ".pyw")) or path.name in ("pyproject.toml",
                                                                    "setup.cfg"):
                data = path.read_bytes()
            else:
                with path.open("rb") as handle:
                    data = handle.read(256)
        except OSError:
            continue  # broken symlinks, sockets, unreadable files: nothing to launch
        if data.startswith(b"#!"):
            first = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
            findings.append(Finding(rel, 1, "shebang", first))
        if path.name == "pyproject.toml":
            findings.extend(_scan_pyproject(rel, data))
        elif path.name == "setup.cfg":
            findings.extend(_scan_setup_cfg(rel, data))
        elif path.name == "__main__.py":
            pkg = _module_name(path.parent / "__init__.py", root) or path.parent.name
            findings.append(Finding(rel, None, "main-module", pkg,
                                    imports=_runtime_imports_of(data)))
        elif path.suffix in (".py", ".pyw"):
            findings.extend(_scan_module(rel, path, root, data))
            if path.name == "setup.py":
                findings.extend(_scan_setup_py(rel, data))
    return findings


def _module_name(path: Path, root: Path) -> str:
    """The dotted module name of ``path``, climbing while folders are packages."""
    parts = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while folder != root and (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def _scan_module(rel: str, path: Path, root: Path, data: bytes) -> list[Finding]:
    """A ``main-guard`` finding if the module tests ``__name__`` against ``"__main__"``."""
    if b"__main__" not in data:
        return []
    name = _module_name(path, root)
    try:
        tree = ast.parse(data, filename=rel)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        return [Finding(rel, getattr(exc, "lineno", None), "unreadable", name,
                        detail=f"mentions __main__ but does not parse ({message}), "
                               "so its guard cannot be checked")]
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)) and _is_main_test(node.test):
            return [Finding(rel, node.lineno, "main-guard", name,
                            imports=_runtime_imports(tree))]
    return []


def _is_main_test(node: ast.expr) -> bool:
    """``__name__ == "__main__"`` in either order, ``in ("__main__", ...)``, or an and/or."""
    if isinstance(node, ast.BoolOp):
        return any(_is_main_test(value) for value in node.values)
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return False
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if isinstance(op, ast.Eq):
        return (_is_dunder_name(left) and _is_main_str(right)) or (
            _is_main_str(left) and _is_dunder_name(right))
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        return _is_dunder_name(left) and any(_is_main_str(e) for e in right.elts)
    return False


def _is_dunder_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "__name__"


def _is_main_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "__main__"


def _runtime_imports(tree: ast.AST) -> tuple[str, ...]:
    """Modules of the runtime or its plugins imported by a module (for the demo reason)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in _RUNTIME_ROOTS and name not in found:
                found.append(name)
    return tuple(found)


def _runtime_imports_of(data: bytes) -> tuple[str, ...]:
    try:
        return _runtime_imports(ast.parse(data))
    except (SyntaxError, ValueError):
        return ()


_TOML_KEY = re.compile(r"""^\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*=""")


def _toml_line(lines: list[str], table: str, key: str) -> int | None:
    """Best-effort line of ``key`` in ``[table]`` (tomllib keeps no positions)."""
    current = None
    fallback = None
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if stripped.startswith("["):
            current = re.sub(r"""["'\s\[\]]""", "", stripped.split("#")[0])
            continue
        match = _TOML_KEY.match(stripped)
        if match and key in match.groups():
            if current == table:
                return number
            fallback = fallback or number
        elif fallback is None and re.search(rf"""[{{,\s]["']?{re.escape(key)}["']?\s*=""", raw):
            fallback = number
    return fallback


def _scan_pyproject(rel: str, data: bytes) -> list[Finding]:
    """Script findings of one ``pyproject.toml``; plugin entry-point groups are skipped."""
    try:
        text = data.decode("utf-8")
        doc = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return [Finding(rel, None, "unreadable", "pyproject.toml",
                        detail=f"not valid TOML ({exc}), so its scripts cannot be checked")]
    lines = text.splitlines()
    findings: list[Finding] = []
    project = _table(doc, "project")
    tables: list[tuple[str, str, Any]] = [
        ("console-script", "project.scripts", project.get("scripts")),
        ("gui-script", "project.gui-scripts", project.get("gui-scripts")),
        ("console-script", "tool.poetry.scripts", _table(doc, "tool", "poetry").get("scripts")),
    ]
    groups = project.get("entry-points")
    if isinstance(groups, dict):
        for group, kind in _SCRIPT_GROUPS.items():
            tables.append((kind, f"project.entry-points.{group}", groups.get(group)))
    for kind, table_name, table in tables:
        if table is None:
            continue
        if not isinstance(table, dict):
            findings.append(Finding(rel, None, "unreadable", table_name,
                                    detail=f"[{table_name}] is not a table"))
            continue
        for name, target in table.items():
            findings.append(Finding(rel, _toml_line(lines, table_name, name), kind, name,
                                    target=str(target)))
    dynamic = project.get("dynamic") or []
    for key in ("scripts", "gui-scripts", "entry-points"):
        if key in dynamic:
            findings.append(Finding(
                rel, _toml_line(lines, "project", "dynamic"), "unreadable", f"dynamic {key}",
                detail=f"project.{key} is dynamic, so its scripts cannot be checked"))
    hatch_build = _table(doc, "tool", "hatch", "build")
    for where, build in (("tool.hatch.build", hatch_build),
                         ("tool.hatch.build.targets.wheel",
                          _table(hatch_build, "targets", "wheel"))):
        shared = build.get("shared-scripts")
        if isinstance(shared, dict):
            for source, dest in shared.items():
                findings.append(Finding(
                    rel, _toml_line(lines, f"{where}.shared-scripts", source),
                    "wheel-script", str(dest), target=source))
    return findings


def _table(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``doc[k1][k2]...`` or an empty table when any level is missing or not a table."""
    for key in keys:
        value = doc.get(key)
        if not isinstance(value, dict):
            return {}
        doc = value
    return doc


def _scan_setup_cfg(rel: str, data: bytes) -> list[Finding]:
    """Script findings of ``[options.entry_points]`` in a ``setup.cfg``."""
    text = data.decode("utf-8", "replace")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=rel)
    except configparser.Error as exc:
        return [Finding(rel, None, "unreadable", "setup.cfg",
                        detail=f"not a valid setup.cfg ({exc.message.splitlines()[0]})")]
    if not parser.has_section("options.entry_points"):
        return []
    lines = text.splitlines()
    findings = []
    for group, kind in _SCRIPT_GROUPS.items():
        value = parser.get("options.entry_points", group, fallback="")
        for item in value.splitlines():
            name, sep, target = item.partition("=")
            if not sep:
                continue
            name = name.strip()
            line = next((n for n, raw in enumerate(lines, 1)
                         if re.match(rf"\s*{re.escape(name)}\s*=", raw)), None)
            findings.append(Finding(rel, line, kind, name, target=target.strip()))
    return findings


_SETUP_GROUP = re.compile(
    r"""["']?(console_scripts|gui_scripts)["']?\s*[:=]\s*[\[(](.*?)[\])]""", re.S)
_SETUP_ITEM = re.compile(r"""["']\s*([A-Za-z0-9_.-]+)\s*=\s*([^"']+?)\s*["']""")


def _scan_setup_py(rel: str, data: bytes) -> list[Finding]:
    """Script findings of a ``setup.py``, by regex (it is never executed)."""
    text = data.decode("utf-8", "replace")
    findings = []
    for group in _SETUP_GROUP.finditer(text):
        kind = _SCRIPT_GROUPS[group.group(1)]
        for item in _SETUP_ITEM.finditer(group.group(2)):
            line = text.count("\n", 0, group.start(2) + item.start()) + 1
            findings.append(Finding(rel, line, kind, item.group(1), target=item.group(2)))
    if not findings and re.search(r"console_scripts|gui_scripts", text):
        line = text.count("\n", 0, re.search(r"console_scripts|gui_scripts", text).start()) + 1
        findings.append(Finding(
            rel, line, "unreadable", "setup.py",
            detail="mentions console/gui scripts the regex scan cannot read; "
                   "declare them in pyproject.toml"))
    return findings


# --------------------------------------------------------------------------- report


def verify(root: Path, entries: tuple[Allow, ...] = ALLOWLIST) -> Report:
    """Scan ``root`` and classify every entry point against ``entries``."""
    findings = sorted(scan(root), key=lambda f: (f.path, f.line or 0, f.kind, f.name))
    report = Report(root=str(root), findings=findings)
    used: set[int] = set()
    for finding in report.findings:
        classify(finding, entries, used)
    report.unused = [entry for i, entry in enumerate(entries) if i not in used]
    return report


def _problem_line(finding: Finding) -> str:
    return (f"{finding.where}: {finding.kind} {finding.name}: "
            f"not in the allowlist ({finding.reason})")


def _to_json(report: Report) -> dict[str, Any]:
    def finding(f: Finding) -> dict[str, Any]:
        data = asdict(f)
        data.pop("ok")
        return data

    return {
        "ok": not report.problems,
        "root": report.root,
        "count": len(report.findings),
        "entry_points": [finding(f) for f in report.findings if f.ok],
        "problems": [finding(f) for f in report.problems],
        "unused": [asdict(entry) for entry in report.unused],
        "allowlist": [asdict(entry) for entry in ALLOWLIST],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the verifier; return the exit status (0 clean, 1 problems, 2 usage error)."""
    parser = argparse.ArgumentParser(
        description="Check that dsh is the only application launcher in the tree.")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="tree to scan (default: this repository)")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list every entry point with its role, and unused entries")
    args = parser.parse_args(argv)
    if tomllib is None:
        print("verify_entrypoints: Python 3.10 needs the tomli package to read "
              "pyproject.toml (pip install tomli)", file=sys.stderr)
        return 2
    errors = validate_allowlist()
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    root: Path = args.root.resolve()
    if not root.is_dir():
        print(f"verify_entrypoints: --root {args.root}: not a directory", file=sys.stderr)
        return 2
    report = verify(root)
    problems = report.problems
    if args.json:
        print(json.dumps(_to_json(report), indent=2))
        return 1 if problems else 0
    if args.verbose:
        for f in report.findings:
            if f.ok:
                print(f"{f.where}: {f.kind} {f.name}: {f.role} ({f.reason})")
        for entry in report.unused:
            print(f"unused allowlist entry: {entry.path} [{entry.role}] ({entry.reason})")
    for f in problems:
        print(_problem_line(f))
    if problems:
        print(f"{len(problems)} of {len(report.findings)} entry points not classified")
        return 1
    print(f"{len(report.findings)} entry points, all classified")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
