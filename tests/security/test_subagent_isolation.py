"""A nested runtime (the ``subagent`` tool's child) and its parent's home, with real
processes: a parent ``dsh --profile sdk`` driven by the SDK client, whose scripted model
starts a child running the stock ``sdk-minimal`` tree (only a scripted model patched in;
the child's policy and shell are as shipped).

What holds: the child's ``DSH_HOME`` is its own (under the parent session's workspace),
its environment lacks the parent's ``.env`` values and credentials except ``pass_env``,
and its shell gets the parent's sandbox with the parent's home hidden too (the child's
home lies inside it), so not even ``$DSH_HOME/../..`` reaches the parent's ``.env``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from sandboxrungs import arrange, skip_reason

from dsh.sdk import AsyncDshClient, ClientConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell commands")

GUARD = 60.0

PARENT_SCRIPT = [
    {"text": "delegating", "tool_calls": [{"name": "subagent", "arguments": {
        "description": "probe", "prompt": "look around"}}]},
    {"text": "parent done"},
]
CHILD_COMMAND = (
    'env > child-env.txt; '
    'cat "$DSH_HOME/../../../../../.env" > child-read-relative.txt 2>&1; '
    'cat "$PARENT_ENV_FILE_GUESS" > child-read-absolute.txt 2>&1; '
    'ulimit -t > child-cpu-limit.txt; true'
)
CHILD_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.json}}
- {id: agent, merge: {config: {default_route: scripted}}}
- id: "tools:shell"
  merge: {config: {env: {set: {KEY_THE_RUNTIME_GOT: !env DEEPSEEK_API_KEY,
                               DSH_HOME: !env DSH_HOME}}}}
"""


def run_parent(tmp_path: Path, home: Path, env: dict[str, str]) -> str:
    """Run the parent's one turn; the child's answer (the subagent tool's result)."""
    parent_env_file = home / ".env"
    child_script = [
        {"text": "probing", "tool_calls": [{"name": "bash", "arguments": {
            "command": CHILD_COMMAND.replace("$PARENT_ENV_FILE_GUESS",
                                             str(parent_env_file))}}]},
        {"text": "child done"},
    ]
    (tmp_path / "parent.json").write_text(json.dumps(PARENT_SCRIPT))
    (tmp_path / "child.json").write_text(json.dumps(child_script))
    (tmp_path / "child-patch.yml").write_text(CHILD_PATCH)
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.json}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n"
        "- {id: 'tools:shell', merge: {config: {limits: {cpu_seconds: 777}}}}\n"
        "- id: tools:subagent\n"
        "  disabled: false\n"
        f"  merge: {{config: {{patches: [{json.dumps(str(tmp_path / 'child-patch.yml'))}], "
        "pass_env: [DEEPSEEK_API_KEY]}}\n")
    config = ClientConfig(profile="sdk", dsh_home=home, cwd=Path.cwd(), patches=[patch],
                          env=env, initialize_timeout=GUARD, request_timeout=GUARD)

    async def scenario() -> str:
        async with AsyncDshClient(config) as client:
            session = await client.new_session()
            result = await asyncio.wait_for(session.run("go"), GUARD)
        assert result.stop_reason == "completed", result
        answers = [e.data["message"]["content"][0]["text"] for e in result.events
                   if e.type == "tool/result"]
        assert len(answers) == 1, answers
        return answers[0]

    return asyncio.run(scenario())


@pytest.fixture(params=["bubblewrap", "landlock-docker-bwrap"])
def probed(request: pytest.FixtureRequest, tmp_path: Path, dsh_home: Path) -> dict[str, str]:
    """Run parent and child once; what the child wrote, by file name, plus canaries. The
    child's shell runs on bubblewrap, then on Landlock (``bwrap`` failing as in Docker,
    which the child inherits through ``PATH``: it picks its own rung on this machine)."""
    if why := skip_reason(request.param):
        pytest.skip(why)
    home_secret = "canary-parent-home-" + "5e1f" * 6
    env_secret = "canary-parent-env-" + "9a2b" * 6
    passed = "sk-passed-on-purpose-" + "77" * 8
    (dsh_home / ".env").write_text(f"PARENT_HOME_SETTING={home_secret}\n")
    answer = run_parent(tmp_path, dsh_home, {"DEEPSEEK_API_KEY": passed,
                                             "OTHER_SERVICE_TOKEN": env_secret,
                                             **arrange(request.param, tmp_path).env})
    assert answer == "child done"
    cwd = Path.cwd()
    found = {name: (cwd / name).read_text() for name in (
        "child-env.txt", "child-read-relative.txt", "child-read-absolute.txt",
        "child-cpu-limit.txt")}
    return {**found, "home_secret": home_secret, "env_secret": env_secret, "passed": passed,
            "home": str(dsh_home)}


def test_the_child_has_its_own_home_and_a_scrubbed_environment(
        probed: dict[str, str]) -> None:
    env = dict(line.split("=", 1) for line in probed["child-env.txt"].splitlines()
               if "=" in line)
    child_home = Path(env["DSH_HOME"])
    parent_home = Path(probed["home"])
    assert child_home != parent_home
    assert child_home.is_relative_to(parent_home / "workspaces")
    # Listed in pass_env: the child runtime has it; its shell only as its policy sets it.
    assert env["KEY_THE_RUNTIME_GOT"] == probed["passed"]
    assert "DEEPSEEK_API_KEY" not in env
    for secret in (probed["home_secret"], probed["env_secret"]):
        assert secret not in probed["child-env.txt"]
    assert "PARENT_HOME_SETTING" not in env and "OTHER_SERVICE_TOKEN" not in env


def test_the_childs_shell_cannot_read_the_parents_env_file(probed: dict[str, str]) -> None:
    for name in ("child-read-relative.txt", "child-read-absolute.txt"):
        assert probed["home_secret"] not in probed[name], (name, probed[name])


def test_the_childs_shell_has_the_parents_limits(probed: dict[str, str]) -> None:
    """The parent's ``cpu_seconds: 777`` (soft limit 5 s below, then SIGKILL at 777)."""
    assert probed["child-cpu-limit.txt"].strip() == "772"
