"""The web app's guard on every route of a real ``dsh web``, and no secret in its answers.

tests/web checks the guard's cases on one route; here every route and method the app
serves (and paths it does not serve) is refused without the token (401), with a wrong
token in either place (401) and with a foreign Host even when the token is right (403),
and the refusal never reaches the route: no session is created, no prompt is queued.
Then canaries planted in the environment and both ``.env`` files are searched for in
every answer of a session that runs tools, including the event stream.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from seckit import OFFLINE_PATCH, assert_clean, home_files, plant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from webkit import WebProcess, prompt, stream_until_turn_end, write_patch

SCRIPT = """\
- text: "Looking around."
  tool_calls: [{name: working_directory, arguments: {}}]
- text: "Writing."
  tool_calls: [{name: write_file, arguments: {path: web-note.txt, content: hello}}]
- text: "Shell."
  tool_calls: [{name: bash, arguments: {command: "ls -a"}}]
- text: "All done."
"""

# Every route of dsh.runtime.web.routes, with a body where the method takes one.
ROUTES = [
    ("GET", "/"),
    ("GET", "/api/sessions"),
    ("POST", "/api/sessions"),
    ("POST", "/api/sessions/{sid}/prompt"),
    ("GET", "/api/sessions/{sid}/events"),
    ("POST", "/api/sessions/{sid}/cancel"),
    ("POST", "/api/sessions/{sid}/resume"),
    ("GET", "/api/sessions/{sid}/history"),
    ("GET", "/api/tools"),
    ("GET", "/api/config"),
    ("GET", "/api/status"),
    ("GET", "/api/approvals"),
    ("POST", "/api/approvals/a-1"),
    # Not routes: the guard answers before routing, so nothing is learnt about them.
    ("GET", "/api/nothing-here"),
    ("DELETE", "/api/sessions"),
    ("GET", "/static/../api/tools"),
]
BODY = {"contentBlocks": [{"type": "text", "text": "injected"}], "decision": "allow"}


def _request(client: httpx.Client, method: str, path: str, **kwargs: object) -> httpx.Response:
    if method == "POST":
        kwargs.setdefault("json", BODY)
    return client.request(method, path, **kwargs)  # type: ignore[arg-type]


def test_every_route_refuses_a_missing_or_wrong_token_and_a_foreign_host(
        tmp_path: Path) -> None:
    patch = write_patch(tmp_path, SCRIPT)
    with WebProcess([OFFLINE_PATCH, patch], cwd=Path.cwd()) as web, \
            web.client(auth=False) as anon, web.client() as client:
        sid = client.post("/api/sessions").json()["sessionId"]
        before = client.get("/api/sessions").json()
        wrong = "x" * len(web.token)
        for method, template in ROUTES:
            path = template.format(sid=sid)
            refusals = {
                "no token": _request(anon, method, path),
                "wrong bearer": _request(anon, method, path,
                                         headers={"Authorization": f"Bearer {wrong}"}),
                "wrong query": _request(anon, method, path, params={"token": wrong}),
                "empty bearer": _request(anon, method, path,
                                         headers={"Authorization": "Bearer"}),
                "token prefix": _request(anon, method, path,
                                         params={"token": web.token[:8]}),
            }
            for case, response in refusals.items():
                assert response.status_code == 401, (method, path, case, response.text)
                assert response.json()["error"]["code"] == "unauthorized"
                assert web.token not in response.text
            for host in ("evil.example", f"evil.example:{web.port}", f"127.0.0.2:{web.port}",
                         f"localhost.evil.example:{web.port}", f"127.0.0.1:{web.port + 1}", ""):
                response = _request(client, method, path, headers={"Host": host})
                assert response.status_code == 403, (method, path, host, response.text)
                assert response.json()["error"]["code"] == "forbidden-host"
                response = _request(anon, method, path, headers={"Host": host},
                                    params={"token": web.token})
                assert response.status_code == 403, (method, path, host, "query token")
        # Nothing a refused request asked for happened.
        assert client.get("/api/sessions").json() == before
        history = client.get(f"/api/sessions/{sid}/history").json()["events"]
        assert history == [], history
        assert not (Path.cwd() / "web-note.txt").exists()
        assert web.extra_stdout() == []
    assert web.proc.returncode == 0, "".join(web.stderr)


def test_web_answers_and_stream_carry_no_secret(
        tmp_path: Path, dsh_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canaries, env = plant(dsh_home, Path.cwd())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    patch = write_patch(tmp_path, SCRIPT, extra=(
        "- {id: llm, merge: {config: {api_key: !env HOME_SERVICE_TOKEN}}}\n"))
    captured: list[bytes] = []
    with WebProcess([OFFLINE_PATCH, patch], cwd=Path.cwd()) as web, web.client() as client:
        sid = client.post("/api/sessions").json()["sessionId"]
        prompt(client, sid, "go")
        events = stream_until_turn_end(client, sid)
        captured.append(json.dumps(events).encode())
        assert [e["type"] for e in events if e["type"] == "tool/result"] == ["tool/result"] * 3
        for path in ("/api/sessions", f"/api/sessions/{sid}/history", "/api/tools",
                     "/api/config", "/api/status", "/api/approvals", "/"):
            response = client.get(path, params={"token": web.token} if path == "/" else None)
            assert response.status_code == 200, (path, response.text)
            captured.append(response.content)
        config = client.get("/api/config").json()["config"]
        llm = next(row for row in config["rows"] if row["id"] == "llm")
        assert llm["config"]["api_key"] == {"!env": "HOME_SERVICE_TOKEN"}
    assert (Path.cwd() / "web-note.txt").read_text() == "hello"
    for index, data in enumerate(captured):
        assert_clean(f"web answer {index}", data, canaries.all())
    assert_clean("dsh web's stdout and stderr", "".join(web.stderr) + json.dumps(web.info),
                 canaries.all())
    for name, data in home_files(dsh_home):
        assert_clean(f"$DSH_HOME/{name}", data, canaries.all())
