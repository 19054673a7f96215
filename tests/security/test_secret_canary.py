"""No secret value in any output: canaries planted in the launch environment, the home's
``.env`` and the project's ``.env`` are searched for in everything real processes print.

Covered: ``dsh info --json``, ``dsh doctor [--live] --json``, ``--dump-config`` (both
forms), an SDK session running file, search and shell tools plus ``config/get``,
``session/history``, ``session/list``, ``tools/list`` and ``runtime/status``, the runtime's
whole stderr at debug level, every file the run left in the home (the session database
among them), headless ``--json``, the web app's API, and a provider refused by a local
server, also one that echoes the key back.

What a tool may see is a separate contract (docs/contracts.md "Shell sandbox", docs/security.md):
a command gets the launch environment minus its secrets, and a sandboxed one neither the
names the home's ``.env`` set nor the file itself. That is tested exactly, in
:func:`test_sandboxed_shell_gets_no_secret_and_nothing_of_the_home_env`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from seckit import OFFLINE_PATCH, Canaries, FullLogRuntime, assert_clean, home_files, plant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from webkit import WebProcess

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell commands")

# References to the canaries' names in config: a tag must stay a reference in every dump.
REFERENCES = """\
- id: tools:web
  merge: {config: {search_api_key_env: HOME_SERVICE_TOKEN}}
- id: llm
  merge: {config: {api_key: !env HOME_SERVICE_TOKEN}}
"""


@pytest.fixture
def planted(dsh_home: Path) -> tuple[Canaries, dict[str, str]]:
    """The canaries, planted for this test's home and working directory."""
    return plant(dsh_home, Path.cwd())


