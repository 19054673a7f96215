"""The plugin API's exported names: what ``docs/plugins.md`` tells authors to import.

``dsh.runtime.kernel.plugin`` (the contract and the values its registries hold) and
``dsh.runtime.tools.base`` (the tool contract) each list their public names in
``__all__``, exactly the curated set (httpx's habit), and every public class or function
they define is in it, so a type moved in is exported too. The old paths kept for one
release (``dsh_runtime.plugin``, ``dsh_runtime.tools.base``) offer the same names.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from types import ModuleType

import pytest

from dsh.runtime.kernel import plugin
from dsh.runtime.tools import base

EXPORTED = {
    plugin: {"Capability", "Checkup", "Command", "ContextRequest", "ContextSource",
             "Diagnosis", "EnvVar", "Manifest", "NamedRegistry", "Plugin", "Prompt",
             "Registrar", "RuntimeContext", "Skill", "ToolSource"},
    base: {"ArgumentError", "Image", "Tool", "ToolCall", "ToolContext", "ToolResult",
           "check_arguments", "parse_arguments"},
}
OLD_PATHS = {plugin: "dsh_runtime.plugin", base: "dsh_runtime.tools.base"}


@pytest.mark.parametrize("module", list(EXPORTED), ids=lambda m: m.__name__)
def test_all_is_exactly_the_curated_api(module: ModuleType) -> None:
    assert sorted(module.__all__) == sorted(EXPORTED[module])
    for name in module.__all__:
        assert getattr(module, name) is not None
    defined = {name for name, value in vars(module).items()
               if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
               and value.__module__ == module.__name__}
    assert defined <= set(module.__all__), defined - set(module.__all__)


@pytest.mark.parametrize("module", list(EXPORTED), ids=lambda m: m.__name__)
def test_the_old_path_offers_the_same_names(module: ModuleType) -> None:
    old = OLD_PATHS[module]
    code = (f"import json, {old} as m, {module.__name__} as n; print(json.dumps("
            "{'all': sorted(m.__all__), 'same': all(getattr(m, x) is getattr(n, x) "
            "for x in n.__all__)}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == {"all": sorted(EXPORTED[module]), "same": True}
    assert done.stderr.count("\n") == 1 and f"{old}, which moved to {module.__name__}" in (
        done.stderr)
