"""Input that is not what it claims, over the real SDK protocol (``dsh --profile sdk``).

Each bad request is answered ``-32602`` (an unanswerable id or method ``-32600``) naming
what is wrong, before the agent sees it: the runtime goes on, and a good prompt afterwards
runs a whole turn whose log starts at seq 0, so none of the bad ones left a trace.
Lone surrogates are sent as JSON escapes (``"\\ud800"``), as a client would.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

SURROGATE = "\ud800"

BAD_PARAMS: list[tuple[str, str, Any, str]] = [
    ("surrogate-in-text", "session/prompt",
     {"sessionId": "s", "contentBlocks": [{"type": "text", "text": f"hi {SURROGATE}"}]},
     "params.contentBlocks[0].text: holds a lone surrogate (U+D800)"),
    ("low-surrogate-in-session-id", "session/prompt",
     {"sessionId": "s\udc80", "contentBlocks": [{"type": "text", "text": "hi"}]},
     "params.sessionId: holds a lone surrogate (U+DC80)"),
    ("surrogate-in-a-key", "session/new", {"cwd\udfff": "/"}, "a key holds a lone surrogate"),
    ("surrogate-in-cwd", "session/new", {"cwd": f"/tmp/{SURROGATE}"},
     "params.cwd: holds a lone surrogate"),
    ("surrogate-in-history", "session/new", {"history": [
        {"role": "user", "content": [{"type": "text", "text": SURROGATE}]}]},
     "params.history[0].content[0].text: holds a lone surrogate"),
    ("text-not-a-string", "session/prompt",
     {"sessionId": "s", "contentBlocks": [{"type": "text", "text": 5}]},
     '"contentBlocks"[0]: a text block\'s "text" must be a string'),
    ("text-missing", "session/prompt",
     {"sessionId": "s", "contentBlocks": [{"type": "text"}]},
     '"contentBlocks"[0]: a text block\'s "text" must be a string'),
    ("unknown-block-type", "session/prompt",
     {"sessionId": "s", "contentBlocks": [{"type": "text", "text": "a"}, {"type": "audio"}]},
     "\"contentBlocks\"[1]: unknown content block type 'audio'"),
    ("image-without-base64", "session/prompt",
     {"sessionId": "s", "contentBlocks": [{"type": "image", "mimeType": "image/png",
                                           "data": "not base64!"}]},
     'an image block\'s "data" must be base64 text'),
    ("block-not-an-object", "session/prompt", {"sessionId": "s", "contentBlocks": ["hi"]},
     '"contentBlocks"[0]: must be a {type, ...} object'),
    ("history-text-not-a-string", "session/new", {"history": [
        {"role": "user", "content": [{"type": "text", "text": ["a"]}]}]},
     '"history"[0]: content[0]: a text block\'s "text" must be a string'),
    ("params-an-array", "session/prompt", ["s", [{"type": "text", "text": "hi"}]],
     "params must be an object"),
    ("params-an-array-for-list", "session/list", [], "params must be an object"),
    ("params-an-array-for-history", "session/history", ["s"], "params must be an object"),
    ("session-id-a-number", "session/prompt",
     {"sessionId": 5, "contentBlocks": [{"type": "text", "text": "hi"}]},
     '"sessionId" must be a non-empty string'),
    ("session-id-an-object", "session/resume", {"sessionId": {"id": "s"}},
     '"sessionId" must be a non-empty string'),
    ("session-id-empty", "session/history", {"sessionId": ""},
     '"sessionId" must be a non-empty string'),
    ("cwd-a-number", "session/new", {"cwd": 5}, '"cwd" must be a non-empty string'),
    ("cwd-relative", "session/new", {"cwd": "relative/dir"},
     '"cwd" is not an existing absolute directory'),
    ("cwd-with-nul", "session/new", {"cwd": "/tmp\u0000/x"},
     '"cwd" is not an existing absolute directory'),
    ("history-cursor-a-number", "session/history", {"sessionId": "s", "cursor": 3},
     '"cursor" must be a "nextCursor" of an earlier page'),
    ("history-cursor-junk", "session/history", {"sessionId": "s", "cursor": "-1"},
     '"cursor" must be a "nextCursor" of an earlier page'),
    ("history-limit-zero", "session/history", {"sessionId": "s", "limit": 0},
     '"limit" must be a positive integer'),
    ("history-limit-a-bool", "session/history", {"sessionId": "s", "limit": True},
     '"limit" must be a positive integer'),
]


def send_escaped(proc: RuntimeProcess, message: dict[str, Any]) -> None:
    """Send ``message`` as ASCII JSON: a lone surrogate travels as its ``\\uXXXX`` escape."""
    proc.send_raw(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One initialized runtime shared by the cases (each case is one request)."""
    home = tmp_path_factory.mktemp("home")
    cwd = tmp_path_factory.mktemp("cwd")
    proc = RuntimeProcess("sdk", [OFFLINE_PATCH], cwd=cwd, env={"DSH_HOME": str(home)})
    try:
        proc.initialize(cwd, provider="scripted", model="scripted")
        yield proc
    finally:
        proc.finish()


@pytest.mark.parametrize(("method", "params", "expected"),
                         [case[1:] for case in BAD_PARAMS], ids=[c[0] for c in BAD_PARAMS])
def test_a_request_that_is_not_what_it_claims_is_invalid_params(
        runtime: RuntimeProcess, method: str, params: Any, expected: str) -> None:
    runtime._next_id += 1
    rid = runtime._next_id
    send_escaped(runtime, {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    answer = runtime.response(rid)
    assert answer["error"]["code"] == -32602, answer
    assert expected in answer["error"]["message"], answer
    assert runtime.call("runtime/status")["result"]["state"] == "ready"


@pytest.mark.parametrize("where", ["id", "method"])
def test_an_id_or_method_that_cannot_be_sent_back_gets_an_anonymous_answer(
        runtime: RuntimeProcess, where: str) -> None:
    message = {"jsonrpc": "2.0", "id": 7, "method": "session/list"}
    message[where] = f"x{SURROGATE}"
    send_escaped(runtime, message)
    answer = runtime.recv()
    assert answer["id"] is None and answer["error"]["code"] == -32600, answer
    assert "lone surrogate" in answer["error"]["message"]


def test_after_every_bad_request_a_good_prompt_runs_a_whole_turn_from_seq_0(
        runtime: RuntimeProcess) -> None:
    for _, method, params, _ in BAD_PARAMS:
        runtime._next_id += 1
        send_escaped(runtime, {"jsonrpc": "2.0", "id": runtime._next_id, "method": method,
                               "params": params})
        assert runtime.response(runtime._next_id)["error"]["code"] == -32602
    rid = runtime.request("session/prompt", {"sessionId": "s", "contentBlocks": [
        {"type": "text", "text": "fine \U0001f600"}]})
    frames = runtime.until("session.status", lambda f: f["params"]["status"] == "idle",
                           timeout=30)
    assert "result" in next(f for f in frames if f.get("id") == rid)
    history = runtime.call("session/history", {"sessionId": "s"})["result"]
    seqs = [e["seq"] for e in history["events"]]
    assert seqs == list(range(len(seqs))) and seqs[0] == 0
    assert history["events"][-1]["data"]["reason"]["kind"] == "completed"
    listed = runtime.call("session/list")["result"]["sessions"]
    assert [s["sessionId"] for s in listed] == ["s"]  # no bad request created a session
