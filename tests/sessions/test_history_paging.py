"""``session/history`` pages, over real ``dsh --profile sdk`` processes.

A session far bigger than one page (the scripted model streams a long answer in small
chunks, thousands of ``assistant/delta`` events) is read page by page: the pages join into
exactly the stored log, every seq once, from the runtime that runs it (memory) and from
another runtime (the store, no lease needed). With a small frame cap every page fits in
one frame, and an event larger than any frame comes as a marked stand-in instead of
making the rest of the log unreadable.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")


def patch(tmp: Path, steps: list[dict[str, Any]], *, chunk_size: int,
          max_frame_bytes: int | None = None) -> Path:
    script = tmp / "script.jsonl"
    script.write_text("".join(json.dumps(step) + "\n" for step in steps))
    ops: list[dict[str, Any]] = [{"id": "llm-scripted", "merge": {"config": {
        "script": str(script), "chunk_size": chunk_size}}}]
    if max_frame_bytes is not None:
        ops.append({"id": "sdk-server", "merge": {"config": {"max_frame_bytes": max_frame_bytes}}})
    path = tmp / "paging.yml"
    path.write_text(json.dumps(ops))  # JSON is YAML
    return path


def start(patches: list[Path]) -> RuntimeProcess:
    proc = RuntimeProcess("sdk", patches, cwd=Path.cwd())
    proc.initialize(Path.cwd(), provider="scripted", model="scripted")
    return proc


def run_turn(proc: RuntimeProcess, session_id: str, text: str) -> None:
    rid = proc.request("session/prompt", {"sessionId": session_id,
                                          "contentBlocks": [{"type": "text", "text": text}]})
    frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                        timeout=60)
    assert "result" in next(f for f in frames if f.get("id") == rid)


def pages(proc: RuntimeProcess, session_id: str, **window: Any) -> list[dict[str, Any]]:
    """Every page of the session's history, following ``nextCursor`` to the end."""
    out = []
    params: dict[str, Any] = {"sessionId": session_id, **window}
    while True:
        answer = proc.call("session/history", params, timeout=30)
        assert "result" in answer, answer
        out.append(answer["result"])
        if answer["result"]["nextCursor"] is None:
            return out
        params["cursor"] = answer["result"]["nextCursor"]


def stored(home: Path, session_id: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(home / "sessions.db")
    try:
        return [json.loads(body) for (body,) in conn.execute(
            "SELECT body FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
    finally:
        conn.close()


def joined(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for page in found for event in page["events"]]


def test_a_session_bigger_than_a_page_reads_whole_page_by_page(dsh_home: Path,
                                                                tmp_path: Path) -> None:
    answer = "".join(f"word{i} " for i in range(800))  # ~6.5k characters
    long_turn = patch(tmp_path, [{"text": answer}], chunk_size=2)
    first = start([OFFLINE_PATCH, long_turn])
    second = None
    try:
        run_turn(first, "big", "say a lot")
        log = stored(dsh_home, "big")
        assert len(log) > 2500  # several default pages
        assert [e["seq"] for e in log] == list(range(len(log)))

        found = pages(first, "big")
        assert [len(p["events"]) for p in found[:-1]] == [1000] * (len(found) - 1)
        assert [p["nextCursor"] for p in found[:-1]] == [
            str(1000 * k) for k in range(1, len(found))]
        assert joined(found) == log
        small = pages(first, "big", limit=333)
        assert joined(small) == log
        assert all(len(p["events"]) == 333 for p in small[:-1])

        second = start([OFFLINE_PATCH])  # not live there: read from the store, no lease
        assert joined(pages(second, "big", limit=5000)) == log
        middle = second.call("session/history", {"sessionId": "big", "cursor": "1234",
                                                 "limit": 3})["result"]
        assert [e["seq"] for e in middle["events"]] == [1234, 1235, 1236]
        assert middle["nextCursor"] == "1237"
        past = second.call("session/history", {"sessionId": "big", "cursor": "999999"})
        assert past["result"] == {"events": [], "nextCursor": None}
        unknown = second.call("session/history", {"sessionId": "nope"})
        assert unknown["error"]["code"] == -32602
    finally:
        first.finish()
        if second is not None:
            second.finish()


def test_pages_fit_the_frame_cap_and_a_giant_event_stands_in(dsh_home: Path,
                                                             tmp_path: Path) -> None:
    cap = 64 * 1024
    giant = "g" * (100 * 1024)  # its assistant/message event is larger than any frame
    steps = [{"text": "x" * 3000}] * 30 + [{"text": giant}]
    runtime = start([OFFLINE_PATCH, patch(tmp_path, steps, chunk_size=4096,
                                          max_frame_bytes=cap)])
    try:
        for turn in range(len(steps)):
            run_turn(runtime, "wide", f"turn {turn}")
        log = stored(dsh_home, "wide")
        before = len(runtime.raw_stdout)
        found = pages(runtime, "wide")
        answers = [json.loads(line) for line in runtime.raw_stdout[before:]]
        sizes = [len(line) for line, frame in zip(runtime.raw_stdout[before:], answers,
                                                  strict=True)
                 if "result" in frame and "events" in frame["result"]]
        assert len(sizes) == len(found) > 3
        assert max(sizes) <= cap  # every page arrived as one frame under the cap
        events = joined(found)
        assert [e["seq"] for e in events] == [e["seq"] for e in log]
        stand_ins = [e for e in events if "omitted" in e]
        assert len(stand_ins) == 1
        [stand_in] = stand_ins
        kept = log[stand_in["seq"]]
        assert kept["type"] == stand_in["type"] == "assistant/message"
        assert giant in json.dumps(kept)  # the store keeps it whole
        assert stand_in["omitted"]["bytes"] > cap
        assert [e for e in events if "omitted" not in e] == [
            e for e in log if e["seq"] != stand_in["seq"]]
    finally:
        runtime.finish()
