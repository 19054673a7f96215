"""A web client's ``traceparent`` header makes the prompt's turn part of its trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from otlp_receiver import Receiver
from webkit import WebProcess, prompt, stream_until_turn_end, write_patch

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def test_the_prompts_traceparent_header_is_the_turns_parent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patch = write_patch(tmp_path, '- text: "traced"\n')
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        with WebProcess([patch], cwd=Path.cwd()) as web, web.client() as client:
            session_id = client.post("/api/sessions", json={}).json()["sessionId"]
            client.headers["traceparent"] = f"00-{TRACE}-{SPAN}-01"
            prompt(client, session_id, "hello")
            del client.headers["traceparent"]
            stream_until_turn_end(client, session_id)
        receiver.wait(lambda r: any(s.name == "invoke_agent dsh" for s in r.spans()))
        [turn] = [s for s in receiver.spans() if s.name == "invoke_agent dsh"]
    assert (turn.trace_id, turn.parent_id) == (TRACE, SPAN)
