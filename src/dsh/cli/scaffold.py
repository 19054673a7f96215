"""``dsh plugin new NAME``: a working plugin package to start from.

The package has one tool (``count_words``-style: it counts a text's words, lines and
characters, so it needs no key, file or network), the plugin class registering it, the
bundle (``patch.yml``) that inserts the plugin's row into a profile's ``tools`` group, the
``dsh.bundles`` entry point naming that bundle, a README with the steps, a scripted model
for offline runs (``offline/script.yml``, and ``offline/scripted.yml``, the patch that
makes a profile use it), and a test that runs the tool through a real session of that
model (``dsh.sdk``), so the test and a person's offline run use the same two files. It
installs with ``dsh plugin --profile P add ./NAME`` as it is; ``docs/plugins.md`` walks
through it.

The folder is written beside its place and renamed in, so a failure (or a folder of that
name already there) leaves nothing behind.
"""

from __future__ import annotations

import keyword
import os
import re
import shutil
import tempfile
from pathlib import Path

from dsh.config import shipped
from dsh.core.errors import ConfigError, UsageError

BACKENDS = ("setuptools", "hatchling")
_DIST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")

_BUILD = {
    "setuptools": """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
""",
    "hatchling": """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
""",
}
_PACKAGING = {
    "setuptools": """\
[tool.setuptools]
packages = ["__PACKAGE__"]

[tool.setuptools.package-data]
__PACKAGE__ = ["patch.yml"]  # the bundle must be in the wheel
""",
    "hatchling": """\
[tool.hatch.build.targets.wheel]
packages = ["__PACKAGE__"]  # patch.yml, inside the package, is included with it
""",
}

PYPROJECT = """\
__BUILD__
[project]
name = "__NAME__"
version = "0.1.0"
description = "A dsh plugin: the __TOOL__ tool."
readme = "README.md"
requires-python = ">=3.10"
# No dependency on dsh itself: dsh provides dsh.runtime to the plugins it runs, and a
# dsh listed here would be installed again into every profile's plugin environment.
dependencies = []

[project.optional-dependencies]
test = ["pytest>=8"]

# The bundle: `dsh plugin add` appends "__BUNDLE__" to the profile's bundles, and the
# profile then applies __PACKAGE__/patch.yml.
[project.entry-points."dsh.bundles"]
__BUNDLE__ = "__PACKAGE__"

__PACKAGING__"""

INIT = '''\
"""The ``__TOOL__`` tool, as a dsh plugin.

``__CLASS__`` is the plugin: a class with a ``Manifest`` whose ``apply`` registers what
the plugin offers (here one tool). The bundle (``patch.yml`` beside this file) inserts
its row into the profile's ``tools`` group, naming this class as ``__PACKAGE__:__CLASS__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.tools.base import ToolContext, ToolResult

__version__ = "0.1.0"
DEFAULT_MAX_CHARS = 100_000


class CountTool:
    """The tool the model calls: counts the words, lines and characters of a text.

    A tool is any object with ``name``, ``description``, ``parameters`` (the JSON Schema
    the model sees; arguments are checked against it before ``call``), ``mutating`` and
    ``async call(args, ctx)``. Failures are answered as ``ToolResult(..., is_error=True)``.
    """

    name = "__TOOL__"
    description = "Count the words, lines and characters of a text."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to count."}},
        "required": ["text"],
        "additionalProperties": False,
    }
    mutating = False  # it changes nothing, so no policy needs to ask before it runs

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Count ``args["text"]``; a text over the row's ``max_chars`` is refused."""
        text = args["text"]
        if len(text) > self.max_chars:
            return ToolResult(f"Error: the text has {len(text)} characters; this tool "
                              f"counts at most {self.max_chars}", is_error=True)
        lines = len(text.splitlines())
        return ToolResult(f"{len(text.split())} words, {lines} lines, "
                          f"{len(text)} characters")


class __CLASS__(Plugin):
    """Plugin ``__NAME__``: registers :class:`CountTool`, configured by the row."""

    manifest = Manifest(
        id="__NAME__",
        version=__version__,
        capabilities=frozenset({Capability.TOOL}),
        description="The __TOOL__ tool: counts a text's words, lines and characters.",
        config_schema={
            "type": "object",
            "properties": {
                "max_chars": {"type": "integer", "minimum": 1,
                              "default": DEFAULT_MAX_CHARS,
                              "description": "The longest text the tool counts."},
            },
            "additionalProperties": False,
        },
    )

    def apply(self, reg: Registrar) -> None:
        """Only registers: no I/O here (``dsh doctor`` and ``add`` load plugins too)."""
        reg.tool(CountTool(int(self.config.get("max_chars", DEFAULT_MAX_CHARS))))
'''

PATCH = """\
# The __BUNDLE__ bundle: what a profile gets when `dsh plugin add` installs __NAME__.
# Its row goes into the tools group of dsh-base (the shipped profiles' tools).
- id: tools
  insert:
    - id: __ROW__
      name: "__PACKAGE__:__CLASS__"
      config: {max_chars: 100000}
"""

SCRIPT = """\
# A scripted model for offline runs: each item is one answer, in order (key-free, the
# same whatever the prompt). The first calls the tool, the second is the final answer.
- text: "Let me count."
  tool_calls: [{name: __TOOL__, arguments: {text: "to be or not to be"}}]
- text: "Six words."
"""

SCRIPTED = """\
# Run a profile with this plugin offline, its model answering from script.yml:
#   dsh --profile mine --patch offline/scripted.yml "How many words are in 'to be or not to be'?"
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path script.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
"""

