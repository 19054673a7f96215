"""Both wire formats from plain values: request bodies out, streamed events in."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsh.runtime.providers import anthropic_wire, openai_wire, responses_wire
from dsh.runtime.providers.base import (
    Finish,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.runtime.transports.sse import ServerSentEvent

CALLING = {"role": "assistant", "source": {"kind": "model", "provider": "anthropic"},
           "content": [
               {"type": "reasoning", "text": "think", "signature": "sig"},
               {"type": "reasoning", "text": "", "redacted": "enc"},
               {"type": "text", "text": "Let me look."},
               {"type": "tool-call", "id": "t1", "name": "ls", "arguments": '{"p": 1}'}]}
RESULT = {"role": "tool", "toolCallId": "t1", "isError": True,
          "content": [{"type": "text", "text": "denied"},
                      {"type": "image", "mimeType": "image/png", "data": "AAAA"}]}
ANSWER = {"role": "assistant", "content": [{"type": "reasoning", "text": "done thinking"},
                                           {"type": "text", "text": "Done."}]}


def redact(text: str) -> str:
    return text


# -- OpenAI format -------------------------------------------------------------------------


@pytest.mark.parametrize(("style", "effort", "fields"), [
    ("deepseek", None, {}),
    ("deepseek", "none", {"thinking": {"type": "disabled"}}),
    ("deepseek", "off", {"thinking": {"type": "disabled"}}),
    ("deepseek", "ultra", {"thinking": {"type": "enabled"}, "reasoning_effort": "ultra"}),
    ("openai", "off", {"reasoning_effort": "none"}),
    ("openai", "low", {"reasoning_effort": "low"}),
    ("auto", "max", {"reasoning_effort": "max"}),
    ("auto", None, {}),
    ("openrouter", "none", {"reasoning": {"effort": "none"}}),
    ("openrouter", "high", {"reasoning": {"effort": "high"}}),
    ("none", "high", {}),
])
def test_reasoning_fields_per_style(style: str, effort: str | None,
                                    fields: dict[str, Any]) -> None:
    assert openai_wire.reasoning_fields(style, effort) == fields


def test_reasoning_goes_back_only_with_tool_calls_and_only_for_deepseek() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, CALLING,
                RESULT, ANSWER]
    sent = openai_wire.chat_messages(messages, passback="deepseek")
    assert sent[1] == {"role": "assistant", "content": "Let me look.",
                       "reasoning_content": "think", "tool_calls": [
                           {"id": "t1", "type": "function",
                            "function": {"name": "ls", "arguments": '{"p": 1}'}}]}
    assert sent[-1] == {"role": "assistant", "content": "Done."}  # ignored there: not sent
    plain = openai_wire.chat_messages(messages, passback="none")
    assert "reasoning_content" not in plain[1]
    only_thought = openai_wire.chat_messages(
        [{"role": "assistant", "content": [{"type": "reasoning", "text": "hm"}]}],
        passback="deepseek")
    assert only_thought == [{"role": "assistant", "content": ""}]  # "", never null


def _calling(route: str, *thoughts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "source": {"kind": "model", "provider": route},
            "content": [*thoughts, {"type": "tool-call", "id": "t1", "name": "ls",
                                    "arguments": "{}"}]}


@pytest.mark.parametrize(("thoughts", "sent"), [
    ([{"type": "reasoning", "text": "a", "field": "reasoning_content"},
      {"type": "reasoning", "text": "b", "field": "reasoning_content"}],
     {"reasoning_content": "ab"}),
    ([{"type": "reasoning", "text": "plan", "field": "reasoning"}], {"reasoning": "plan"}),
    ([{"type": "reasoning", "text": "t", "field": "reasoning_details",
       "redacted": json.dumps([{"type": "reasoning.text", "text": "t", "signature": "S",
                                "index": 0}])}],
     {"reasoning_details": [{"type": "reasoning.text", "text": "t", "signature": "S",
                             "index": 0}]}),
    ([{"type": "reasoning", "text": "kept, not sent"}], {}),  # an unknown field's
])
def test_reasoning_goes_back_the_way_it_came(thoughts: list[dict[str, Any]],
                                             sent: dict[str, Any]) -> None:
    [entry] = openai_wire.chat_messages([_calling("vllm", *thoughts)], passback="as-sent",
                                        route="vllm")
    assert {k: v for k, v in entry.items() if k.startswith("reasoning")} == sent
    # another route's reasoning never goes back: this server did not send it
    [other] = openai_wire.chat_messages([_calling("deepseek-official", *thoughts)],
                                        passback="as-sent", route="vllm")
    assert not [k for k in other if k.startswith("reasoning")]


def _decode(events: list[dict[str, Any]], **kwargs: Any) -> tuple[list[Any], list[Any]]:
    decoder = openai_wire.ChunkDecoder(redact, **kwargs)
    chunks = [c for e in events for c in decoder.decode(ServerSentEvent(json.dumps(e)))]
    return chunks, decoder.end()


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_chat_decoder_records_the_field_reasoning_came_in() -> None:
    chunks, _ = _decode([_delta({"reasoning_content": "a"}), _delta({"reasoning": "b"}),
                         _delta({"reasoning_content": "c", "reasoning": "c"}),
                         _delta({}, "stop")])
    assert chunks == [ReasoningDelta("a", field="reasoning_content"),
                      ReasoningDelta("b", field="reasoning"),
                      ReasoningDelta("c", field="reasoning_content")]  # shown once


def test_openrouter_reasoning_details_are_merged_and_kept_whole() -> None:
    first = {"type": "reasoning.text", "text": "Thinking ", "index": 0,
             "format": "anthropic-claude-v1", "signature": None}
    chunks, end = _decode([
        _delta({"reasoning": "Thinking ", "reasoning_details": [first]}),
        _delta({"reasoning": "hard.", "reasoning_details": [
            {"type": "reasoning.text", "text": "hard.", "index": 0}]}),
        _delta({"reasoning_details": [{"type": "reasoning.text", "signature": "SIG",
                                       "index": 0},
                                      {"type": "reasoning.encrypted", "data": "ENC",
                                       "index": 1}]}),
        _delta({"content": "Done."}, "stop")])
    assert chunks == [ReasoningDelta("Thinking ", field="reasoning_details"),
                      ReasoningDelta("hard.", field="reasoning_details"),
                      ReasoningDelta("", field="reasoning_details"), TextDelta("Done.")]
    details = json.loads(end[0].redacted)
    assert end[0].field == "reasoning_details" and end[-1] == Finish("stop")
    assert details == [{"type": "reasoning.text", "text": "Thinking hard.", "index": 0,
                        "format": "anthropic-claude-v1", "signature": "SIG"},
                       {"type": "reasoning.encrypted", "data": "ENC", "index": 1}]


def test_a_reasoning_field_of_another_name_is_kept_and_reported() -> None:
    seen: list[str] = []
    chunks, _ = _decode([_delta({"thinking": "hmm"}), _delta({"thinking": "!"}),
                         _delta({"content": "ok", "role": "assistant"}, "stop")],
                        unknown=seen.append)
    assert chunks == [ReasoningDelta("hmm"), ReasoningDelta("!"), TextDelta("ok")]
    assert seen == ["thinking", "thinking"]  # the route says it once


def test_chat_decoder_keeps_reasoning_apart_and_reads_cache_usage() -> None:
    decoder = openai_wire.ChunkDecoder(redact)
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None,
                                            "reasoning_content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": None, "reasoning_content": "Hmm"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning": "via OpenRouter"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hi", "reasoning_content": None}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 20,
                                  "prompt_cache_hit_tokens": 64,
                                  "prompt_cache_miss_tokens": 36,
                                  "completion_tokens_details": {"reasoning_tokens": 7}}},
    ]
    chunks = [c for e in events for c in decoder.decode(ServerSentEvent(json.dumps(e)))]
    assert chunks == [ReasoningDelta("Hmm", field="reasoning_content"),
                      ReasoningDelta("via OpenRouter", field="reasoning"), TextDelta("Hi")]
    assert decoder.end() == [Usage(100, 20, cache_hit_tokens=64, reasoning_tokens=7),
                             Finish("stop")]
    openai_usage = openai_wire.ChunkDecoder(redact)
    openai_usage.decode(ServerSentEvent(json.dumps({"choices": [], "usage": {
        "prompt_tokens": 10, "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 8}}})))
    openai_usage.decode(ServerSentEvent(json.dumps(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})))
    assert openai_usage.end()[0] == Usage(10, 1, cache_hit_tokens=8)


# -- Anthropic format ----------------------------------------------------------------------


def test_messages_body_merges_roles_and_keeps_signed_thinking_for_its_route() -> None:
    request = ModelRequest("s", "m", (
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {"role": "user", "content": [{"type": "text", "text": "context"}]},
        CALLING, RESULT, ANSWER,
        {"role": "user", "content": [{"type": "text", "text": "next"}]},
    ), route="anthropic", reasoning_effort="high")
    body = json.loads(anthropic_wire.encode_body(request, model="claude", max_tokens=100,
                                                 images=True, form="adaptive"))
    assert body["system"] == [{"type": "text", "text": "be brief",
                               "cache_control": {"type": "ephemeral"}}]
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "high"}
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [b["text"] for b in messages[0]["content"]] == ["look", "context"]
    assert messages[1]["content"] == [
        {"type": "thinking", "thinking": "think", "signature": "sig"},
        {"type": "redacted_thinking", "data": "enc"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "t1", "name": "ls", "input": {"p": 1}}]
    assert messages[2]["content"] == [{"type": "tool_result", "tool_use_id": "t1",
                                       "is_error": True, "content": [
        {"type": "text", "text": "denied"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "AAAA"}}]}]
    # Unsigned reasoning (another route's) is not sent; the answer's text is.
    assert messages[3]["content"] == [{"type": "text", "text": "Done."}]
    assert messages[4]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    other = anthropic_wire.convert(request.messages, route="deepseek-anthropic")[1]
    assert [b["type"] for b in other[1]["content"]] == ["text", "tool_use"]


def test_tool_input_the_model_got_wrong_travels_as_an_empty_object() -> None:
    bad = {"role": "assistant", "content": [
        {"type": "tool-call", "id": "t", "name": "x", "arguments": "{not json"}]}
    _, messages = anthropic_wire.convert([bad])
    assert messages[0]["content"][0]["input"] == {}


def test_thinking_fields_per_form() -> None:
    fields = anthropic_wire.thinking_fields
    assert fields("deepseek", "max", 100) == {
        "thinking": {"type": "enabled"}, "output_config": {"effort": "max"}}
    assert fields("adaptive", "off", 100) == {"thinking": {"type": "disabled"}}
    assert fields("adaptive", None, 100) == {}
    assert fields("none", "high", 100) == {}
    assert fields("enabled", "high", 32000) == {
        "thinking": {"type": "enabled", "budget_tokens": 16000}}
    assert fields("enabled", "none", 32000) == {"thinking": {"type": "disabled"}}


@pytest.mark.parametrize("limit", [1025, 2000, 4096, 32000, 128000])
def test_budgets_stay_within_what_the_api_takes(limit: int) -> None:
    budgets = [anthropic_wire.budget_tokens(e, limit)
               for e in ("minimal", "low", "medium", "high", "xhigh", "max")]
    assert all(1024 <= b < limit for b in budgets)
    assert budgets == sorted(budgets)  # more effort never thinks less


def sse(name: str, data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(json.dumps({"type": name, **data}), name)


def test_event_decoder_streams_every_block_kind() -> None:
    decoder = anthropic_wire.EventDecoder(redact)
    stream = [
        sse("message_start", {"message": {"usage": {
            "input_tokens": 10, "cache_read_input_tokens": 80,
            "cache_creation_input_tokens": 5, "output_tokens": 1}}}),
        sse("ping", {}),
        sse("content_block_start", {"index": 0, "content_block": {
            "type": "thinking", "thinking": "", "signature": ""}}),
        sse("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta",
                                                          "thinking": "hm"}}),
        sse("content_block_delta", {"index": 0, "delta": {"type": "signature_delta",
                                                          "signature": "SIG"}}),
        sse("content_block_stop", {"index": 0}),
        sse("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
        sse("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
        sse("content_block_stop", {"index": 1}),
        sse("content_block_start", {"index": 2, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}}),
        sse("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta",
                                                          "partial_json": '{"a"'}}),
        sse("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta",
                                                          "partial_json": ": 1}"}}),
        sse("content_block_stop", {"index": 2}),
        sse("content_block_start", {"index": 3, "content_block": {
            "type": "tool_use", "id": "toolu_2", "name": "pwd", "input": {}}}),
        sse("content_block_stop", {"index": 3}),
        sse("some_future_event", {}),
        sse("message_delta", {"delta": {"stop_reason": "tool_use"},
                              "usage": {"output_tokens": 42}}),
        sse("message_stop", {}),
    ]
    chunks = [c for e in stream for c in decoder.decode(e)]
    assert chunks == [
        ReasoningDelta("", 0), ReasoningDelta("hm", 0), ReasoningDelta(index=0, signature="SIG"),
        TextDelta("Hi"),
        ToolCallDelta(0, id="toolu_1", name="ls"), ToolCallDelta(0, arguments='{"a"'),
        ToolCallDelta(0, arguments=": 1}"),
        ToolCallDelta(1, id="toolu_2", name="pwd"), ToolCallDelta(1, arguments="{}"),
    ]
    assert decoder.done and decoder.finished
    assert decoder.end() == [Usage(95, 42, cache_hit_tokens=80, cache_write_tokens=5),
                             Finish("tool-calls")]


@pytest.mark.parametrize(("event", "code", "retryable"), [
    (sse("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}),
     "overloaded", True),
    (sse("error", {"error": {"type": "invalid_request_error", "message": "bad"}}),
     "server-error", False),
    (ServerSentEvent("{nope", "message_start"), "bad-response", False),
    (sse("content_block_delta", {"index": 9, "delta": {"type": "text_delta", "text": "x"}}),
     "bad-response", False),
])
def test_event_decoder_failures(event: ServerSentEvent, code: str, retryable: bool) -> None:
    with pytest.raises(ModelError) as info:
        anthropic_wire.EventDecoder(redact).decode(event)
    assert (info.value.code, info.value.retryable) == (code, retryable)


def test_refusal_and_context_window_stops() -> None:
    refused = anthropic_wire.EventDecoder(redact)
    refused.decode(sse("message_delta", {"delta": {"stop_reason": "refusal"}}))
    with pytest.raises(ModelError) as info:
        refused.end()
    assert info.value.code == "refusal"
    full = anthropic_wire.EventDecoder(redact)
    full.decode(sse("message_delta", {"delta": {"stop_reason": "model_context_window_exceeded"}}))
    assert full.end() == [Finish("length")]


# -- Responses format ----------------------------------------------------------------------


def test_responses_input_items_keep_this_routes_reasoning_and_order() -> None:
    calling = {**CALLING, "source": {"kind": "model", "provider": "openai"}, "content": [
        {"type": "reasoning", "text": "why", "signature": "rs_1", "redacted": "ENC",
         "field": "summary"},
        {"type": "reasoning", "text": "raw", "signature": "rs_2", "field": "content"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool-call", "id": "t1", "name": "ls", "arguments": '{"p": 1}'}]}
    request = ModelRequest("s", "m", (
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        calling, RESULT, ANSWER,
        {"role": "system", "content": [{"type": "text", "text": "later note"}]},
    ), route="openai", reasoning_effort="off", max_tokens=500)
    body = json.loads(responses_wire.encode_body(request, model="gpt-5.5", images=True))
    assert body["instructions"] == "be brief" and body["max_output_tokens"] == 500
    assert body["reasoning"] == {"effort": "none", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"] and body["store"] is False
    items = body["input"]
    assert items[1] == {"type": "reasoning", "id": "rs_1", "encrypted_content": "ENC",
                        "summary": [{"type": "summary_text", "text": "why"}]}
    assert items[2] == {"type": "reasoning", "id": "rs_2", "summary": [],
                        "content": [{"type": "reasoning_text", "text": "raw"}]}
    assert items[3] == {"type": "message", "role": "assistant", "content": "Let me look."}
    assert items[4] == {"type": "function_call", "call_id": "t1", "name": "ls",
                        "arguments": '{"p": 1}'}
    assert items[5] == {"type": "function_call_output", "call_id": "t1", "output": [
        {"type": "input_text", "text": "denied"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}]}
    assert items[6] == {"type": "message", "role": "assistant", "content": "Done."}  # unsigned
    assert items[7]["role"] == "developer"
    plain = json.loads(responses_wire.encode_body(request, model="gpt-4.1", reasoning=False))
    assert "reasoning" not in plain and "include" not in plain


def _rsse(name: str, **data: Any) -> ServerSentEvent:
    return ServerSentEvent(json.dumps({"type": name, "sequence_number": 0, **data}), name)


def test_responses_decoder_streams_items_and_keeps_reasoning_whole() -> None:
    decoder = responses_wire.EventDecoder(redact)
    reasoning = {"id": "rs_9", "type": "reasoning", "summary": []}
    stream = [
        _rsse("response.created", response={}),
        _rsse("response.output_item.added", output_index=0, item=reasoning),
        _rsse("response.reasoning_summary_part.added", output_index=0, summary_index=0),
        _rsse("response.reasoning_summary_text.delta", output_index=0, delta="One."),
        _rsse("response.reasoning_summary_part.added", output_index=0, summary_index=1),
        _rsse("response.reasoning_summary_text.delta", output_index=0, delta="Two."),
        _rsse("response.output_item.done", output_index=0, item={
            **reasoning, "encrypted_content": "ENC",
            "summary": [{"type": "summary_text", "text": "One."}]}),
        _rsse("response.output_item.added", output_index=1, item={"type": "message"}),
        _rsse("response.output_text.delta", output_index=1, delta="Hi"),
        _rsse("response.output_item.added", output_index=2, item={
            "type": "function_call", "call_id": "c1", "name": "ls", "arguments": ""}),
        _rsse("response.output_item.done", output_index=2, item={
            "type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"a":1}'}),
        _rsse("response.some_future_event"),
        _rsse("response.completed", response={"usage": {
            "input_tokens": 100, "input_tokens_details": {"cached_tokens": 64,
                                                          "cache_write_tokens": 0},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 7}}}),
    ]
    chunks = [c for e in stream for c in decoder.decode(e)]
    assert chunks == [
        ReasoningDelta("One.", 0, field="summary"), ReasoningDelta("\n\n", 0),
        ReasoningDelta("Two.", 0, field="summary"),
        ReasoningDelta("", 0, signature="rs_9", redacted="ENC", field="summary"),
        TextDelta("Hi"), ToolCallDelta(0, id="c1", name="ls"),
        ToolCallDelta(0, arguments='{"a":1}')]
    assert decoder.done and decoder.finished
    assert decoder.end() == [Usage(100, 20, cache_hit_tokens=64, cache_write_tokens=0,
                                   reasoning_tokens=7), Finish("tool-calls")]


@pytest.mark.parametrize(("event", "code", "retryable"), [
    (_rsse("response.failed", response={"error": {"code": "server_error", "message": "x"}}),
     "server-error", True),
    (_rsse("response.failed", response={"error": {"code": "invalid_prompt", "message": "x"}}),
     "server-error", False),
    (_rsse("error", code=None, message="overloaded"), "server-error", True),
    (_rsse("response.incomplete", response={"incomplete_details": {
        "reason": "content_filter"}}), "content-filter", False),
    (_rsse("response.output_text.delta", output_index=4, delta="x"), "bad-response", False),
])
def test_responses_decoder_failures(event: ServerSentEvent, code: str,
                                    retryable: bool) -> None:
    with pytest.raises(ModelError) as info:
        responses_wire.EventDecoder(redact).decode(event)
    assert (info.value.code, info.value.retryable) == (code, retryable)


def test_unstored_reasoning_without_its_content_is_not_sent_back() -> None:
    bare = {"role": "assistant", "source": {"kind": "model", "provider": "openai"},
            "content": [{"type": "reasoning", "text": "why", "signature": "rs_1",
                         "field": "summary"}, {"type": "text", "text": "Hi"}]}
    unstored = responses_wire.input_items([bare], route="openai")[1]
    assert [i["type"] for i in unstored] == ["message"]  # the server could not find it
    stored = responses_wire.input_items([bare], route="openai", store=True)[1]
    assert [i["type"] for i in stored] == ["reasoning", "message"]
