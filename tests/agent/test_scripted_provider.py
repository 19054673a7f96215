"""The scripted provider: script files, per-session replay, chunking, errors."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from agentkit import write_script

from dsh.core.errors import ConfigError
from dsh.runtime.kernel.kernel import Kernel
from dsh.runtime.providers.base import (
    Finish,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.runtime.providers.scripted import ScriptedModel, load_script

EXAMPLE = Path(__file__).parents[2] / "examples" / "offline" / "script.yml"


def request(session: str = "s", text: str = "") -> ModelRequest:
    return ModelRequest(session, "scripted",
                        ({"role": "user", "content": [{"type": "text", "text": text}]},))


def collect(model: ScriptedModel, req: ModelRequest) -> list[Any]:
    async def run() -> list[Any]:
        return [chunk async for chunk in model.stream(req)]
    return asyncio.run(run())


def model_of(tmp_path: Path, responses: list[dict[str, Any]], chunk_size: int = 4) -> ScriptedModel:
    return ScriptedModel(load_script(write_script(tmp_path, responses)),
                         chunk_size=chunk_size, context_window=1000)


def test_the_example_script_loads() -> None:
    responses = load_script(str(EXAMPLE))
    assert [[c.name for c in r.tool_calls] for r in responses] == [
        ["working_directory", "read_file"], []]
    assert [name for name, _ in responses[-1].quotes] == ["where", "project"]
    assert responses[-1].text.startswith("You are working in `{where}`.")


def tool_result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "toolCallId": call_id, "isError": False,
            "content": [{"type": "text", "text": text}]}


def test_quotes_say_what_the_tools_answered(tmp_path: Path) -> None:
    model = model_of(tmp_path, [{
        "reasoning": "It said {where}.",
        "text": "In {where}: {name}. {about} {missing} {nomatch} {whole}",
        "quote": {
            "where": {"call": "call_1", "match": 'directory: "(.*)"'},
            "name": {"call": "call_2", "match": r'(?s)name = "(\w+)".*?version = "(.*?)"',
                     "as": r"**\1** \2"},
            "about": {"call": "call_2", "match": "^description = (.*)$", "else": "?"},
            "missing": {"call": "call_9", "else": "(none)"},
            "nomatch": {"call": "call_1", "match": "zzz"},
            "whole": {"call": "call_3"}}}], chunk_size=1000)
    messages = ({"role": "user", "content": [{"type": "text", "text": "where?"}]},
                tool_result("call_1", 'Current working directory: "/w/{about}"'),
                tool_result("call_2", 'name = "thing"\nversion = "1.2"\n'),
                tool_result("call_3", "  whole text  "))
    chunks = collect(model, ModelRequest("s", "scripted", messages))
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    # A quoted value is never quoted again: "/w/{about}" stays as the tool said it.
    assert text == ("In /w/{about}: **thing** 1.2. ? (none) "
                    "(nothing in call_1's result matches) whole text")
    reasoning = "".join(c.text for c in chunks if isinstance(c, ReasoningDelta))
    assert reasoning == "It said /w/{about}."


@pytest.mark.parametrize(("quote", "problem"), [
    ("[1]", "'quote' must map placeholder names"),
    ("{1x: {call: c}}", "quote name '1x' must be a word"),
    ("{a: {match: x}}", "quote 'a' needs the id of a tool call"),
    ("{a: {call: c, match: '('}}", "quote 'a': 'match' is not a regular expression"),
    ("{a: {call: c, as: x}}", "quote 'a': 'as' needs a 'match'"),
    ("{a: {call: c, else: 5}}", "quote 'a': match, as and else must be strings"),
    ("{a: {call: c, when: x}}", "quote 'a' must be a mapping of call, match, as and else"),
])
def test_bad_quotes_are_refused_at_load(tmp_path: Path, quote: str, problem: str) -> None:
    path = tmp_path / "script.yml"
    path.write_text(f"- text: hi\n  quote: {quote}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_script(str(path))
    assert problem in str(info.value)


def test_chunk_delay_paces_the_stream(tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of(tmp_path, [{"text": "abcdefgh", "chunk_delay_ms": 1}], chunk_size=2)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:  # counts the pauses instead of timing them
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    chunks = collect(model, request())
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["ab", "cd", "ef", "gh"]
    assert slept == [0.001] * 3  # between pieces, not before the first


def test_stream_chunks_text_and_tool_calls(tmp_path: Path) -> None:
    model = model_of(tmp_path, [
        {"text": "Hello world", "tool_calls": [{"name": "a", "arguments": {"x": 1}},
                                               {"name": "b", "arguments": "{}", "id": "mine"}],
         "usage": {"inputTokens": 3, "outputTokens": 4}},
    ])
    chunks = collect(model, request())
    assert chunks[:3] == [TextDelta("Hell"), TextDelta("o wo"), TextDelta("rld")]
    calls = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert calls[0] == ToolCallDelta(0, id="call_1", name="a")
    assert "".join(c.arguments for c in calls if c.index == 0) == '{"x": 1}'
    assert ToolCallDelta(1, id="mine", name="b") in calls
    assert chunks[-2:] == [Usage(3, 4), Finish("tool-calls")]


def test_each_session_replays_from_the_start_with_its_own_call_ids(tmp_path: Path) -> None:
    model = model_of(tmp_path, [{"tool_calls": [{"name": "a"}]}, {"tool_calls": [{"name": "a"}]}])
    ids = [[c.id for c in collect(model, request(s)) if isinstance(c, ToolCallDelta) and c.id]
           for s in ("one", "one", "two")]
    assert ids == [["call_1"], ["call_2"], ["call_1"]]


def test_exhaustion_errors_and_usage_estimates(tmp_path: Path) -> None:
    model = model_of(tmp_path, [
        {"text": "abcdefgh"},
        {"error": {"message": "overloaded", "code": "busy"}},
        {"error": {"message": "plain"}},
    ])
    chunks = collect(model, request(text="x" * 10))
    assert chunks[-2:] == [Usage(3, 2, estimated=True), Finish("stop")]
    with pytest.raises(ModelError) as info:
        collect(model, request())
    assert (info.value.message, info.value.code) == ("overloaded", "busy")
    with pytest.raises(ModelError) as info:
        collect(model, request())
    assert info.value.code == "scripted-error"
    with pytest.raises(ModelError) as info:
        collect(model, request())
    assert info.value.message == "scripted provider: script exhausted after 3 responses"
    assert info.value.code == "script-exhausted"


def test_reasoning_streams_before_the_text_as_its_own_kind(tmp_path: Path) -> None:
    model = model_of(tmp_path, [{"reasoning": "think " * 5, "text": "answer"}])
    chunks = collect(model, request())
    kinds = [type(c).__name__ for c in chunks]
    assert kinds.index("ReasoningDelta") < kinds.index("TextDelta")
    assert "".join(c.text for c in chunks if isinstance(c, ReasoningDelta)) == "think " * 5
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "answer"


def test_length_finish_is_passed_through(tmp_path: Path) -> None:
    chunks = collect(model_of(tmp_path, [{"text": "cut", "finish": "length"}]), request())
    assert chunks[-1] == Finish("length")


@pytest.mark.parametrize(("body", "problem"), [
    ("- text: ok\n  - bad\n", "script.yml:2: invalid YAML: did not find expected key"),
    ("- text: ok\n- !!python/name:os.system\n", "script.yml:2: invalid YAML"),
    ("text: not a list\n", "script.yml: a script must be a list"),
    ("- text: ok\n- texts: typo\n", "script.yml:2: response 2: unknown key 'texts'"),
    ("- text: 5\n", "response 1: 'text' must be a string"),
    ("- tool_calls: [{arguments: {}}]\n", "a tool call needs a 'name'"),
    ("- tool_calls: [{name: a, arguments: 5}]\n", "'arguments' must be a mapping or JSON"),
    ("- tool_calls: [{name: a, extra: 1}]\n", "a tool call must be a mapping"),
    ("- finish: tool-calls\n", "'finish' must be 'stop' or 'length'"),
    ("- delay_ms: -1\n", "'delay_ms' must be a number >= 0"),
    ("- chunk_delay_ms: x\n", "'chunk_delay_ms' must be a number >= 0"),
    ("- usage: {inputTokens: 1}\n", "'usage' must be {inputTokens, outputTokens}"),
    ("- error: oops\n", "'error' must be {message, code?}"),
    ("- 42\n", "a response must be a mapping"),
])
def test_bad_yaml_scripts_name_file_and_line(tmp_path: Path, body: str, problem: str) -> None:
    path = tmp_path / "script.yml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_script(str(path))
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_bad_jsonl_and_missing_files(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "ok"}\n\n{"text": \n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"s\.jsonl:3: invalid JSON"):
        load_script(str(path))
    path.write_text('{"text": "ok"}\n[]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"s\.jsonl:2: a response must be a mapping"):
        load_script(str(path))
    with pytest.raises(ConfigError, match="cannot read script"):
        load_script(str(tmp_path / "absent.yml"))


def test_the_plugin_publishes_its_route_and_reads_relative_paths(tmp_path: Path) -> None:
    write_script(Path.cwd(), [{"text": "hi"}], name="local.jsonl")
    rows = [{"id": "llm", "name": "llm-scripted",
             "config": {"script": "local.jsonl", "route": "mine", "context_window": 7}}]

    async def scenario() -> None:
        kernel = Kernel(rows, profile="t", home=os.getcwd(), cwd=os.getcwd(), env={})
        kernel.load()
        await kernel.start()
        model = kernel.context.service("llm:mine")
        assert (model.default_model, model.context_window) == ("scripted", 7)
        assert model.accepts_model("deepseek-v4-flash")
        await kernel.dispose()

    asyncio.run(scenario())


def test_a_bad_script_fails_the_row_at_start(tmp_path: Path) -> None:
    rows = [{"id": "llm", "name": "llm-scripted", "config": {"script": "absent.yml"}}]

    async def scenario() -> None:
        kernel = Kernel(rows, profile="t", home=os.getcwd(), cwd=os.getcwd(), env={})
        kernel.load()
        with pytest.raises(Exception, match="cannot read script") as info:
            await kernel.start()
        assert info.value.exit_code == 2

    asyncio.run(scenario())
