"""A plugin written against the runtime's old import paths still loads, for one release.

The plugin guide and ``dsh plugin new`` used to teach ``dsh_runtime.plugin`` and
``dsh_runtime.tools.base``; since the runtime moved into ``dsh.runtime``, those two
modules re-export the new names, and the loader says once, on stderr, where they went.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dsh-hello-plugin"
SCRIPT = [{"text": "Greeting.", "tool_calls": [{"name": "hello", "arguments": {"name": "Ada"}}]},
          {"text": "Done."}]
OLD = {"dsh.runtime.kernel.plugin": "dsh_runtime.plugin",
       "dsh.runtime.tools.base": "dsh_runtime.tools.base"}


def test_a_plugin_importing_the_old_paths_loads_and_is_told_the_new_ones(
        run_dsh: Callable[..., Any], tmp_path: Path) -> None:
    local = Path.cwd() / "hello"
    shutil.copytree(FIXTURE, local)
    module = local / "dsh_hello_plugin" / "__init__.py"
    text = module.read_text()
    for new, old in OLD.items():
        assert f"from {new} import" in text
        text = text.replace(f"from {new} import", f"from {old} import")
    module.write_text(text)
    added = run_dsh("plugin", "--profile", "p", "add", "--from", "sdk", "./hello")
    assert added.returncode == 0, added.stderr

    script = tmp_path / "script.yml"
    script.write_text(json.dumps(SCRIPT))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted",
                                  "merge": {"config": {"script": str(script)}}}]))
    proc = RuntimeProcess("p", [OFFLINE_PATCH, patch], cwd=tmp_path)
    try:
        proc.initialize(tmp_path, provider="scripted", model="scripted")
        proc.call("session/prompt", {"sessionId": "s",
                                     "contentBlocks": [{"type": "text", "text": "hi"}]})
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                            timeout=30)
        events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
        results = [e["data"]["message"] for e in events if e["type"] == "tool/result"]
        assert ["".join(b.get("text", "") for b in m["content"]) for m in results] == [
            "Bonjour, Ada!"]
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    lines = [line for line in proc.stderr().splitlines() if "moved to" in line]
    assert lines == [
        f"dsh: plugin 'hello-tool' imports {old}, which moved to {new}; import it from there "
        "(the old path goes in the next release)" for new, old in OLD.items()]
