"""A session moves between faces: real ``dsh --profile sdk`` runtimes and a real headless
run on one ``DSH_HOME`` (issue 30, 0b and 5).

A session prompted from an SDK runtime that stays alive and idle is continued by
``dsh --profile headless --session-id`` and by a second SDK runtime; the first is told
``session/moved`` and its next prompt takes the session back. A run refused before the
model is called (no key) leaves the store byte for byte as it was.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = [pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
              pytest.mark.skipif(sys.platform == "win32", reason="pids on one host")]


def patches(tmp: Path, *, idle_release_s: float = 0.2) -> list[Path]:
    """The offline profile, a script answering every prompt, leases that move quickly
    (or, with a long ``idle_release_s``, a runtime that keeps what it ran)."""
    script = tmp / "answers.jsonl"
    script.write_text((json.dumps({"text": "ok"}) + "\n") * 10)
    patch = tmp / f"move-{idle_release_s:g}.yml"
    patch.write_text(json.dumps([
        {"id": "llm-scripted", "merge": {"config": {"script": str(script)}}},
        {"id": "sessions", "merge": {"config": {"idle_release_s": idle_release_s,
                                                "lease_heartbeat_s": 0.1,
                                                "lease_expiry_s": 5}}}]))
    return [OFFLINE_PATCH, patch]


def start(tmp: Path, *, idle_release_s: float = 0.2) -> RuntimeProcess:
    proc = RuntimeProcess("sdk", patches(tmp, idle_release_s=idle_release_s), cwd=Path.cwd())
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    return proc


def blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def run_turn(proc: RuntimeProcess, session_id: str, text: str) -> list[dict[str, Any]]:
    rid = proc.request("session/prompt", {"sessionId": session_id,
                                          "contentBlocks": blocks(text)})
    frames = proc.until("session.status", lambda f: f["params"]["sessionId"] == session_id
                        and f["params"]["status"] == "idle", timeout=30)
    answer = next(f for f in frames if f.get("id") == rid)
    assert "result" in answer, answer
    return [f["params"]["event"] for f in frames if f.get("method") == "session.event"
            and f["params"]["sessionId"] == session_id]


def lease_of(home: Path, session_id: str) -> Any:
    conn = sqlite3.connect(home / "sessions.db")
    try:
        return conn.execute("SELECT pid FROM session_leases WHERE session_id = ?",
                            (session_id,)).fetchone()
    finally:
        conn.close()


def released(home: Path, session_id: str, bound: float = 20.0) -> None:
    """Wait until nobody leases ``session_id`` (bounded: a failure, never a timing)."""
    deadline = time.monotonic() + bound
    while lease_of(home, session_id) is not None:
        assert time.monotonic() < deadline, "the session's lease was never given back"
        time.sleep(0.05)


def test_an_idle_sdk_session_is_continued_by_headless_and_another_runtime_then_taken_back(
        run_dsh: Any, dsh_home: Path, tmp_path: Path) -> None:
    first = start(tmp_path)
    second = None
    try:
        mine = run_turn(first, "shared", "first, from the SDK")
        assert mine[-1]["type"] == "turn/end"
        released(dsh_home, "shared")
        assert first.proc.poll() is None  # alive and idle, and no longer holding it
        done = run_dsh("--profile", "headless", *(a for p in patches(tmp_path)
                                                  for a in ("--patch", str(p))),
                       "--session-id", "shared", "second, from a terminal")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "ok\n"
        moved = first.until("session.event", lambda f: f["params"]["event"]["type"]
                            == "session/moved", timeout=20)[-1]["params"]
        assert moved["sessionId"] == "shared" and "seq" not in moved["event"]
        # seen while the terminal's run held it (naming it), or once it had exited
        holder = moved["event"]["data"]["holder"]
        assert holder is None or (holder["host"] == socket.gethostname()
                                  and holder["pid"] != first.proc.pid), holder

        second = start(tmp_path, idle_release_s=600)  # it keeps the session until it exits
        run_turn(second, "shared", "third, from another SDK runtime")
        assert lease_of(dsh_home, "shared") == (second.proc.pid,)
        busy = first.call("session/prompt", {"sessionId": "shared",
                                             "contentBlocks": blocks("too early")})
        assert busy["error"]["code"] == -32001
        assert busy["error"]["data"]["holder"]["pid"] == second.proc.pid
        second.close_stdin()
        assert second.wait() == 0, second.stderr()
        released(dsh_home, "shared")

        back = run_turn(first, "shared", "fourth, back in the first runtime")
        assert back[-1]["data"]["reason"]["kind"] == "completed"
        history = first.call("session/history", {"sessionId": "shared"})["result"]
        log = history["events"]
        assert [e["seq"] for e in log] == list(range(len(log)))
        prompts = [e["data"]["content"][0]["text"] for e in log
                   if e["type"] == "user/message" and e["data"]["source"]["kind"] == "user"]
        assert prompts == ["first, from the SDK", "second, from a terminal",
                           "third, from another SDK runtime",
                           "fourth, back in the first runtime"]
        [listed] = first.call("session/list")["result"]["sessions"]
        assert listed["turns"] == 4 and listed["title"] == "first, from the SDK"
        first.close_stdin()
        assert first.wait() == 0, first.stderr()
    finally:
        first.finish()
        if second is not None:
            second.finish()


def snapshot(home: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(home.iterdir()) if p.name.startswith(
        "sessions.db")}


def test_a_run_refused_for_a_missing_key_leaves_the_store_unchanged(
        run_dsh: Any, dsh_home: Path, tmp_path: Path) -> None:
    made = run_dsh("--profile", "headless", *(a for p in patches(tmp_path)
                                              for a in ("--patch", str(p))), "earlier work")
    assert made.returncode == 0, made.stderr
    before = snapshot(dsh_home)
    assert list(before) == ["sessions.db"]  # the runtime checkpointed its log on exit
    no_key = {"DEEPSEEK_API_KEY": None}
    for _ in range(2):
        done = run_dsh("--profile", "headless", "what is here?", env=no_key)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert "no API key for route 'deepseek-official'" in line and "(missing-key)" in line
        assert snapshot(dsh_home) == before
    proc = RuntimeProcess("sdk", [], cwd=Path.cwd(), env={"DEEPSEEK_API_KEY": ""})
    try:
        proc.initialize(Path.cwd())
        listed = proc.call("session/list")["result"]["sessions"]
        answer = proc.call("session/prompt", {"sessionId": "fresh",
                                              "contentBlocks": blocks("hello")})
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"] == {"code": "missing-key"}
        assert proc.call("session/list")["result"]["sessions"] == listed
        proc.close_stdin()
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.finish()
    assert snapshot(dsh_home) == before


def test_the_sdk_client_surfaces_the_move_and_takes_the_session_back(
        run_dsh: Any, dsh_home: Path, tmp_path: Path) -> None:
    import threading

    from dsh.sdk import ClientConfig, DshClient, SessionMoved

    config = ClientConfig(dsh_home=dsh_home, cwd=Path.cwd(), patches=patches(tmp_path),
                          provider="scripted", model="scripted", carrier="python",
                          initialize_timeout=60, request_timeout=60)
    with DshClient(config) as client:
        session = client.new_session()
        assert session.run("from the SDK").stop_reason == "completed"
        seen: list[SessionMoved] = []

        def watch() -> None:
            for moved in client.moves(session.id):
                seen.append(moved)
                return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        released(dsh_home, session.id)
        done = run_dsh("--profile", "headless", *(a for p in patches(tmp_path)
                                                  for a in ("--patch", str(p))),
                       "--session-id", session.id, "from a terminal")
        assert done.returncode == 0, done.stderr
        watcher.join(30)
        [moved] = seen
        assert moved.session_id == session.id
        assert moved.holder is None or moved.holder["host"] == socket.gethostname()
        again = session.run("back in the SDK")
        assert (again.stop_reason, again.final_text) == ("completed", "ok")
        texts = [e["data"]["content"][0]["text"] for e in session.history()
                 if e["type"] == "user/message" and e["data"]["source"]["kind"] == "user"]
        assert texts == ["from the SDK", "from a terminal", "back in the SDK"]


def test_a_mode_set_on_a_released_session_takes_it_back_and_is_logged(
        dsh_home: Path, tmp_path: Path) -> None:
    proc = start(tmp_path)
    try:
        run_turn(proc, "m", "hello")
        released(dsh_home, "m")
        answer = proc.call("session/mode/set", {"sessionId": "m", "mode": "plan"})
        assert answer.get("result") == {"mode": "plan"}, answer
        assert proc.call("session/mode/get", {"sessionId": "m"})["result"]["mode"] == "plan"
        log = proc.call("session/history", {"sessionId": "m"})["result"]["events"]
        assert [e["data"] for e in log if e["type"] == "mode/update"] == [
            {"mode": "plan", "reason": "client"}]
        unknown = proc.call("session/mode/get", {"sessionId": "never-was"})
        assert unknown["error"]["code"] == -32602
        proc.close_stdin()
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.finish()