def run_dsh(*args: str, env: dict[str, str], input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """``python -m dsh ARGS`` in the test's cwd with ``env`` added, bytes captured."""
    return subprocess.run([sys.executable, "-m", "dsh", *args], env={**os.environ, **env},
                          input=None if input is None else input.encode(),
                          stdin=subprocess.DEVNULL if input is None else None,
                          capture_output=True, timeout=timeout, check=False)


def write_patch(tmp_path: Path, script: list[dict[str, Any]], extra: str = "") -> Path:
    """A patch pointing the scripted provider at ``script``, plus the tag references."""
    (tmp_path / "script.json").write_text(json.dumps(script))
    patch = tmp_path / "canary-patch.yml"
    patch.write_text(
        "- id: llm-scripted\n"
        f"  merge: {{config: {{script: {json.dumps(str(tmp_path / 'script.json'))}}}}}\n"
        + REFERENCES + extra)
    return patch


def test_machine_and_config_commands_print_no_secret(
        tmp_path: Path, planted: tuple[Canaries, dict[str, str]]) -> None:
    canaries, env = planted
    patch = write_patch(tmp_path, [{"text": "unused"}])
    commands = [
        ["info", "--json"],
        ["info"],
        ["doctor", "--json"],
        ["doctor", "--live", "--json"],
        ["--profile", "sdk", "--patch", str(OFFLINE_PATCH), "--patch", str(patch),
         "--dump-config", "--json"],
        ["--profile", "sdk", "--patch", str(OFFLINE_PATCH), "--patch", str(patch),
         "--dump-config"],
        ["--profile", "sdk", "--patch", str(OFFLINE_PATCH), "--patch", str(patch), "-h"],
    ]
    for argv in commands:
        proc = run_dsh(*argv, env=env)
        assert proc.returncode in (0, 1), (argv, proc.stderr.decode())
        assert proc.stdout, argv
        assert_clean(" ".join(argv), proc.stdout + proc.stderr, canaries.all())
    dump = json.loads(run_dsh(*commands[4], env=env).stdout)
    llm = next(row for row in dump["rows"] if row["id"] == "llm")
    assert llm["config"]["api_key"] == {"!env": "HOME_SERVICE_TOKEN"}


def test_a_malformed_env_file_error_names_the_line_not_the_values(
        planted: tuple[Canaries, dict[str, str]], dsh_home: Path) -> None:
    canaries, env = planted
    (dsh_home / ".env").write_text(f"HOME_SERVICE_TOKEN={canaries.home_env}\n"
                                   f"DSH_PROFILE={canaries.home_env}\n")
    for argv, code in ((["doctor", "--json"], 1), (["--profile", "sdk", "-h"], 2)):
        proc = run_dsh(*argv, env=env)
        assert proc.returncode == code, (argv, proc.stdout, proc.stderr)
        assert b".env:2: DSH_PROFILE is bootstrap-only" in proc.stdout + proc.stderr, argv
        assert_clean(" ".join(argv), proc.stdout + proc.stderr, canaries.all())


SESSION_SCRIPT = [
    {"text": "where", "tool_calls": [{"name": "working_directory", "arguments": {}}]},
    {"text": "write", "tool_calls": [{"name": "write_file",
                                      "arguments": {"path": "notes.txt", "content": "hi\n"}}]},
    {"text": "edit", "tool_calls": [{"name": "edit_file", "arguments": {
        "path": "notes.txt", "old_string": "hi", "new_string": "hello"}}]},
    {"text": "read", "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
    {"text": "list", "tool_calls": [{"name": "list_directory", "arguments": {}}]},
    {"text": "glob", "tool_calls": [{"name": "glob", "arguments": {"pattern": "*"}}]},
    {"text": "grep", "tool_calls": [{"name": "grep", "arguments": {"pattern": "hello"}}]},
    {"text": "shell", "tool_calls": [{"name": "bash", "arguments": {"command": "ls -a; pwd"}}]},
    {"text": "missing key", "tool_calls": [{"name": "web_search",
                                            "arguments": {"queries": ["x"]}}]},
    {"text": "done"},
]


def test_sdk_session_frames_log_and_home_carry_no_secret(
        tmp_path: Path, dsh_home: Path, planted: tuple[Canaries, dict[str, str]]) -> None:
    canaries, env = planted
    patch = write_patch(tmp_path, SESSION_SCRIPT)
    cwd = Path.cwd()
    proc = FullLogRuntime("sdk", [OFFLINE_PATCH, patch], cwd=cwd, env=env)
    try:
        proc.initialize(cwd, provider="scripted", model="scripted")
        answer = proc.call("session/prompt", {"sessionId": "s1", "contentBlocks": [
            {"type": "text", "text": "go"}]})
        assert "result" in answer, answer
        proc.until("session.status", lambda f: f["params"]["status"] == "idle", timeout=60)
        for method, params in (("config/get", {}), ("session/history", {"sessionId": "s1"}),
                               ("session/list", {}), ("tools/list", {}),
                               ("runtime/status", {}),
                               ("session/working-directory/get", {"sessionId": "s1"})):
            answer = proc.call(method, params)
            assert "result" in answer, (method, answer)
        history = proc.call("session/history", {"sessionId": "s1"})["result"]["events"]
        config = proc.call("config/get")["result"]["config"]
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    results = [e for e in history if e["type"] == "tool/result"]
    assert len(results) == len(SESSION_SCRIPT) - 1, history
    assert (cwd / "notes.txt").read_text() == "hello\n"
    llm = next(row for row in config["rows"] if row["id"] == "llm")
    assert llm["config"]["api_key"] == {"!env": "HOME_SERVICE_TOKEN"}
    assert_clean("the SDK runtime's stdout and stderr", proc.captured(), canaries.all())
    for name, data in home_files(dsh_home):
        assert_clean(f"$DSH_HOME/{name}", data, canaries.all())


SHELL_SCRIPT = [
    {"text": "env", "tool_calls": [{"name": "bash", "arguments": {
        "command": 'env; echo "--- home .env:"; cat "$ENV_FILE" 2>&1; true'}}]},
    {"text": "done"},
]


def test_sandboxed_shell_gets_no_secret_and_nothing_of_the_home_env(
        tmp_path: Path, dsh_home: Path, planted: tuple[Canaries, dict[str, str]]) -> None:
    """The contract of the shipped shell (``workspace-write`` sandbox, default ``env``
    policy): the command gets the launch environment and the project's ``.env`` values
    minus every secret-looking name (issue 19: the key in the launch environment used to
    be one ``env`` away), and never the home ``.env`` names or file."""
    canaries, env = planted
    with (Path.cwd() / ".env").open("a") as f:
        f.write("PROJECT_SETTING=visible-project-setting\n")
    patch = write_patch(tmp_path, SHELL_SCRIPT)
    env = {**env, "ENV_FILE": str(dsh_home / ".env")}
    cwd = Path.cwd()
    proc = FullLogRuntime("sdk", [OFFLINE_PATCH, patch], cwd=cwd, env=env)
    try:
        proc.initialize(cwd, provider="scripted", model="scripted")
        proc.call("session/prompt", {"sessionId": "s1", "contentBlocks": [
            {"type": "text", "text": "go"}]})
        frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                            timeout=60)
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    output = next(f["params"]["event"]["data"]["message"]["content"][0]["text"]
                  for f in frames if f.get("method") == "session.event"
                  and f["params"]["event"]["type"] == "tool/result")
    if output.startswith("[Not sandboxed"):
        pytest.skip(f"bubblewrap is unusable here: {output.splitlines()[0]}")
    assert "DSH_LOG_LEVEL=debug" in output  # the launch environment, minus secrets
    assert "PROJECT_SETTING=visible-project-setting" in output  # the project's .env too
    assert "DEEPSEEK_API_KEY" not in output and "PROJECT_DB_PASSWORD" not in output
    assert "HOME_SERVICE_TOKEN" not in output
    hidden = output.split("--- home .env:", 1)[1]
    assert "No such file" in hidden or "Permission denied" in hidden, hidden
    assert_clean("the sandboxed shell", output, canaries.all())
    # The log carries the tool result (it is the session's data), but never the home's.
    assert_clean("the runtime's stderr", b"".join(proc.all_stderr),
                 {"home .env": canaries.home_env})


def test_headless_json_prints_no_secret(
        tmp_path: Path, planted: tuple[Canaries, dict[str, str]]) -> None:
    canaries, env = planted
    patch = write_patch(tmp_path, SESSION_SCRIPT)
    proc = run_dsh("--profile", "headless", "--patch", str(OFFLINE_PATCH), "--patch",
                   str(patch), "--json", "go", env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "turn/end", lines[-1]
    assert_clean("headless --json", proc.stdout + proc.stderr, canaries.all())


# -- a provider refused by its server -------------------------------------------------


class _Refusing(BaseHTTPRequestHandler):
    """Answers every POST 401, echoing the request's Authorization header when asked."""

    server: _RefusingServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet; the test reads :attr:`_RefusingServer.seen`."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        auth = self.headers.get("authorization", "")
        self.server.seen.append(auth)
        key = auth.removeprefix("Bearer ")
        bodies = {
            "silent": b"",
            "json-echo": json.dumps({"error": {"message": f"Incorrect API key: {key}"}}).encode(),
            "text-echo": f"refused {auth} (key {key[:-4]}xxxx)".encode(),
        }
        body = bodies[self.server.mode]
        self.send_response(401)
        self.send_header("Content-Type", "application/json" if "json" in self.server.mode
                         else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _RefusingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), _Refusing)
        self.mode = mode
        self.seen: list[str] = []


@pytest.fixture(params=["silent", "json-echo", "text-echo"])
def refusing(request: pytest.FixtureRequest) -> Iterator[_RefusingServer]:
    """A model server on 127.0.0.1 refusing every key (echoing it in two variants)."""
    server = _RefusingServer(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_refused_key_is_not_in_the_error(
        refusing: _RefusingServer, planted: tuple[Canaries, dict[str, str]]) -> None:
    canaries, env = planted
    port = refusing.server_address[1]
    env = {**env, "DEEPSEEK_BASE_URL": f"http://127.0.0.1:{port}"}
    proc = run_dsh("--profile", "headless", "--json", "hello", env=env)
    assert refusing.seen == [f"Bearer {canaries.environment}"]  # the key was really sent
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert b"HTTP 401" in output and b"DEEPSEEK_API_KEY" in output, output
    assert_clean(f"headless with a {refusing.mode} refusing server", output, canaries.all())


# -- a route name read with !env --------------------------------------------------------

ENV_ROUTE = """\
- {id: agent, merge: {config: {default_route: !env PROJECT_DB_PASSWORD}}}
"""


def test_a_route_name_from_env_is_named_by_its_variable_never_quoted_or_stored(
        tmp_path: Path, dsh_home: Path, monkeypatch: pytest.MonkeyPatch,
        planted: tuple[Canaries, dict[str, str]]) -> None:
    """A ``default_route`` read with ``!env`` that names no route (here a secret put in
    the wrong variable) is refused naming the variable: in the SDK's ``initialize``
    error, in the turn a web prompt ends with (and the session it is stored in), in
    ``dsh doctor --live``, and in the runtimes' logs."""
    canaries, env = planted
    (tmp_path / "env-route.yml").write_text(ENV_ROUTE)
    patches = [write_patch(tmp_path, [{"text": "unused"}]), tmp_path / "env-route.yml"]
    cwd = Path.cwd()
    named = "!env PROJECT_DB_PASSWORD"

    proc = FullLogRuntime("sdk", [OFFLINE_PATCH, *patches], cwd=cwd, env=env)
    try:
        refused = proc.call("initialize", {"cwd": str(cwd)}, timeout=30)
        assert refused["error"]["data"]["code"] == "unknown-route", refused
        assert named in refused["error"]["message"], refused
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.finish()
    assert_clean("the SDK runtime's stdout and stderr", proc.captured(), canaries.all())

    args = [f"--patch={p}" for p in (OFFLINE_PATCH, *patches)]
    doctor = run_dsh("doctor", "--live", "--json", *args, env=env)
    assert_clean("dsh doctor --live", doctor.stdout + doctor.stderr, canaries.all())
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["data"]["checks"]}
    route = checks["route.env.PROJECT_DB_PASSWORD"]
    assert route["status"] == "fail" and named in route["message"], route

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with WebProcess([OFFLINE_PATCH, *patches], cwd=cwd) as web, web.client() as client:
        # A prompt that would create a session whose route cannot be used is refused at
        # once, and leaves no session behind.
        refused = client.post("/api/sessions/s1/prompt",
                              json={"contentBlocks": [{"type": "text", "text": "go"}]})
        listing = client.get("/api/sessions").text
    assert refused.status_code == 400, refused.text
    assert named in refused.json()["error"]["message"], refused.text
    assert '"s1"' not in listing, listing
    assert_clean("the web API", refused.text + listing, canaries.all())
    assert_clean("the web server's stderr", "".join(web.stderr), canaries.all())
    for name, data in home_files(dsh_home):
        assert_clean(f"$DSH_HOME/{name}", data, canaries.all())
