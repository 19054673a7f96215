"""Reassembling chunk streams into one assistant message."""

from __future__ import annotations

import pytest

from dsh.runtime.agent.assembly import Assembly
from dsh.runtime.providers.base import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage


def test_fragments_join_by_index_in_arrival_order() -> None:
    assembly = Assembly("call_1_1")
    shown = [assembly.add(c) for c in [
        TextDelta("Let "), ToolCallDelta(1, name="b"), TextDelta(""), ToolCallDelta(0, id="x"),
        ToolCallDelta(0, name="a", arguments='{"p"'), ToolCallDelta(1, arguments="{}"),
        ToolCallDelta(0, arguments=': 1}'), TextDelta("me."), Usage(1, 2), Finish("tool-calls"),
    ]]
    assert [s.text for s in shown if s is not None] == ["Let ", "me."]
    assert assembly.content() == [
        {"type": "text", "text": "Let me."},
        {"type": "tool-call", "id": "x", "name": "a", "arguments": '{"p": 1}'},
        {"type": "tool-call", "id": "call_1_1_1", "name": "b", "arguments": "{}"},
    ]
    assert assembly.usage == Usage(1, 2)
    assert assembly.finish == "tool-calls"


def test_reasoning_is_its_own_kind_and_comes_first() -> None:
    assembly = Assembly("c")
    shown = [assembly.add(c) for c in [
        ReasoningDelta("think", 0), TextDelta("Answer"), ReasoningDelta(" more", 0),
        ReasoningDelta(index=0, signature="sig-1"), ReasoningDelta(index=1, redacted="xyz"),
        ToolCallDelta(0, id="t", name="n", arguments="{}"), Finish("tool-calls"),
    ]]
    assert [(type(s).__name__, s.text) for s in shown if s is not None] == [
        ("ReasoningDelta", "think"), ("TextDelta", "Answer"), ("ReasoningDelta", " more")]
    assert assembly.content() == [
        {"type": "reasoning", "text": "think more", "signature": "sig-1"},
        {"type": "reasoning", "text": "", "redacted": "xyz"},
        {"type": "text", "text": "Answer"},
        {"type": "tool-call", "id": "t", "name": "n", "arguments": "{}"},
    ]
    assert assembly.text == "Answer"


def test_a_stream_without_finish_gets_one_inferred() -> None:
    plain = Assembly("c")
    plain.add(TextDelta("hi"))
    assert (plain.finish, plain.usage) == ("stop", None)
    calling = Assembly("c")
    calling.add(ToolCallDelta(0, arguments="{}"))
    assert calling.finish == "tool-calls"
    assert calling.content() == [{"type": "tool-call", "id": "c_0", "name": "",
                                  "arguments": "{}"}]
    assert Assembly("c").content() == []


def test_anything_else_is_a_provider_bug() -> None:
    with pytest.raises(TypeError, match="provider yielded dict"):
        Assembly("c").add({"type": "text"})  # type: ignore[arg-type]
