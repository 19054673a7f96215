"""``scripts/verify_entrypoints.py``: each illegal entry point fails, clean trees pass.

Every case writes a small fixture tree under ``tmp_path`` (a clean copy of the project's
layout plus one change) and runs the real script on it as a process, as CI does. The last
tests run it on this repository itself, so a new unclassified entry point fails the suite.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "verify_entrypoints.py"

GUARD = 'if __name__ == "__main__":\n    main()\n'

PYPROJECT = """\
[project]
name = "dsh"
version = "0.0.0"

[project.scripts]
dsh = "dsh.cli.main:main"

[project.entry-points."dsh.plugins"]
sdk-jsonrpc-server = "dsh.runtime.servers.sdk:SdkServer"

[project.entry-points."dsh.bundles"]
dsh-base = "dsh.bundles:base"
"""

# The project's layout with one of every allowed entry point, plus decoys that mention the
# guard only in strings and comments.
CLEAN: dict[str, str] = {
    "pyproject.toml": PYPROJECT,
    ".ci/run": "#!/usr/bin/env bash\nset -euo pipefail\npython3 -m pytest -q\n",
    "src/dsh/__init__.py": "",
    "src/dsh/cli/__init__.py": "",
    "src/dsh/cli/main.py": "def main() -> None:\n    pass\n",
    "src/dsh/__main__.py": "from dsh.cli.main import main\n\n" + GUARD,
    "src/dsh/runtime/__init__.py": "",
    "src/dsh/runtime/app.py": textwrap.dedent('''\
        """Never write `if __name__ == "__main__":` here."""
        # if __name__ == "__main__": main()
        GUARD = 'if __name__ == "__main__":'
        if __name__ == "dsh.runtime.app":
            pass
        '''),
    "scripts/bench.py": "def main() -> None:\n    pass\n\n" + GUARD,
    "scripts/dev-setup.sh": "#!/bin/sh\necho setup\n",
    "tests/sdk/fake_runtime.py": "def main() -> None:\n    pass\n\n" + GUARD,
    "tests/providers/fake_openai_server.py": "def main() -> None:\n    pass\n\n" + GUARD,
    "tests/test_cli.py": "def test_nothing() -> None:\n    assert True\n",
    "wheels/freeze_entry.py": "from dsh.cli.main import main\n\n" + GUARD,
    "examples/offline/patch.yml": "provider: scripted\n",
}


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root`` and return it."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def verify(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real verifier as a process."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


def verify_tree(tmp_path: Path, changes: dict[str, str | None], *args: str
                ) -> subprocess.CompletedProcess[str]:
    """Verify the clean tree with ``changes`` applied (``None`` deletes a file)."""
    files = {**CLEAN, **{k: v for k, v in changes.items() if v is not None}}
    for rel, text in changes.items():
        if text is None:
            files.pop(rel)
    return verify("--root", str(make_tree(tmp_path / "tree", files)), *args)


def test_clean_tree_passes(tmp_path: Path) -> None:
    result = verify_tree(tmp_path, {})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "8 entry points, all classified\n"


def test_clean_tree_json_report(tmp_path: Path) -> None:
    result = verify_tree(tmp_path, {}, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == []
    roles = {(e["path"], e["kind"]): e["role"] for e in report["entry_points"]}
    assert roles == {
        ("pyproject.toml", "console-script"): "launcher",
        ("src/dsh/__main__.py", "main-module"): "launcher",
        ("wheels/freeze_entry.py", "main-guard"): "freeze-entry",
        ("tests/sdk/fake_runtime.py", "main-guard"): "test-runtime-peer",
        ("tests/providers/fake_openai_server.py", "main-guard"): "test-model-server",
        ("scripts/bench.py", "main-guard"): "build-script",
        ("scripts/dev-setup.sh", "shebang"): "build-script",
        (".ci/run", "shebang"): "build-script",
    }
    assert all(entry["reason"] for entry in report["allowlist"])


def test_verbose_lists_unused_allowlist_entries(tmp_path: Path) -> None:
    result = verify_tree(tmp_path, {"wheels/freeze_entry.py": None}, "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "unused allowlist entry: wheels/*entry.py [freeze-entry]" in result.stdout
    assert "src/dsh/__main__.py: main-module dsh: launcher" in result.stdout


ILLEGAL: dict[str, tuple[dict[str, str | None], str]] = {
    "new console script": (
        {"pyproject.toml": PYPROJECT.replace(
            'dsh = "dsh.cli.main:main"\n',
            'dsh = "dsh.cli.main:main"\ndsh-foo = "dsh.foo:main"\n')},
        "pyproject.toml:7: console-script dsh-foo: not in the allowlist "
        "(dsh is the only console script"),
    "console_scripts entry point": (
        {"pyproject.toml": PYPROJECT + '\n[project.entry-points.console_scripts]\n'
                                       'serve = "dsh.runtime.app:main"\n'},
        "pyproject.toml:15: console-script serve: not in the allowlist "
        "(dsh is the only console script"),
    "dsh pointing elsewhere": (
        {"pyproject.toml": PYPROJECT.replace('"dsh.cli.main:main"', '"dsh.runtime.app:main"')},
        "pyproject.toml:6: console-script dsh: not in the allowlist "
        "(the dsh launcher must point at "
        "dsh.cli.main:main, not dsh.runtime.app:main)"),
    "dsh claimed by the runtime wheel": (
        {"wheels/pyproject.toml": '[project]\nname = "dsh-runtime-bin"\n\n'
                                  '[project.scripts]\ndsh = "dsh.cli.main:main"\n'},
        "wheels/pyproject.toml:5: console-script dsh: not in the allowlist "
        "(only the root pyproject.toml declares `dsh`"),
    "gui script": (
        {"pyproject.toml": PYPROJECT + '\n[project.gui-scripts]\ndsh-gui = "dsh.gui:main"\n'},
        "pyproject.toml:15: gui-script dsh-gui: not in the allowlist (gui scripts are never"),
    "gui_scripts entry point": (
        {"pyproject.toml": PYPROJECT + '\n[project.entry-points."gui_scripts"]\n'
                                       'dsh = "dsh.cli.main:main"\n'},
        "pyproject.toml:15: gui-script dsh: not in the allowlist (gui scripts are never"),
    "hatch shared script": (
        {"pyproject.toml": PYPROJECT + '\n[tool.hatch.build.targets.wheel.shared-scripts]\n'
                                       '"tools/run.sh" = "run"\n'},
        "pyproject.toml:15: wheel-script run: not in the allowlist "
        "(installs a file into the environment's bin/"),
    "dynamic scripts": (
        {"pyproject.toml": PYPROJECT.replace('version = "0.0.0"', 'dynamic = ["scripts"]')},
        "pyproject.toml:3: unreadable dynamic scripts: not in the allowlist "
        "(project.scripts is dynamic"),
    "invalid pyproject": (
        {"pyproject.toml": PYPROJECT + "[project\n"},
        "pyproject.toml: unreadable pyproject.toml: not in the allowlist (not valid TOML"),
    "setup.cfg console script": (
        {"setup.cfg": "[metadata]\nname = x\n\n[options.entry_points]\n"
                      "console_scripts =\n    xtool = x.cli:main\n"},
        "setup.cfg:6: console-script xtool: not in the allowlist"),
    "setup.py console script": (
        {"setup.py": 'from setuptools import setup\n\nsetup(\n    name="x",\n'
                     '    entry_points={"console_scripts": [\n        "xtool = x.cli:main",\n'
                     "    ]},\n)\n"},
        "setup.py:6: console-script xtool: not in the allowlist"),
    "shebang file": (
        {"tools/run": "#!/usr/bin/env python3\nprint('hi')\n"},
        "tools/run:1: shebang #!/usr/bin/env python3: not in the allowlist "
        "(an executable script outside scripts/"),
    "shebang on a test helper": (
        {"tests/helper.py": "#!/usr/bin/env python3\nX = 1\n"},
        "tests/helper.py:1: shebang #!/usr/bin/env python3: not in the allowlist"),
    "shebang on the launcher module": (
        {"src/dsh/__main__.py": "#!/usr/bin/env python3\n" + CLEAN[
            "src/dsh/__main__.py"]},
        "src/dsh/__main__.py:1: shebang #!/usr/bin/env python3: not in the allowlist "
        "(src/dsh/__main__.py is allowlisted as launcher for main-module only)"),
    "demo script starting a plugin": (
        {"examples/demo.py": textwrap.dedent("""\
            import asyncio

            from dsh.runtime.servers.sdk import SdkServer

            if __name__ == "__main__":
                asyncio.run(SdkServer().serve())
            """)},
        "examples/demo.py:5: main-guard demo: not in the allowlist "
        "(starts dsh.runtime.servers.sdk directly, outside the launcher"),
    "__main__.py in the runtime package": (
        {"src/dsh/runtime/__main__.py": "from dsh.runtime.app import run\n\nrun()\n"},
        "src/dsh/runtime/__main__.py: main-module dsh.runtime: not in the allowlist "
        "(the runtime is never an application by itself"),
    "__main__ guard in a runtime module": (
        {"src/dsh/runtime/app.py": "def main() -> None:\n    pass\n\n"
                                       "if '__main__' == __name__:\n    main()\n"},
        "src/dsh/runtime/app.py:4: main-guard dsh.runtime.app: not in the allowlist "
        "(the runtime is never an application by itself"),
    "__main__.py in the runtime wheel package": (
        {"wheels/dsh_runtime_bin/__init__.py": "",
         "wheels/dsh_runtime_bin/__main__.py": "print('runtime')\n"},
        "wheels/dsh_runtime_bin/__main__.py: main-module dsh_runtime_bin: not in the "
        "allowlist (the runtime wheel adds no launcher of its own"),
    "second way into the launcher": (
        {"src/dsh/cli/main.py": "def main() -> None:\n    pass\n\n" + GUARD},
        "src/dsh/cli/main.py:4: main-guard dsh.cli.main: not in the allowlist "
        "(a __main__ guard makes this module an application"),
    "stray __main__.py": (
        {"tools/pkg/__init__.py": "", "tools/pkg/__main__.py": "print('hi')\n"},
        "tools/pkg/__main__.py: main-module pkg: not in the allowlist "
        "(`python -m pkg` would be a second launcher"),
    "guard in a test that is not a peer": (
        {"tests/test_cli.py": CLEAN["tests/test_cli.py"] + "\n" + GUARD},
        "tests/test_cli.py:4: main-guard test_cli: not in the allowlist "
        "(a __main__ guard makes this module an application"),
    "unparsable module mentioning __main__": (
        {"examples/broken.py": 'if __name__ == "__main__"\n    run()\n'},
        "examples/broken.py:1: unreadable broken: not in the allowlist "
        "(mentions __main__ but does not parse"),
}


@pytest.mark.parametrize("case", sorted(ILLEGAL))
def test_illegal_entry_point_fails(tmp_path: Path, case: str) -> None:
    changes, expected = ILLEGAL[case]
    result = verify_tree(tmp_path, changes)
    assert result.returncode == 1, result.stdout + result.stderr
    problems = [line for line in result.stdout.splitlines() if "not in the allowlist" in line]
    assert len(problems) == 1, result.stdout
    assert problems[0].startswith(expected), result.stdout
    assert result.stdout.endswith("entry points not classified\n")


def test_illegal_json_report_names_the_problem(tmp_path: Path) -> None:
    changes, _ = ILLEGAL["demo script starting a plugin"]
    result = verify_tree(tmp_path, changes, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    [problem] = report["problems"]
    assert problem["path"] == "examples/demo.py"
    assert problem["kind"] == "main-guard"
    assert problem["imports"] == ["dsh.runtime.servers.sdk"]


def test_skipped_folders_are_not_scanned(tmp_path: Path) -> None:
    junk = "#!/usr/bin/env python3\n" + GUARD
    changes: dict[str, str | None] = {
        f"{folder}/tool.py": junk
        for folder in (".git/hooks", "build/lib", "dist", ".venv/bin", "node_modules/x",
                       "x.egg-info", "src/dsh/__pycache__", "venv2/bin")
    }
    changes["venv2/pyvenv.cfg"] = "home = /usr/bin\n"
    result = verify_tree(tmp_path, changes)
    assert result.returncode == 0, result.stdout


def test_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    result = verify("--root", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert "not a directory" in result.stderr


@pytest.fixture
def verifier(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script imported as a module, for its pure helpers."""
    spec = importlib.util.spec_from_file_location("verify_entrypoints", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "verify_entrypoints", module)
    spec.loader.exec_module(module)
    return module


