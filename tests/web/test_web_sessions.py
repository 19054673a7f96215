"""The web API's share of the trust boundary, against real ``dsh web`` processes.

* Input that is not what it claims is 400 ``invalid-params`` with the same message the
  SDK and ACP servers give (lone surrogates sent as JSON escapes, text that is no string,
  unknown block types), and the server goes on.
* ``GET /api/sessions/{id}/history`` pages (``?cursor=&limit=``, ``nextCursor``).
* A session another runtime on the same home is running is 429 ``busy`` naming it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from webkit import WebProcess, prompt, stream_until_turn_end, write_patch

SCRIPT = """\
- text: "First answer."
- text: "Second answer."
- {text: "slow", delay_ms: 60000}
"""


def post_escaped(client: Any, url: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as ASCII JSON, so a lone surrogate travels as its escape."""
    return client.post(url, content=json.dumps(body, ensure_ascii=True).encode("ascii"),
                       headers={"Content-Type": "application/json"})


def test_bad_input_is_400_with_the_protocol_message(tmp_path: Path) -> None:
    with WebProcess([write_patch(tmp_path, SCRIPT)], cwd=Path.cwd()) as web, \
            web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        url = f"/api/sessions/{session}/prompt"
        for body, expected in [
            ({"contentBlocks": [{"type": "text", "text": "a\ud800"}]},
             "params.contentBlocks[0].text: holds a lone surrogate (U+D800)"),
            ({"contentBlocks": [{"type": "text", "text": {"nested": True}}]},
             '"contentBlocks"[0]: a text block\'s "text" must be a string'),
            ({"contentBlocks": [{"type": "file", "path": "/etc/passwd"}]},
             "\"contentBlocks\"[0]: unknown content block type 'file'"),
            ({"contentBlocks": [{"type": "text", "text": "ok"}], "\udc00": 1},
             "a key holds a lone surrogate"),
        ]:
            answer = post_escaped(client, url, body)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["code"] == "invalid-params"
            assert expected in answer.json()["error"]["message"], answer.text
        for body in ({"cwd": "/tmp/\ud800"}, {"cwd": 7}, {"cwd": "relative"}):
            answer = post_escaped(client, "/api/sessions", body)
            assert answer.status_code == 400, (body, answer.text)
        for query in ({"cursor": "x"}, {"limit": "0"}, {"limit": "-3"}, {"limit": "²"}):
            answer = client.get(f"/api/sessions/{session}/history", params=query)
            assert answer.status_code == 400, (query, answer.text)
        # nothing of that reached the session: the first prompt runs from seq 0
        prompt(client, session, "fine")
        events = stream_until_turn_end(client, session)
        assert events[0]["seq"] == 0 and events[-1]["data"]["reason"] == {"kind": "completed"}
        assert [s["sessionId"] for s in client.get("/api/sessions").json()["sessions"]] == [
            session]


def test_history_pages_and_a_session_running_elsewhere_is_busy(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, SCRIPT)
    with WebProcess([patch], cwd=Path.cwd()) as first, first.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        prompt(client, session, "one")
        whole = stream_until_turn_end(client, session)
        prompt(client, session, "two")
        whole = stream_until_turn_end(client, session, turns=2)
        url = f"/api/sessions/{session}/history"
        page = client.get(url).json()
        assert page == {"events": whole, "nextCursor": None}
        found, cursor = [], None
        while True:
            params = {"limit": "4", **({"cursor": cursor} if cursor else {})}
            page = client.get(url, params=params).json()
            assert len(page["events"]) <= 4
            found += page["events"]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert found == whole

        prompt(client, session, "three")  # the slow step: the first server is mid-turn
        with WebProcess([patch], cwd=Path.cwd()) as second, second.client() as other:
            listed = other.get("/api/sessions").json()["sessions"]
            assert [s["sessionId"] for s in listed] == [session]
            for answer in (other.post(f"/api/sessions/{session}/resume"),
                           other.post(f"/api/sessions/{session}/prompt", json={
                               "contentBlocks": [{"type": "text", "text": "me too"}]}),
                           other.get(f"/api/sessions/{session}/events")):
                assert answer.status_code == 429, answer.text
                assert answer.json()["error"]["code"] == "busy"
                message = answer.json()["error"]["message"]
                assert f"pid {first.proc.pid} on host {socket.gethostname()}" in message
            # reading is not running: its history is served from the store
            read = other.get(url, params={"limit": "3"}).json()
            assert read["events"] == whole[:3] and read["nextCursor"] == "3"
