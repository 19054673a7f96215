"""The web API against a real ``dsh web`` process, over real HTTP with httpx.

Every bad input of issue 8 (401, 403, 413, 400) and every operation the page uses:
sessions, prompt with an SSE stream, history, cancel, tools, effective config, approvals.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import time
from pathlib import Path

import pytest
from webkit import (
    OFFLINE_PATCH,
    WebProcess,
    prompt,
    sse_events,
    stream_until_turn_end,
    write_patch,
)

CHAT_SCRIPT = """\
- text: "Let me check where I am."
  tool_calls: [{name: working_directory, arguments: {}}]
- text: "Hello from the script."
- {text: "never finishes in time", delay_ms: 60000}
"""

WRITE_SCRIPT = """\
- text: "Writing the note."
  tool_calls: [{name: write_file, arguments: {path: note.txt, content: hello}}]
- text: "Done."
"""

ASK_POLICY = "- {id: policy, merge: {config: {mode: ask}}}\n"


def test_bad_inputs_get_401_403_413_400(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, CHAT_SCRIPT,
                        extra="- {id: web-server, merge: {config: {max_body_bytes: 2048}}}\n")
    with WebProcess([patch], cwd=Path.cwd()) as web, web.client(auth=False) as anon, \
            web.client() as client:
        # 401: no token, a wrong bearer token, a wrong query token, a wrong scheme.
        for response in (
            anon.get("/api/tools"),
            anon.get("/api/tools", headers={"Authorization": "Bearer " + "x" * 43}),
            anon.get("/api/tools", params={"token": web.token[:-1]}),
            anon.get("/api/tools", headers={"Authorization": f"Basic {web.token}"}),
            anon.post("/api/sessions", json={}),
            anon.get("/", params={"token": "nope"}),
        ):
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")
        assert anon.get("/api/tools", params={"token": web.token}).status_code == 200
        # 403: a foreign Host header, even with the right token (DNS rebinding).
        for host in ("evil.example", f"evil.example:{web.port}", "127.0.0.1:1",
                     f"127.0.0.1.evil.example:{web.port}"):
            response = client.get("/api/tools", headers={"Host": host})
            assert response.status_code == 403, host
            assert response.json()["error"]["code"] == "forbidden-host"
        for host in (f"localhost:{web.port}", f"LOCALHOST:{web.port}", f"[::1]:{web.port}"):
            assert client.get("/api/tools", headers={"Host": host}).status_code == 200, host
        session = client.post("/api/sessions").json()["sessionId"]
        url = f"/api/sessions/{session}/prompt"
        # 413: over the configured cap, declared or streamed without a length.
        big = json.dumps({"contentBlocks": [{"type": "text", "text": "x" * 100_000}]})
        response = client.post(url, content=big, headers={"Content-Type": "application/json"})
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "too-large"
        response = client.post(url, content=iter([big[:1000].encode(), big[1000:].encode()]))
        assert response.status_code == 413
        # 400: malformed JSON, not an object, bad parameters.
        for body in (b"{bad", b"", b"[1, 2]", b"\xff\xfe", b'"text"'):
            response = client.post(url, content=body)
            assert response.status_code == 400, body
            assert response.json()["error"]["code"] == "malformed-json"
        for payload in ({}, {"contentBlocks": []}, {"contentBlocks": [{"text": "no type"}]},
                        {"contentBlocks": "hi"}):
            response = client.post(url, json=payload)
            assert response.status_code == 400, payload
            assert response.json()["error"]["code"] == "invalid-params"
        assert client.post("/api/sessions", json={"cwd": "relative"}).status_code == 400
        assert client.post("/api/sessions", json={"cwd": 3}).status_code == 400
        assert client.get(f"/api/sessions/{session}/events",
                          params={"since": "-1"}).status_code == 400
        assert client.post("/api/approvals/nope", json={"decision": "maybe"}).status_code == 400
        # 404: unknown session or approval.
        for response in (client.get("/api/sessions/nope/history"),
                         client.get("/api/sessions/nope/events"),
                         client.post("/api/sessions/nope/cancel"),
                         client.post("/api/approvals/nope", json={"decision": "allow"})):
            assert response.status_code == 404, response.text
        # The server is still fine after all that.
        assert client.get("/api/sessions").status_code == 200
        assert web.extra_stdout() == []


def test_deeply_nested_json_is_a_400_with_a_bounded_depth(tmp_path: Path) -> None:
    """Nesting used to reach the parser's recursion limit: a 500, or past it a reset
    connection. Deeper than 64 levels is now a 400 before parsing; brackets inside
    strings do not count, and 64 levels still parse (then fail as parameters)."""
    patch = write_patch(tmp_path, CHAT_SCRIPT)
    with WebProcess([patch], cwd=Path.cwd()) as web, web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        url = f"/api/sessions/{session}/prompt"
        for depth in (65, 990, 5_000, 200_000):
            body = '{"contentBlocks": ' + "[" * depth + "]" * depth + "}"
            response = client.post(url, content=body)
            assert response.status_code == 400, (depth, response.text)
            assert response.json()["error"] == {
                "code": "malformed-json",
                "message": "the JSON body nests deeper than 64 levels"}
        body = '{"contentBlocks": ' + "[" * 63 + "]" * 63 + "}"
        response = client.post(url, content=body)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid-params"
        text = "[{" * 10_000
        response = client.post(url, json={"contentBlocks": [{"type": "text", "text": text}]})
        assert response.status_code == 202, response.text
        assert client.post(f"/api/sessions/{session}/cancel",
                           content="[" * 100 + "]" * 100).status_code == 400
        assert client.get("/api/status").status_code == 200
    assert not [line for line in web.stderr if "Traceback" in line], "".join(web.stderr)


def test_session_prompt_stream_history_and_cancel(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, CHAT_SCRIPT)
    with WebProcess([patch], cwd=Path.cwd()) as web, web.client() as client:
        created = client.post("/api/sessions", json={"cwd": str(Path.cwd())})
        assert created.status_code == 201
        session = created.json()["sessionId"]
        listed = client.get("/api/sessions").json()["sessions"]
        assert [s["sessionId"] for s in listed] == [session]
        assert listed[0]["cwd"] == str(Path.cwd())
        # Narrowed as session/list is: one session, one workspace root, the latest.
        here = str(Path.cwd().resolve())
        for query in ({"sessionId": session}, {"workspace": here, "limit": "1"}):
            narrowed = client.get("/api/sessions", params=query).json()["sessions"]
            assert [s["sessionId"] for s in narrowed] == [session], query
        assert client.get("/api/sessions", params={"sessionId": "nope"}).json() == {
            "sessions": []}
        for query in ({"limit": "0"}, {"limit": "x"}, {"workspace": "relative"}):
            response = client.get("/api/sessions", params=query)
            assert response.status_code == 400, query
            assert response.json()["error"]["code"] == "invalid-params"

        message_id = prompt(client, session, "where am I?")
        events = stream_until_turn_end(client, session)
        types = [e["type"] for e in events]
        assert types[0] == "agent/inbox/spliced"
        assert events[0]["data"]["inserted"][0]["id"] == message_id
        assert "assistant/delta" in types and "tool/call" in types and "tool/result" in types
        assert [e["seq"] for e in events] == list(range(len(events)))
        deltas = "".join(e["data"]["text"] for e in events if e["type"] == "assistant/delta")
        assert "Let me check where I am." in deltas and "Hello from the script." in deltas
        call = next(e for e in events if e["type"] == "tool/call")
        assert call["data"]["name"] == "working_directory"
        assert events[-1]["data"]["reason"]["kind"] == "completed"

        history = client.get(f"/api/sessions/{session}/history").json()["events"]
        assert history[: len(events)] == events
        # A stream from `since` replays only the later events, then goes live.
        with client.stream("GET", f"/api/sessions/{session}/events",
                           params={"since": len(events) - 1}) as response:
            frames = sse_events(response)
            name, data, frame_id = next(frames)
            assert (name, frame_id) == ("session.event", str(len(events) - 1))
            name, data, _ = next(frames)
            assert (name, data["status"]) == ("session.status", "idle")

        # Cancel: the third scripted answer waits a minute; cancel ends the turn now.
        assert client.post(f"/api/sessions/{session}/cancel").json() == {"cancelled": False}
        prompt(client, session, "take your time")
        with client.stream("GET", f"/api/sessions/{session}/events",
                           params={"since": len(history)}) as response:
            for name, data, _ in sse_events(response):
                if name == "session.event" and data["event"]["type"] == "step/start":
                    answer = client.post(f"/api/sessions/{session}/cancel")
                    assert answer.json() == {"cancelled": True}
                if name == "session.event" and data["event"]["type"] == "turn/end":
                    assert data["event"]["data"]["reason"]["kind"] == "cancelled"
                    break
        status = client.get("/api/status").json()
        assert status["profile"] == "web" and status["patchReload"] == "live"
        assert web.stop() == 0


def test_tools_and_effective_config_with_provenance(tmp_path: Path) -> None:
    with WebProcess([OFFLINE_PATCH], cwd=Path.cwd()) as web, web.client() as client:
        tools = client.get("/api/tools").json()["tools"]
        names = [t["name"] for t in tools]
        assert names == sorted(names) and {"working_directory", "read_file"} <= set(names)
        assert all(isinstance(t["parameters"], dict) and t["description"] for t in tools)
        answer = client.get("/api/config").json()
        assert answer["patchReload"] == "live" and answer["reloadRequired"] is False
        config = answer["config"]
        assert config["profile"] == "web"
        rows = {r["id"]: r for r in config["rows"]}
        assert rows["web-server"]["config"] == {"host": "127.0.0.1", "port": 0}
        assert rows["web-server"]["provenance"]["config.port"].startswith("dsh-web-app:")
        assert rows["agent"]["provenance"]["config.default_route"].startswith(str(OFFLINE_PATCH))
        # A *_env key names a variable (shown); literal secret values are masked
        # (tests/launcher/test_mask_secrets.py), and provenance stays readable.
        assert rows["llm"]["config"]["api_key_env"] == "DEEPSEEK_API_KEY"
        assert rows["llm"]["provenance"]["config.api_key_env"].startswith("dsh-base:")
        assert web.token not in json.dumps(answer)


def test_a_sessions_own_routes_answer_and_an_unknown_session_is_404(tmp_path: Path) -> None:
    """Settings, policy, model, remembered approvals, changes, usage and the user's shell,
    for a live session and for an id no store knows."""
    with WebProcess([OFFLINE_PATCH], cwd=Path.cwd()) as web, web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        routes = [("GET", "settings", None), ("POST", "policy", {"mode": "ask"}),
                  ("POST", "model", {"model": None}), ("POST", "approvals/forget", None),
                  ("GET", "changes", None), ("GET", "usage", None),
                  ("POST", "shell", {"command": "echo hi"})]
        for method, route, body in routes:
            response = client.request(method, f"/api/sessions/nope/{route}", json=body)
            assert response.status_code == 404, (route, response.text)
            assert response.json()["error"]["code"] == "unknown-session"
            response = client.request(method, f"/api/sessions/{session}/{route}", json=body)
            assert response.status_code == 200, (route, response.text)
        settings = client.get(f"/api/sessions/{session}/settings").json()
        assert (settings["model"], settings["policy"]) == ("scripted", "ask")
        assert client.get(f"/api/sessions/{session}/changes").json() == {
            "changes": [], "files": []}
        assert client.get(f"/api/sessions/{session}/usage").json()["turns"] == 0
        assert web.stop() == 0


def test_guarded_tool_waits_for_approval(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, WRITE_SCRIPT + WRITE_SCRIPT, extra=ASK_POLICY)
    with WebProcess([patch], cwd=Path.cwd()) as web, web.client() as client:
        assert client.get("/api/approvals").json() == {"approvals": []}
        for decision in ("deny", "allow"):
            session = client.post("/api/sessions").json()["sessionId"]
            prompt(client, session, "write a note")
            seen = []
            with client.stream("GET", f"/api/sessions/{session}/events") as response:
                for name, data, _ in sse_events(response):
                    if name == "approval":
                        seen.append(data["state"])
                        if data["state"] == "pending":
                            pending = client.get("/api/approvals").json()["approvals"]
                            assert [a["approvalId"] for a in pending] == [data["approvalId"]]
                            assert pending[0]["toolCall"]["name"] == "write_file"
                            assert pending[0]["sessionId"] == session
                            answer = client.post(f"/api/approvals/{data['approvalId']}",
                                                 json={"decision": decision})
                            assert answer.json()["decision"] == decision
                            again = client.post(f"/api/approvals/{data['approvalId']}",
                                                json={"decision": decision})
                            assert again.status_code == 404
                    if name == "session.event" and data["event"]["type"] == "tool/result":
                        result = data["event"]["data"]
                    if name == "session.event" and data["event"]["type"] == "turn/end":
                        break
            assert seen == ["pending", decision]
            if decision == "deny":
                assert result["message"]["isError"] and result["error"]["code"] == "DENIED"
                assert not (Path.cwd() / "note.txt").exists()
            else:
                assert not result["message"]["isError"]
                assert (Path.cwd() / "note.txt").read_text() == "hello"
        assert client.get("/api/approvals").json() == {"approvals": []}


def test_page_and_assets(tmp_path: Path) -> None:
    with WebProcess([OFFLINE_PATCH], cwd=Path.cwd()) as web, web.client(auth=False) as anon:
        page = anon.get("/", params={"token": web.token})
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "/static/app.js" in page.text
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert anon.get("/").status_code == 401
        for asset in ("app.js", "style.css"):  # the shipped page files are public
            assert anon.get(f"/static/{asset}").status_code == 200
        assert anon.get("/static/app.js", headers={"Host": "evil.example"}).status_code == 403
        assert anon.get("/static/secret", params={"token": web.token}).status_code == 404


def test_sigterm_with_an_open_stream_exits_0(tmp_path: Path) -> None:
    web = WebProcess([OFFLINE_PATCH], cwd=Path.cwd())
    try:
        with web.client() as client:
            session = client.post("/api/sessions").json()["sessionId"]
            with client.stream("GET", f"/api/sessions/{session}/events") as response:
                reader = sse_events(response)
                name, _, _ = next(reader)
                assert name == "session.status"
                web.send(signal.SIGTERM)
                with pytest.raises(StopIteration):
                    next(reader)  # the server ends the stream
    finally:
        code = web.stop()
    assert code == 0, "".join(web.stderr)
    assert sum("dsh web: open http://127.0.0.1:" in line for line in web.stderr) == 1


def test_command_line(run_dsh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    helped = run_dsh("web", "-h")
    assert helped.returncode == 0 and "--port PORT" in helped.stdout
    for args, needle in ((["--port", "x"], "--port must be an integer"),
                         (["--port", "70000"], "--port must be an integer"),
                         (["--bogus"], "unknown argument"), (["--host"], "needs a value")):
        done = run_dsh("web", "--patch", str(OFFLINE_PATCH), *args)
        assert done.returncode == 2, done.stderr
        assert needle in done.stderr and done.stdout == ""
    widened = tmp_path / "wide.yml"
    widened.write_text("- {id: web-server, merge: {config: {host: 0.0.0.0}}}\n")
    done = run_dsh("web", "--patch", str(OFFLINE_PATCH), "--patch", str(widened))
    assert done.returncode == 2 and "pass --host explicitly" in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        done = run_dsh("web", "--patch", str(OFFLINE_PATCH), "--port",
                       str(taken.getsockname()[1]))
        assert done.returncode == 2 and "cannot listen on 127.0.0.1:" in done.stderr


def test_explicit_host_warns(tmp_path: Path) -> None:
    with WebProcess([OFFLINE_PATCH], cwd=Path.cwd(), args=["--host", "0.0.0.0"]) as web, \
            web.client() as client:
        assert web.info["host"] == "0.0.0.0"
        assert web.info["url"].startswith(f"http://127.0.0.1:{web.port}/?token=")
        assert client.get("/api/tools").status_code == 200
        assert any("warning: listening on 0.0.0.0" in line for line in web.stderr)


def test_stream_resumes_after_last_event_id(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, CHAT_SCRIPT)
    with WebProcess([patch], cwd=Path.cwd()) as web, web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        prompt(client, session, "hi")
        events = stream_until_turn_end(client, session)
        with client.stream("GET", f"/api/sessions/{session}/events",
                           headers={"Last-Event-ID": str(events[-3]["seq"])}) as response:
            reader = sse_events(response)
            frames = [next(reader) for _ in range(2)]
        assert [int(f[2]) for f in frames if f[2]] == [events[-2]["seq"], events[-1]["seq"]]
        bad = client.get(f"/api/sessions/{session}/events", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 400


def final_text(events: list[dict]) -> str:
    messages = [e["data"]["message"] for e in events if e["type"] == "assistant/message"]
    return "".join(b["text"] for b in messages[-1]["content"] if b["type"] == "text")


def test_the_offline_example_answers_in_the_page_without_asking(tmp_path: Path) -> None:
    """The README's first question in the web app, in a project: every tool call succeeds
    unasked, and the answer says where and what the project is."""
    (Path.cwd() / "pyproject.toml").write_text(
        '[project]\nname = "demo"\ndescription = "A demo project."\n')
    with WebProcess([OFFLINE_PATCH], cwd=Path.cwd()) as web, web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        prompt(client, session, "Where am I working?")
        events = stream_until_turn_end(client, session)
        results = [e["data"]["message"] for e in events if e["type"] == "tool/result"]
        assert len(results) == 2 and not any(r["isError"] for r in results)
        answer = final_text(events)
        assert answer.startswith(f"You are working in `{Path.cwd()}`.")
        assert '**demo**; its `pyproject.toml` describes it as "A demo project."' in answer
        assert client.get("/api/approvals").json() == {"approvals": []}


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_the_boundary_example_says_what_the_user_decided(tmp_path: Path,
                                                         decision: str) -> None:
    """examples/offline/boundary.yml in the page: the move outside the workspace is asked
    about, and the scripted answer agrees with the user's decision."""
    boundary = OFFLINE_PATCH.parent / "boundary.yml"
    with WebProcess([OFFLINE_PATCH, boundary], cwd=Path.cwd()) as web, \
            web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        prompt(client, session, "What is in the parent directory?")
        events = []
        with client.stream("GET", f"/api/sessions/{session}/events") as response:
            for name, data, _ in sse_events(response):
                if name == "approval" and data["state"] == "pending":
                    client.post(f"/api/approvals/{data['approvalId']}",
                                json={"decision": decision})
                if name == "session.event":
                    events.append(data["event"])
                    if data["event"]["type"] == "turn/end":
                        break
        answer = final_text(events)
        if decision == "allow":
            assert "You allowed it, and the tool answered: `../ (" in answer
            assert "refused" not in answer
        else:
            assert "It was refused:" in answer and "You allowed it" not in answer
