"""An ACP client's W3C trace context (``session/prompt``'s ``_meta``, as ACP documents
propagating it) makes the turn part of the client's trace in the OTLP receiver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from acpkit import OFFLINE_PATCH, RawAcp, write_patch
from otlp_receiver import Receiver

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def test_the_prompts_meta_is_the_turns_parent(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        raw = RawAcp(write_patch(tmp_path, [{"text": "traced"}, {"text": "untraced"}]))
        try:
            raw.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            session = raw.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})
            session_id = session["result"]["sessionId"]
            for meta in ({"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": "acp=1"},
                         {"traceparent": ["not", "a", "string"]}):
                answer = raw.call("session/prompt", {
                    "sessionId": session_id, "_meta": meta,
                    "prompt": [{"type": "text", "text": "hello"}]})
                assert answer["result"] == {"stopReason": "end_turn"}, answer
            raw.close_stdin()
            assert raw.wait() == 0
        finally:
            raw.finish()
        receiver.wait(lambda r: sum(s.name == "invoke_agent dsh" for s in r.spans()) == 2)
        first, second = sorted((s for s in receiver.spans() if s.name == "invoke_agent dsh"),
                               key=lambda s: s.start_ns)
    assert (first.trace_id, first.parent_id) == (TRACE, SPAN)
    assert second.parent_id == "" and second.trace_id != TRACE  # garbage: a trace of its own
