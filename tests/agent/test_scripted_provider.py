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
    assert [len(r.tool_calls) for r in responses] == [1, 1, 0]
    assert responses[1].tool_calls[0].arguments == '{"cd": ".."}'
    assert responses[-1].text.startswith("Done: ")


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