def test_half_open_connections_are_closed_and_streams_are_not(tmp_path: Path) -> None:
    """Connections that never finish a request head (nothing sent, half a head, a head
    trickled a byte at a time) are closed after the shipped ``request_timeout_s`` (10 s);
    a body that stops coming is a 408 that closes its connection; an event stream and a
    keep-alive client that keeps asking are left alone."""
    patch = write_patch(tmp_path, "- text: \"Hello.\"\n")
    with WebProcess([patch], cwd=Path.cwd()) as web, web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        head = (f"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n"
                f"Authorization: Bearer {web.token}\r\n").encode()
        silent, partial, trickled = [], [], []
        for _ in range(100):
            silent.append(socket.create_connection(("127.0.0.1", web.port)))
            sock = socket.create_connection(("127.0.0.1", web.port))
            sock.sendall(head)  # no blank line: the head never ends
            partial.append(sock)
            trickled.append(socket.create_connection(("127.0.0.1", web.port)))
        body = socket.create_connection(("127.0.0.1", web.port))
        body.sendall(f"POST /api/sessions/{session}/prompt HTTP/1.1\r\n"
                     f"Host: 127.0.0.1:{web.port}\r\nAuthorization: Bearer {web.token}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode())
        with client.stream("GET", f"/api/sessions/{session}/events") as stream:
            lines = stream.iter_lines()
            open_ = {id(s): s for s in [*silent, *partial, *trickled]}
            deadline = time.monotonic() + 40  # turns "never closed" into a failure
            sent = 0
            while open_ and time.monotonic() < deadline:
                for sock in trickled:  # one more header byte each, while they are open
                    if id(sock) in open_:
                        try:
                            sock.sendall(b"X-Slow: y\r\n"[sent % 11:sent % 11 + 1])
                        except OSError:
                            del open_[id(sock)]
                sent += 1
                ready, _, _ = select.select(list(open_.values()), [], [], 0.3)
                for sock in ready:
                    try:
                        data = sock.recv(1024)
                    except ConnectionResetError:
                        data = b""
                    assert data == b"", data  # closed, not answered
                    del open_[id(sock)]
                assert client.get("/api/status").status_code == 200  # keep-alive, busy
            assert not open_, f"{len(open_)} half-open connections still open"
            body.settimeout(5)
            answer = b""
            while chunk := body.recv(4096):  # to the end: the server closes it
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert b'"code": "timeout"' in answer and b"connection: close" in answer.lower()
            # The stream was open all along: it still carries the session's events.
            prompt(client, session, "hi")
            names = []
            for line in lines:
                if line.startswith("event: "):
                    names.append(line[7:])
                if line.startswith("data: ") and '"turn/end"' in line:
                    break
            assert "session.event" in names
        for sock in [*silent, *partial, *trickled, body]:
            sock.close()