TEST = '''\
"""The __TOOL__ tool, alone and through a real dsh session whose model is scripted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import __PACKAGE__
from dsh.sdk import ClientConfig, DshClient
from dsh.runtime.tools.base import ToolContext

BUNDLE = Path(__PACKAGE__.__file__).parent / "patch.yml"
# The scripted model of an offline run (offline/script.yml) and the patch using it.
SCRIPTED = Path(__file__).resolve().parents[1] / "offline" / "scripted.yml"


def test_the_tool_counts() -> None:
    tool = __PACKAGE__.CountTool(max_chars=10)
    ctx = ToolContext(session_id="s", env={}, cancelled=asyncio.Event(),
                      get_cwd=lambda: ".", change_cwd=lambda path: path)
    assert asyncio.run(tool.call({"text": "a b\\nc"}, ctx)).text == (
        "3 words, 2 lines, 5 characters")
    assert asyncio.run(tool.call({"text": "x" * 11}, ctx)).is_error


def test_a_session_calls_the_tool(tmp_path: Path) -> None:
    config = ClientConfig(profile="sdk", dsh_home=tmp_path / "home", cwd=tmp_path,
                          patches=(BUNDLE, SCRIPTED), initialize_timeout=60)
    with DshClient(config) as client:
        result = client.new_session().run("How many words are in 'to be or not to be'?")
    assert result.stop_reason == "completed", result
    outputs = ["".join(block.get("text", "") for block in event.data["message"]["content"])
               for event in result.events if event.type == "tool/result"]
    assert outputs == ["6 words, 1 lines, 18 characters"]
    assert result.final_text == "Six words."
'''

README = """\
# __NAME__

A dsh plugin: the `__TOOL__` tool, which counts a text's words, lines and characters.
Made by `dsh plugin new __NAME__`; change the tool in `__PACKAGE__/__init__.py`.

```sh
pip install -e '.[test]' && python -m pytest           # the tool, in a scripted session
dsh plugin --profile mine add .                         # a profile with this plugin
dsh doctor --profile mine                               # every row loads
dsh --profile mine "How many words in 'to be or not to be'?"                # a real model
dsh --profile mine --patch offline/scripted.yml "How many words in 'to be or not to be'?"
```

- `__PACKAGE__/__init__.py`: the tool and the plugin class (`__CLASS__`) registering it.
- `__PACKAGE__/patch.yml`: the bundle, inserting the plugin's row (`tools:__ROW__`).
- `pyproject.toml`: the `dsh.bundles` entry point `__BUNDLE__` naming the bundle.
- `offline/`: a scripted model (`script.yml`) and the patch that runs a profile on it
  (`scripted.yml`), for runs with no key; the test uses them too.
- `tests/`: the tool alone, then through a real session whose model is scripted.

dsh's `docs/plugins.md` describes the whole plugin contract.
"""


class Names:
    """The names one scaffold derives from ``NAME``."""

    def __init__(self, name: str) -> None:
        if not _DIST_NAME.match(name):
            raise UsageError(f"plugin name {name!r}: use letters, digits, '-', '_' or '.', "
                             "starting and ending with a letter or digit")
        self.name = re.sub(r"[-_.]+", "-", name).lower()
        self.package = self.name.replace("-", "_")
        if not self.package.isidentifier() or keyword.iskeyword(self.package):
            raise UsageError(f"plugin name {name!r}: its package name {self.package!r} is "
                             "not a Python identifier (start it with a letter)")
        if (shipped.bundle_dir(self.name) / "patch.yml").is_file():
            raise UsageError(f"plugin name {name!r}: {self.name!r} is a shipped bundle's name")
        self.tool = self.package.removeprefix("dsh_") or self.package
        self.row = self.name
        self.bundle = self.name
        self.cls = "".join(part.capitalize() for part in self.package.split("_")) + "Plugin"

    def fill(self, text: str) -> str:
        """``text`` with the ``__NAME__``-style placeholders replaced."""
        for key, value in (("__NAME__", self.name), ("__PACKAGE__", self.package),
                           ("__TOOL__", self.tool), ("__CLASS__", self.cls),
                           ("__BUNDLE__", self.bundle), ("__ROW__", self.row)):
            text = text.replace(key, value)
        return text


def create(name: str, where: Path, *, backend: str = "setuptools") -> Path:
    """Write the package ``NAME`` as folder ``where / NAME``; returns that folder."""
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend}: one of {', '.join(BACKENDS)}")
    names = Names(name)
    target = where / name
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target}: already exists; choose another name or --dir")
    if not where.is_dir():
        raise UsageError(f"--dir {where}: not a directory")
    files = {
        "pyproject.toml": PYPROJECT.replace("__BUILD__", _BUILD[backend]).replace(
            "__PACKAGING__", _PACKAGING[backend]),
        "README.md": README,
        f"{names.package}/__init__.py": INIT,
        f"{names.package}/patch.yml": PATCH,
        "offline/script.yml": SCRIPT,
        "offline/scripted.yml": SCRIPTED,
        f"tests/test_{names.package}.py": TEST,
    }
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=where))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot write here ({exc.strerror or exc})") from exc
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(names.fill(text), encoding="utf-8")
        os.chmod(staging, 0o755 & ~_umask())
        os.rename(staging, target)
    except OSError as exc:
        if target.exists():
            raise UsageError(f"{target}: already exists; choose another name or --dir") from exc
        raise ConfigError(f"{target}: cannot write the package ({exc.strerror or exc})") from exc
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
