"""The SDK wire contract, pinned: one tool-using turn's whole frame transcript per profile.

``dsh --profile sdk`` and ``dsh --profile sdk-minimal`` run with the offline patch (the
scripted provider of ``examples/offline/script.yml`` answers with tool calls, then a final
text). The transcript, both
directions in order, is compared with ``tests/snapshots/<profile>-tool-turn.jsonl`` after
normalising what legitimately varies (times, uuids, temp paths, the version). Regenerate
with ``DSH_UPDATE_SNAPSHOTS=1 python -m pytest tests/protocol -k snapshot`` and review the
diff: method names, event types and fields are a public contract.

Independently of our own snapshot, the turn must carry the events the original runtime
sent, in the original's order (its published transcripts), since its client relies on them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from runtimeproc import OFFLINE_PATCH, REPO, RuntimeProcess

SNAPSHOTS = REPO / "tests" / "snapshots"
UPDATE = os.environ.get("DSH_UPDATE_SNAPSHOTS") == "1"  # read before fixtures strip DSH_*
PROMPT_TEXT = "Where am I? Then look at the parent directory."

needs_offline = pytest.mark.skipif(
    not OFFLINE_PATCH.exists(), reason=f"the offline example is missing: {OFFLINE_PATCH}")

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME_KEYS = frozenset({"time", "time0"})
# Estimated from the prompt text, which holds the run's (variable-length) temp paths.
_ESTIMATE_KEYS = frozenset({"inputTokens", "totalTokens"})

# What the original runtime's client reads, in the order the original sent it
# (its published transcripts): ours must contain this sequence, whatever else it adds.
REFERENCE_ORDER = [
    ("session.event", "agent/inbox/spliced"),
    ("session.status", "running"),
    ("session.event", "turn/start"),
    ("session.event", "step/start"),
    ("session.event", "assistant/message"),
    ("session.event", "tool/call"),
    ("session.event", "tool/result"),
    ("session.event", "step/end"),
    ("session.event", "step/start"),
    ("session.event", "assistant/message"),
    ("session.event", "step/end"),
    ("session.event", "turn/end"),
    ("session.status", "idle"),
]


class Normaliser:
    """Replace what varies between runs with stable placeholders.

    uuids become ``<uuid:N>`` numbered by first appearance, so the transcript still shows
    which ids are the same (a prompt's messageId and its receipt); times become 0; token
    estimates become ``<tokens>``; the run's directories become ``<cwd>``, ``<home>`` and
    ``<tmp>``; the version becomes ``<version>``.
    """

    def __init__(self, replacements: dict[str, str]) -> None:
        # Longest first, so a path inside another is replaced as the longer one.
        self._paths = sorted(replacements.items(), key=lambda kv: -len(kv[0]))
        self._uuids: dict[str, str] = {}

    def __call__(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        if key in _TIME_KEYS and isinstance(value, (int, float)):
            return 0
        if key in _ESTIMATE_KEYS and isinstance(value, int):
            return "<tokens>"
        if isinstance(value, str):
            for path, name in self._paths:
                value = value.replace(path, name)
            return _UUID.sub(self._uuid, value)
        return value

    def _uuid(self, match: re.Match[str]) -> str:
        return self._uuids.setdefault(match.group(0), f"<uuid:{len(self._uuids) + 1}>")


def run_tool_turn(profile: str, workdir: Path) -> list[dict[str, Any]]:
    """initialize -> session/prompt -> frames until idle -> shutdown; both directions."""
    transcript: list[dict[str, Any]] = []
    proc = RuntimeProcess(profile, [OFFLINE_PATCH], cwd=workdir)
    original_send = proc.send

    def send(message: dict[str, Any]) -> None:
        transcript.append({"send": message})
        original_send(message)

    proc.send = send  # type: ignore[method-assign]
    try:
        proc.request("initialize", {"cwd": str(workdir), "provider": "scripted",
                                    "model": "scripted", "clientInfo": {"name": "snapshot"}})
        transcript.append({"recv": proc.recv(timeout=30)})
        proc.request("session/prompt", {"sessionId": "snap-1", "contentBlocks": [
            {"type": "text", "text": PROMPT_TEXT}]})
        while True:
            frame = proc.recv(timeout=30)
            transcript.append({"recv": frame})
            if frame.get("method") == "session.status" and frame["params"]["status"] == "idle":
                break
        proc.request("shutdown")
        transcript.append({"recv": proc.recv(timeout=30)})
        assert proc.wait() == 0
    finally:
        proc.finish()
    return transcript


def key_sequence(transcript: list[dict[str, Any]]) -> list[tuple[str, str]]:
    keys = []
    for entry in transcript:
        frame = entry.get("recv", {})
        if frame.get("method") == "session.event":
            keys.append(("session.event", frame["params"]["event"]["type"]))
        elif frame.get("method") == "session.status":
            keys.append(("session.status", frame["params"]["status"]))
    return keys


def is_subsequence(needle: list[Any], haystack: list[Any]) -> bool:
    it = iter(haystack)
    return all(any(item == candidate for candidate in it) for item in needle)


@needs_offline
@pytest.mark.parametrize("profile", ["sdk", "sdk-minimal"])
def test_tool_turn_snapshot(profile: str, tmp_path: Path) -> None:
    workdir = Path.cwd()
    transcript = run_tool_turn(profile, workdir)
    from dsh import __version__

    paths = {workdir: "<cwd>", Path(os.environ["DSH_HOME"]): "<home>", tmp_path: "<tmp>"}
    replacements = {str(p): name for p, name in paths.items()}
    replacements.update({str(p.resolve()): name for p, name in paths.items()})
    normalise = Normaliser({**replacements, __version__: "<version>"})
    lines = [json.dumps(normalise(entry), sort_keys=True) for entry in transcript]
    path = SNAPSHOTS / f"{profile}-tool-turn.jsonl"
    if UPDATE or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        if not UPDATE:
            pytest.fail(f"wrote the missing snapshot {path.name}; review and commit it")
    assert lines == path.read_text().splitlines(), (
        f"{path.name} changed; if intended, rerun with DSH_UPDATE_SNAPSHOTS=1 and review")


@needs_offline
@pytest.mark.parametrize("profile", ["sdk", "sdk-minimal"])
def test_tool_turn_keeps_the_originals_order_and_fields(profile: str) -> None:
    transcript = run_tool_turn(profile, Path.cwd())
    assert is_subsequence(REFERENCE_ORDER, key_sequence(transcript)), key_sequence(transcript)
    frames = [e["recv"] for e in transcript if "recv" in e]
    message_id = next(f["result"]["messageId"] for f in frames
                      if isinstance(f.get("result"), dict) and "messageId" in f["result"])
    events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert all(isinstance(e["time"], int) for e in events)
    spliced = events[0]["data"]["inserted"]
    assert [m["id"] for m in spliced] == [message_id]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_type.setdefault(event["type"], []).append(event["data"])
    call_message = by_type["assistant/message"][0]["message"]
    tool_call = next(b for b in call_message["content"] if b["type"] == "tool-call")
    assert isinstance(json.loads(tool_call["arguments"]), dict)
    call = by_type["tool/call"][0]
    assert {call["callId"], call["name"], call["arguments"]} == {
        tool_call["id"], tool_call["name"], tool_call["arguments"]}
    result = by_type["tool/result"][0]["message"]
    assert result["role"] == "tool"
    assert result["toolCallId"] == tool_call["id"]
    assert isinstance(result["isError"], bool)
    assert result["content"][0]["type"] == "text"
    final = by_type["assistant/message"][-1]["message"]["content"]
    # The original's reasoning block comes before the text; its client reads text blocks
    # only, so the reasoning never reaches final_response.
    assert [b["type"] for b in final] == ["reasoning", "text"]
    assert set(final[0]) == {"type", "text"} and final[0]["text"]
    streamed = "".join(d["text"] for d in by_type["assistant/reasoning-delta"])
    assert streamed == final[0]["text"]
    assert final[0]["text"] not in "".join(d["text"] for d in by_type["assistant/delta"])
    assert by_type["turn/end"][-1]["reason"] == {"kind": "completed"}
