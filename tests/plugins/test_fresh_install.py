"""A new user's whole plugin path, in a fresh virtualenv with a plain ``pip install``.

The module's virtualenv gets this repository with ``pip install '<repo>[python]'`` (the
README's install: the python runtime, no dev tools), as a user installs it. Then, with
that environment's ``dsh`` only: ``dsh plugin new`` writes a setuptools plugin and a
hatchling one, ``dsh plugin add`` installs both into a new profile (each built in
isolation, fetching its own backend), ``dsh doctor`` finds every check ok, a headless
session whose scripted model calls both new tools answers, the scaffold's own test
passes, and ``remove`` takes both away. And the worked example of ``docs/plugins.md`` runs
command by command as the guide writes it, each printing what the guide shows.

One virtualenv serves the module (building it is most of the time).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX virtualenv layout")

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 900
SCRIPT = """\
- text: "Counting, twice."
  tool_calls:
    - {name: word_count, arguments: {text: "one two three"}}
    - {name: tally, arguments: {text: "a\\nb"}}
- text: "Three words, then two lines."
"""
SCRIPTED = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path script.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
"""


class Fresh:
    """The virtualenv, a home and a work folder; :meth:`dsh` runs its ``dsh``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.bin = self.venv / "bin"
        self.home = root / "home"
        self.work = root / "work"
        self.work.mkdir()
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith(("DSH_", "PYTHON", "VIRTUAL_ENV"))}
        environ["PATH"] = f"{self.bin}{os.pathsep}{environ.get('PATH', '')}"
        environ["DSH_HOME"] = str(self.home)
        self.env = environ

    def run(self, *argv: str, timeout: float = 300, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=cwd or self.work, env=self.env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout,
                              check=False)

    def dsh(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "dsh"), *args, timeout=timeout)

    def ok(self, done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
        assert done.returncode == 0, f"{done.args}\n{done.stdout}\n{done.stderr}"
        return done


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    env = Fresh(tmp_path_factory.mktemp("fresh"))
    venv.EnvBuilder(with_pip=True).create(env.venv)
    env.ok(env.run(str(env.bin / "python"), "-m", "pip", "install", "--quiet",
                   "--disable-pip-version-check", f"{REPO}[python]", timeout=INSTALL_TIMEOUT))
    yield env


def test_the_install_is_plain(fresh: Fresh) -> None:
    done = fresh.ok(fresh.run(str(fresh.bin / "python"), "-c",
                              "import dsh, importlib.util as u; print(dsh.__file__); "
                              "print(u.find_spec('pytest') is None)"))
    where, no_pytest = done.stdout.splitlines()
    assert where.startswith(str(fresh.venv)) and no_pytest == "True"
    assert fresh.ok(fresh.dsh("--version")).stdout.startswith("dsh ")


def test_new_add_doctor_session_remove(fresh: Fresh) -> None:
    made = fresh.ok(fresh.dsh("plugin", "new", "word-count"))
    assert "created ./word-count/ (plugin word-count, setuptools)" in made.stdout
    fresh.ok(fresh.dsh("plugin", "new", "tally", "--backend", "hatchling", "--dir",
                       str(fresh.work)))

    first = fresh.ok(fresh.dsh("plugin", "--profile", "p", "add", "./word-count"))
    assert "created profile 'p' from the headless template" in first.stderr
    second = fresh.ok(fresh.dsh("plugin", "--profile", "p", "add", "./tally"))
    assert second.stdout == "bundles: dsh-base, dsh-headless, word-count, tally\n"
    listed = json.loads(fresh.ok(fresh.dsh("plugin", "--profile", "p", "list", "--json")).stdout)
    assert [(r["distribution"], r["version"], r["bundles"])
            for r in listed["data"]["requirements"]] == [
        ("word-count", "0.1.0", ["word-count"]), ("tally", "0.1.0", ["tally"])]

    doctor = json.loads(fresh.dsh("doctor", "--profile", "p", "--json").stdout)
    checks = {c["id"]: c for c in doctor["data"]["checks"]}
    assert doctor["data"]["failed"] == 0, [c for c in checks.values() if c["status"] == "fail"]
    assert checks["plugin.tools:word-count"]["message"] == (
        "word_count:WordCountPlugin 0.1.0")
    assert checks["plugin.tools:tally"]["message"] == "tally:TallyPlugin 0.1.0"

    (fresh.work / "script.yml").write_text(SCRIPT)
    (fresh.work / "scripted.yml").write_text(SCRIPTED)
    session = fresh.ok(fresh.dsh("--profile", "p", "--patch", "scripted.yml", "--json",
                                 "count these"))
    events = [json.loads(line) for line in session.stdout.splitlines()]
    results = [_text(e["data"]["message"]) for e in events if e["type"] == "tool/result"]
    assert results == ["3 words, 1 lines, 13 characters", "2 words, 2 lines, 3 characters"]
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"]["kind"] == "completed"

    removed = fresh.ok(fresh.dsh("plugin", "--profile", "p", "remove", "word-count", "tally"))
    assert removed.stdout == "bundles: dsh-base, dsh-headless\n"
    listed = json.loads(fresh.ok(fresh.dsh("plugin", "--profile", "p", "list", "--json")).stdout)
    assert listed["data"] == {"bundles": ["dsh-base", "dsh-headless"], "requirements": [],
                              "installed": []}


def test_the_scaffolds_own_test_passes(fresh: Fresh) -> None:
    folder = fresh.work / "scaffolded"
    folder.mkdir()
    fresh.ok(fresh.dsh("plugin", "new", "my-counter", "--dir", str(folder)))
    package = folder / "my-counter"
    fresh.ok(fresh.run(str(fresh.bin / "python"), "-m", "pip", "install", "--quiet",
                       "--disable-pip-version-check", f"{package}[test]",
                       timeout=INSTALL_TIMEOUT))
    tested = fresh.run(str(fresh.bin / "python"), "-m", "pytest", "-q", "-p",
                       "no:cacheprovider", str(package / "tests"), cwd=package)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "2 passed" in tested.stdout


def _text(message: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in message["content"])


GUIDE = REPO / "docs" / "plugins.md"


def guide_steps() -> list[tuple[str, list[str]]]:
    """The worked example's commands (``$ ...`` lines of its ``console`` blocks, in order),
    each with the output lines the guide shows under it."""
    text = GUIDE.read_text(encoding="utf-8")
    example = text.split("## The worked example", 1)[1].split("\n## ", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", example, flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
    return steps


def shown(expected: list[str], lines: list[str], home: Path) -> str | None:
    """Where the output ``lines`` miss the guide's ``expected`` ones (None: they do not):
    each must match a line, in order; ``...`` stands for anything (a whole line of it for
    any lines), and ``~/.dsh`` for the home."""
    at = 0
    for want in expected:
        if want.strip() == "...":
            continue
        pattern = re.escape(want.replace("~/.dsh", str(home))).replace(r"\.\.\.", ".*")
        while at < len(lines) and not re.fullmatch(pattern, lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def test_the_plugin_guide_runs_as_written(fresh: Fresh) -> None:
    """The guide's offline run used to need two files shown only inside the scaffold's
    test; the scaffold ships them now (``offline/``), and every command the guide shows
    runs here as written (``bash -c``, from one folder), printing what the guide says."""
    steps = guide_steps()
    commands = [command for command, _ in steps]
    assert commands[0] == "dsh plugin new word-count"
    assert any("--patch word-count/offline/scripted.yml" in c for c in commands), commands
    where = fresh.work / "guide"
    where.mkdir()
    for command, expected in steps:
        if not expected:
            continue  # a run with a real model: it needs a key, and the guide shows nothing
        done = fresh.run("bash", "-c", command, cwd=where, timeout=INSTALL_TIMEOUT)
        assert done.returncode == 0, f"$ {command}\n{done.stdout}\n{done.stderr}"
        lines = done.stderr.splitlines() + done.stdout.splitlines()
        missing = shown(expected, lines, fresh.home)
        assert missing is None, f"$ {command}\nthe guide shows {missing!r}; it printed:\n" + (
            "\n".join(lines))
