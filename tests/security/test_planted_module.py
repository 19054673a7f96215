"""No code from the workspace runs outside the sandbox: a planted ``json.py`` stays inert.

Python puts the working directory first on ``sys.path`` for ``python -m``, and a runtime
starts in the workspace: a ``json.py`` the model wrote there (or a cloned repository
shipped) used to run, unsandboxed and as the user, the next time a sub-agent or an SDK
client on the python carrier started. Here a workspace holds ``json.py``,
``encodings.py`` and ``sitecustomize.py``, each writing a marker file when imported; a
python-carrier client started in it, and a sub-agent started by a runtime working in it,
must import none of them (and still work: the stdlib ``json`` is the one used).

Both runtimes use the interpreter under test; run the file under Python 3.10 too, whose
carrier starts through a ``-c`` runner instead of ``-P`` (``tests/process`` pins that runner
on a real 3.10 interpreter whenever one is installed).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from seckit import OFFLINE_PATCH

from dsh.sdk import AsyncDshClient, ClientConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell commands")

GUARD = 60.0
PLANTED = ("json", "encodings", "sitecustomize")


def plant(folder: Path) -> Path:
    """Write the three modules into ``folder``; returns where their markers would go."""
    markers = folder / "markers"
    markers.mkdir()
    for name in PLANTED:
        (folder / f"{name}.py").write_text(
            "import os as _os\n"
            f"open(_os.path.join({str(markers)!r}, '{name}-' + str(_os.getpid())), 'w')"
            ".close()\n")
    return markers


def test_a_python_carrier_client_in_the_workspace_imports_nothing_from_it(
        dsh_home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    markers = plant(workspace)
    (workspace / "script.yml").write_text("- {text: 'stdlib json is fine'}\n")
    patch = workspace / "patch.yml"
    patch.write_text(OFFLINE_PATCH.read_text())
    config = ClientConfig(carrier="python", dsh_home=dsh_home, cwd=workspace,
                          patches=[patch], initialize_timeout=GUARD, request_timeout=GUARD)

    async def scenario() -> str:
        async with AsyncDshClient(config) as client:
            session = await client.new_session()
            result = await asyncio.wait_for(session.run("hello"), GUARD)
        return result.final_text

    assert asyncio.run(scenario()) == "stdlib json is fine"
    assert sorted(p.name for p in markers.iterdir()) == []


def test_a_subagent_started_in_the_workspace_imports_nothing_from_it(
        dsh_home: Path, tmp_path: Path) -> None:
    """The parent runtime works in the workspace (python carrier); its scripted model starts
    a sub-agent there, whose scripted model answers; neither runtime imports a planted
    module."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    markers = plant(workspace)
    (tmp_path / "parent.json").write_text(json.dumps([
        {"text": "delegating", "tool_calls": [{"name": "subagent", "arguments": {
            "description": "probe", "prompt": "answer"}}]},
        {"text": "parent done"}]))
    (tmp_path / "child.json").write_text(json.dumps([{"text": "child answered"}]))
    (tmp_path / "child-patch.yml").write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.json}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n")
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.json}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n"
        f"- {{id: 'tools:subagent', disabled: false, merge: {{config: {{patches: "
        f"[{json.dumps(str(tmp_path / 'child-patch.yml'))}]}}}}}}\n")
    config = ClientConfig(carrier="python", profile="sdk", dsh_home=dsh_home, cwd=workspace,
                          patches=[patch], initialize_timeout=GUARD, request_timeout=GUARD)

    async def scenario() -> list[str]:
        async with AsyncDshClient(config) as client:
            session = await client.new_session()
            result = await asyncio.wait_for(session.run("go"), GUARD)
        assert result.stop_reason == "completed", result
        return [e.data["message"]["content"][0]["text"] for e in result.events
                if e.type == "tool/result"]

    assert asyncio.run(scenario()) == ["child answered"]
    assert sorted(p.name for p in markers.iterdir()) == []
