"""A table of canary variables, by name and by value, through the real runtime.

The launch environment of a real ``dsh --profile sdk`` (scripted model) holds secrets
under names that look secret (``SMTP_PASS``, ``MYSQL_PWD``, ``GH_PAT``, ``JWT``,
``SLACK_WEBHOOK_URL``, a ``*SESSION*``, OpenTelemetry's exporter headers, ``DSH_*``) and
under ordinary names with values that look secret (a URL with a password, GitHub,
``sk-``, Slack, AWS, JWT and PEM shapes), beside ordinary variables (``HOME``, ``LANG``,
``TZ``, ``LC_ALL``, ``PWD``, ``EDITOR``, a desktop session's ``DBUS_SESSION_BUS_ADDRESS``
and ``XDG_SESSION_TYPE``, ``PATH``, a passwd file's path). What reaches each kind of
child is read from the child itself: the shell's ``env`` (unsandboxed and sandboxed), a
background job's, an MCP server's own environment (``--env-to``), and a sub-agent
runtime's (its shell told to keep everything, so it shows what the runtime got).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tools"))
from sdksession import session, text_of  # noqa: E402

from dsh.sdk import AsyncDshClient, ClientConfig  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell commands")

SERVER = ROOT / "tests" / "fixtures" / "mcp_test_server.py"


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


SECRET_NAMES = {
    "SMTP_PASS": "canary-smtp-pass-01",
    "MYSQL_PWD": "canary-mysql-pwd-02",
    "GH_PAT": "canary-gh-pat-03",
    "JWT": "canary-jwt-04",
    "SLACK_WEBHOOK_URL": "https://hooks.example/services/canary-webhook-05",
    "APP_SESSION": "canary-app-session-06",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer canary-otel-07",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-honeycomb-team=canary-otel-08",
    "DSH_EXTRA_SETTING": "canary-dsh-setting-09",
    "DEEPSEEK_API_KEY": "canary-api-key-10",
    "MYSQL_PASSWD": "canary-mysql-passwd-11",
}
"""Secrets by name (the values are plain canaries)."""
SECRET_VALUES = {
    "DATABASE_URL": "postgres://app:canaryDbPass12@db.example:5432/app",
    "SERVICE_ENDPOINT": "https://bot:canaryUrlPass13@api.example/v1",
    "UPLINK_A": "ghp_canary14" + "a1b2c3d4e5" * 3,
    "UPLINK_B": "gho_canary15" + "f6g7h8i9j0" * 3,
    "UPLINK_C": "github_pat_canary16_" + "K1L2M3N4O5" * 3,
    "MODEL_A": "sk-proj-canary17" + "Ab3Cd4Ef5G" * 3,
    "MODEL_B": "sk-ant-api03-canary18" + "h6I7j8K9l0" * 3,
    "CHAT_BOT": "xoxb-canary19-1234567890-abcdefghij",
    "CLOUD_ID": "AKIACANARY20EXAMPLE1",
    "CLOUD_TEMP_ID": "ASIACANARY21EXAMPLE1",
    "BEARER": (_b64({"alg": "HS256", "typ": "JWT"}) + "." + _b64({"canary": "22"})
               + ".c2lnbmF0dXJl"),
    "DEPLOY_MATERIAL": ("-----BEGIN OPENSSH PRIVATE KEY-----\ncanary23\n"
                        "-----END OPENSSH PRIVATE KEY-----"),
}
"""Secrets by value, under names that look ordinary."""


def ordinary(work: Path) -> dict[str, str]:
    """Variables every child that inherits may see."""
    return {"HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", "TZ": "Europe/Vienna",
            "LC_ALL": "C.UTF-8", "PWD": str(work), "EDITOR": "canary-editor-ok",
            "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
            "XDG_SESSION_TYPE": "wayland", "PATH": os.environ["PATH"],
            "NSS_WRAPPER_PASSWD": "/etc/passwd-canary-ok"}


CORE = ("HOME", "LANG", "TZ", "LC_ALL", "PATH")
"""The ordinary names an MCP server gets (the core: its environment is core-only)."""


def launch_env(work: Path) -> dict[str, str]:
    return {**SECRET_NAMES, **SECRET_VALUES, **ordinary(work)}


def assert_no_secret(seen: str, where: str) -> None:
    """No secret value anywhere in ``seen``, and no secret name set in it."""
    for name, value in {**SECRET_NAMES, **SECRET_VALUES}.items():
        marker = value.split("\n")[1] if "\n" in value else value
        assert marker not in seen, f"{where}: the value of {name} reached it"
    names = {line.split("=", 1)[0] for line in seen.splitlines() if "=" in line}
    leaked = sorted(names & set(SECRET_NAMES))
    assert leaked == [], f"{where}: {leaked} reached it"


def assert_ordinary(seen: str, expected: dict[str, str], where: str) -> None:
    lines = set(seen.splitlines())
    for name, value in expected.items():
        assert f"{name}={value}" in lines, f"{where}: {name} did not reach it"


def shell_row(mode: str, **config: Any) -> dict[str, Any]:
    return {"id": "tools:shell", "merge": {"config": {"sandbox": {"mode": mode}, **config}}}


@pytest.mark.parametrize("mode", ["off", "workspace-write"])
def test_the_shell_and_a_job_get_the_ordinary_and_no_secret(tmp_path: Path, mode: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    calls = [{"name": "bash", "arguments": {"command": "env"}},
             {"name": "bash", "arguments": {
                 "command": "env > job-env.tmp && mv job-env.tmp job-env.txt",
                 "run_in_background": True}},
             {"name": "bash", "arguments": {
                 "command": "until [ -s job-env.txt ]; do sleep 0.05; done; echo ready"}}]
    results, _ = session(tmp_path, calls, [shell_row(mode)], work=work, env=launch_env(work))
    shell = text_of(results[0])
    job = (work / "job-env.txt").read_text()
    for seen, where in ((shell, "the shell"), (job, "a background job")):
        assert_no_secret(seen, where)
        assert_ordinary(seen, ordinary(work), where)
        assert not [n for n in seen.splitlines() if n.startswith("DSH_")
                    and not n.startswith("DSH_CONTAINER=")], seen


def test_the_policy_still_passes_one_on_deliberately(tmp_path: Path) -> None:
    """``set`` is the user's own decision: a secret by value passes when the row sets it;
    ``inherit: core`` keeps the core names (``TZ`` and ``LC_*`` among them), screened."""
    work = tmp_path / "work"
    work.mkdir()
    calls = [{"name": "bash", "arguments": {"command": "env"}}]
    row = shell_row("off", env={"set": {"PASSED_ON": SECRET_VALUES["UPLINK_A"]}})
    results, _ = session(tmp_path, calls, [row], work=work, env=launch_env(work))
    assert f"PASSED_ON={SECRET_VALUES['UPLINK_A']}" in text_of(results[0]).splitlines()
    core_run = tmp_path / "core"
    core_run.mkdir()
    results, _ = session(core_run, calls, [shell_row("off", env={"inherit": "core"})],
                         work=work, env=launch_env(work))
    core = text_of(results[0])
    assert_no_secret(core, "inherit: core")
    assert_ordinary(core, {k: ordinary(work)[k] for k in CORE}, "inherit: core")
    assert "EDITOR=" not in core


def _headless(tmp_path: Path, servers: list[dict[str, Any]], env: dict[str, str]
              ) -> subprocess.CompletedProcess[str]:
    model = tmp_path / "model.yml"
    (tmp_path / "script.jsonl").write_text(json.dumps({"text": "done"}) + "\n")
    model.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: "
        + json.dumps(str(tmp_path / "script.jsonl")) + "}}\n"
        "- id: agent\n  merge: {config: {default_route: scripted}}\n"
        "- id: tools:mcp\n  merge:\n    config:\n      servers: " + json.dumps(servers) + "\n")
    return subprocess.run([sys.executable, "-m", "dsh", "--profile", "headless", "--patch",
                           str(model), "--json", "hi"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120, check=False,
                          cwd=tmp_path)


def test_an_mcp_server_gets_the_core_and_its_env_screened(tmp_path: Path) -> None:
    """Core-only, as before; of the server's own ``env`` a value that looks secret is
    withheld with one error naming it, unless ``secret_env`` names it."""
    work = tmp_path / "work"
    work.mkdir()
    seen_file = tmp_path / "server-env.txt"
    server = {"name": "probe", "command": sys.executable,
              "args": [str(SERVER), "--env-to", str(seen_file)],
              "env": ["DATABASE_URL", "EDITOR"], "secret_env": ["UPLINK_A"]}
    proc = _headless(tmp_path, [server], launch_env(work))
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = seen_file.read_text()
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = [e["data"]["message"] for e in events if e["type"] == "error"]
    assert errors == ["MCP server 'probe': env DATABASE_URL withheld: its value looks like "
                      "a URL with credentials; name it in the server's secret_env to pass "
                      "it on"]
    assert f"UPLINK_A={SECRET_VALUES['UPLINK_A']}" in seen.splitlines()  # deliberately
    rest = "\n".join(line for line in seen.splitlines() if not line.startswith("UPLINK_A="))
    assert_no_secret(rest, "an MCP server")
    assert_ordinary(seen, {**{k: ordinary(work)[k] for k in CORE},
                           "EDITOR": "canary-editor-ok"}, "an MCP server")
    for name in ("DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_TYPE"):
        assert f"{name}=" not in seen  # not core, not configured
    assert f"PWD={work}" not in seen.splitlines()  # (a shell on the way sets its own)


CHILD_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.json}}
- {id: agent, merge: {config: {default_route: scripted}}}
- id: "tools:shell"
  merge: {config: {sandbox: {mode: "off"}, env: {ignore_default_excludes: true}}}
"""