def test_allowlist_is_valid_and_rejects_blanket_globs(verifier: ModuleType) -> None:
    assert verifier.validate_allowlist() == []
    allow = verifier.Allow
    bad = (
        allow("build-script", ("main-guard",), "tests/**", "everything in tests"),
        allow("build-script", ("main-guard",), "tests/**/*.py", "every test module"),
        allow("launcher", ("gui-script",), "pyproject.toml", "a gui launcher"),
        allow("maintainer", ("shebang",), "tools/x", "unknown role"),
    )
    errors = verifier.validate_allowlist(bad)
    assert len(errors) == 4, errors


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("scripts/*.py", "scripts/bench.py", True),
    ("scripts/*.py", "scripts/sub/bench.py", False),
    ("tests/**/fake_*.py", "tests/fake_runtime.py", True),
    ("tests/**/fake_*.py", "tests/sdk/deep/fake_runtime.py", True),
    ("tests/**/fake_*.py", "tests/sdk/runtime_fake.py", False),
    ("src/dsh/runtime/**", "src/dsh/runtime/__main__.py", True),
    ("wheels/**/dsh_runtime_bin/**", "wheels/src/dsh_runtime_bin/__main__.py", True),
])
def test_glob_match(verifier: ModuleType, pattern: str, path: str, matches: bool) -> None:
    assert verifier.glob_match(pattern, path) is matches


def test_real_repository_passes() -> None:
    result = verify()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.endswith("entry points, all classified\n")


def test_real_repository_has_the_launchers() -> None:
    report = json.loads(verify("--json").stdout)
    launchers = {(e["path"], e["kind"], e["name"]) for e in report["entry_points"]
                 if e["role"] == "launcher"}
    assert launchers == {("pyproject.toml", "console-script", "dsh"),
                         ("src/dsh/__main__.py", "main-module", "dsh")}