def _subagent_env(tmp_path: Path, home: Path, pass_env: list[str]) -> str:
    """The sub-agent runtime's environment, as its unfiltered shell prints it."""
    work = Path.cwd()
    (tmp_path / "parent.json").write_text(json.dumps([
        {"text": "delegating", "tool_calls": [{"name": "subagent", "arguments": {
            "description": "probe", "prompt": "print your environment"}}]},
        {"text": "parent done"}]))
    (tmp_path / "child.json").write_text(json.dumps([
        {"text": "probing", "tool_calls": [{"name": "bash", "arguments": {
            "command": "env > child-env.txt"}}]}, {"text": "child done"}]))
    (tmp_path / "child-patch.yml").write_text(CHILD_PATCH)
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.json}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n"
        "- id: tools:subagent\n  disabled: false\n"
        f"  merge: {{config: {{patches: [{json.dumps(str(tmp_path / 'child-patch.yml'))}], "
        f"pass_env: {json.dumps(pass_env)}}}}}\n")
    config = ClientConfig(profile="sdk", dsh_home=home, cwd=work, patches=[patch],
                          env=launch_env(work), initialize_timeout=60, request_timeout=60)

    async def scenario() -> None:
        async with AsyncDshClient(config) as client:
            result = await asyncio.wait_for((await client.new_session()).run("go"), 90)
        assert result.stop_reason == "completed", result

    asyncio.run(scenario())
    return (work / "child-env.txt").read_text()


def test_a_subagent_runtime_gets_the_shells_filter(tmp_path: Path, dsh_home: Path) -> None:
    seen = _subagent_env(tmp_path, dsh_home, [])
    assert_no_secret(seen, "a sub-agent runtime")
    expected = {k: v for k, v in ordinary(Path.cwd()).items() if k != "PWD"}
    assert_ordinary(seen, expected, "a sub-agent runtime")


def test_pass_env_hands_the_exporter_headers_to_a_subagent(tmp_path: Path,
                                                           dsh_home: Path) -> None:
    """Secrets to the shell, jobs and MCP servers; a sub-agent's ``pass_env`` passes them
    on deliberately (a child runtime that reports its own traces needs them)."""
    names = ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
    seen = set(_subagent_env(tmp_path, dsh_home, names).splitlines())
    for name in names:
        assert f"{name}={SECRET_NAMES[name]}" in seen


def test_the_table_is_what_the_filter_decides() -> None:
    """The same table through the policy itself: exactly the ordinary names are kept (so
    a row above cannot pass by a typo in the table)."""
    from dsh.runtime.kernel.envpolicy import EnvPolicy

    work = Path("/nonexistent-work")
    assert dict(EnvPolicy().build(launch_env(work))) == ordinary(work)
