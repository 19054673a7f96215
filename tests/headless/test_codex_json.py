"""``--json-format codex``: a run's events are what ``codex exec --json`` prints.

:data:`THREAD_EVENT` is the contract, recorded as data: the ``ThreadEvent`` union and the
``ThreadItem`` types of ``@openai/codex-sdk`` 0.163.0 (``npm pack
@openai/codex-sdk@0.163.0``, ``package/dist/index.d.ts``), transcribed type by type into a
JSON schema. Optional TypeScript members (``exit_code?``, ``result?``, ``error?``,
``_meta?``) are optional here; every other member is required; ``unknown`` is any value.
Members the types do not declare are refused (``additionalProperties: false``), so a
misspelt field fails here rather than in someone's Codex script. Real runs of the real
runner are validated against it, and the translation is checked event by event.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

jsonschema = pytest.importorskip("jsonschema")


def _object(properties: dict[str, Any], *optional: str) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "required": [name for name in properties if name not in optional]}


def _const(value: str) -> dict[str, Any]:
    return {"const": value}


_STRING: dict[str, Any] = {"type": "string"}
_NUMBER: dict[str, Any] = {"type": "number"}
_ANY: dict[str, Any] = {}

# dist/index.d.ts of @openai/codex-sdk 0.163.0, type by type.
CODEX_SDK_VERSION = "0.163.0"
THREAD_ITEM: dict[str, Any] = {"oneOf": [
    # AgentMessageItem
    _object({"id": _STRING, "type": _const("agent_message"), "text": _STRING}),
    # ReasoningItem
    _object({"id": _STRING, "type": _const("reasoning"), "text": _STRING}),
    # CommandExecutionItem (status: CommandExecutionStatus)
    _object({"id": _STRING, "type": _const("command_execution"), "command": _STRING,
             "aggregated_output": _STRING, "exit_code": _NUMBER,
             "status": {"enum": ["in_progress", "completed", "failed"]}}, "exit_code"),
    # FileChangeItem (changes: FileUpdateChange[], status: PatchApplyStatus)
    _object({"id": _STRING, "type": _const("file_change"),
             "changes": {"type": "array", "items": _object({
                 "path": _STRING, "kind": {"enum": ["add", "delete", "update"]}})},
             "status": {"enum": ["completed", "failed"]}}),
    # McpToolCallItem (result.content: ContentBlock[] of the MCP SDK)
    _object({"id": _STRING, "type": _const("mcp_tool_call"), "server": _STRING,
             "tool": _STRING, "arguments": _ANY,
             "result": _object({"content": {"type": "array", "items": {
                                    "type": "object", "required": ["type"]}},
                                "_meta": _ANY, "structured_content": _ANY}, "_meta"),
             "error": _object({"message": _STRING}),
             "status": {"enum": ["in_progress", "completed", "failed"]}},
            "result", "error"),
    # WebSearchItem
    _object({"id": _STRING, "type": _const("web_search"), "query": _STRING}),
    # TodoListItem (items: TodoItem[])
    _object({"id": _STRING, "type": _const("todo_list"), "items": {
        "type": "array", "items": _object({"text": _STRING,
                                           "completed": {"type": "boolean"}})}}),
    # ErrorItem
    _object({"id": _STRING, "type": _const("error"), "message": _STRING}),
]}
USAGE = _object({"input_tokens": _NUMBER, "cached_input_tokens": _NUMBER,
                 "cache_write_input_tokens": _NUMBER, "output_tokens": _NUMBER,
                 "reasoning_output_tokens": _NUMBER})
THREAD_EVENT: dict[str, Any] = {"oneOf": [
    _object({"type": _const("thread.started"), "thread_id": _STRING}),
    _object({"type": _const("turn.started")}),
    _object({"type": _const("turn.completed"), "usage": USAGE}),
    _object({"type": _const("turn.failed"), "error": _object({"message": _STRING})}),
    _object({"type": _const("item.started"), "item": THREAD_ITEM}),
    _object({"type": _const("item.updated"), "item": THREAD_ITEM}),
    _object({"type": _const("item.completed"), "item": THREAD_ITEM}),
    _object({"type": _const("error"), "message": _STRING}),
]}
VALIDATOR = jsonschema.Draft202012Validator(THREAD_EVENT)


def validate(events: list[dict[str, Any]]) -> None:
    jsonschema.Draft202012Validator.check_schema(THREAD_EVENT)
    for event in events:
        errors = list(VALIDATOR.iter_errors(event))
        assert not errors, (event, [e.message for e in errors])


def scripted(tmp_path: Path, responses: list[dict[str, Any]]) -> Path:
    script = tmp_path / "script.yml"
    script.write_text(json.dumps(responses))
    patch = tmp_path / "patch.yml"
    patch.write_text(json.dumps([
        {"insert": [{"id": "llm-scripted", "name": "llm-scripted",
                     "config": {"script": str(script)}}]},
        {"id": "agent", "merge": {"config": {"default_route": "scripted"}}}]))
    return patch


def run_codex(patch: Path, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                list[dict[str, Any]]]:
    proc = subprocess.run(
        [sys.executable, "-m", "dsh", "--profile", "headless", "--patch", str(patch), *args],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    return proc, [json.loads(line) for line in proc.stdout.splitlines()]


WORK = [
    {"reasoning": "Plan first.", "text": "I will plan, then work.",
     "usage": {"inputTokens": 100, "outputTokens": 10},
     "tool_calls": [{"name": "todo_write", "arguments": {"todos": [
         {"content": "write the note", "status": "in_progress"},
         {"content": "check it", "status": "pending"}]}}]},
    {"text": "Writing.", "usage": {"inputTokens": 120, "outputTokens": 20},
     "tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt",
                                                          "content": "one\n"}},
                    {"name": "edit_file", "arguments": {"path": "note.txt",
                                                         "old_string": "one",
                                                         "new_string": "two"}},
                    {"name": "bash", "arguments": {"command": "cat note.txt; exit 3"}},
                    {"name": "read_file", "arguments": {"path": "note.txt"}},
                    {"name": "edit_file", "arguments": {"path": "absent.txt",
                                                         "old_string": "a",
                                                         "new_string": "b"}}]},
    {"text": "Checked.", "usage": {"inputTokens": 150, "outputTokens": 5},
     "tool_calls": [{"name": "todo_write", "arguments": {"todos": [
         {"content": "write the note", "status": "completed"},
         {"content": "check it", "status": "completed"}]}}]},
    {"reasoning": "All done.", "text": "The note says two.",
     "usage": {"inputTokens": 160, "outputTokens": 7}},
]


def test_a_run_validates_and_maps_every_kind_of_item(tmp_path: Path) -> None:
    proc, events = run_codex(scripted(tmp_path, WORK), "--json", "--json-format", "codex",
                             "--approval", "auto", "write a note")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    validate(events)
    assert events[0]["type"] == "thread.started" and events[1] == {"type": "turn.started"}
    assert events[-1] == {"type": "turn.completed", "usage": {
        "input_tokens": 530, "cached_input_tokens": 0, "cache_write_input_tokens": 0,
        "output_tokens": 42, "reasoning_output_tokens": 0}}
    items = [(e["type"], e["item"]) for e in events if e["type"].startswith("item.")]
    ids = list(dict.fromkeys(item["id"] for _, item in items))  # in order of first use
    assert ids == [f"item_{n}" for n in range(len(ids))]
    kinds = [(kind, item["type"]) for kind, item in items]
    assert kinds == [
        ("item.completed", "reasoning"), ("item.completed", "agent_message"),
        ("item.started", "todo_list"),
        ("item.completed", "agent_message"),
        ("item.completed", "file_change"), ("item.completed", "file_change"),
        ("item.started", "command_execution"), ("item.completed", "command_execution"),
        ("item.started", "mcp_tool_call"), ("item.completed", "mcp_tool_call"),
        ("item.completed", "file_change"),
        ("item.completed", "agent_message"), ("item.updated", "todo_list"),
        ("item.completed", "reasoning"), ("item.completed", "agent_message"),
        ("item.completed", "todo_list"),
    ]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for kind, item in items:
        by_type.setdefault(f"{kind}:{item['type']}", []).append(item)
    added, updated, failed = by_type["item.completed:file_change"]
    assert added["changes"] == [{"path": "note.txt", "kind": "add"}]
    assert updated["changes"] == [{"path": "note.txt", "kind": "update"}]
    assert added["status"] == updated["status"] == "completed"
    assert failed["status"] == "failed"
    command = by_type["item.completed:command_execution"][0]
    assert command["command"] == "cat note.txt; exit 3" and command["exit_code"] == 3
    assert command["status"] == "failed" and "two" in command["aggregated_output"]
    assert "[Command finished" not in command["aggregated_output"]
    started = by_type["item.started:command_execution"][0]
    assert started["id"] == command["id"] and started["status"] == "in_progress"
    read = by_type["item.completed:mcp_tool_call"][0]
    assert (read["server"], read["tool"], read["arguments"]) == (
        "dsh", "read_file", {"path": "note.txt"})
    assert read["status"] == "completed" and "two" in read["result"]["content"][0]["text"]
    todo = by_type["item.completed:todo_list"][0]
    assert todo["items"] == [{"text": "write the note", "completed": True},
                             {"text": "check it", "completed": True}]
    assert by_type["item.started:todo_list"][0]["items"][0] == {
        "text": "write the note", "completed": False}
    assert by_type["item.completed:agent_message"][-1]["text"] == "The note says two."
    assert (Path.cwd() / "note.txt").read_text() == "two\n"


def test_a_failed_turn_is_turn_failed(tmp_path: Path) -> None:
    patch = scripted(tmp_path, [{"error": {"message": "the model fell over", "code": "x"}}])
    proc, events = run_codex(patch, "--json-format", "codex", "go")  # implies --json
    assert proc.returncode == 1
    validate(events)
    assert [e["type"] for e in events] == ["thread.started", "turn.started", "turn.failed"]
    assert events[-1]["error"] == {"message": "the model fell over"}
    assert "dsh: error: the model fell over (x)" in proc.stderr


def test_json_alone_stays_dshs_format(tmp_path: Path) -> None:
    proc, events = run_codex(scripted(tmp_path, [{"text": "hi"}]), "--json", "go")
    assert proc.returncode == 0
    assert events[0]["type"] == "agent/inbox/spliced" and events[-1]["type"] == "turn/end"


def test_a_bad_format_is_a_usage_error(tmp_path: Path) -> None:
    proc, _ = run_codex(scripted(tmp_path, [{"text": "hi"}]), "--json-format", "codx", "go")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--json-format must be dsh or codex (got 'codx')" in proc.stderr


def test_the_mapping_of_what_a_run_rarely_shows() -> None:
    """MCP tools, web searches, errors, retries and cancellation, on events as the agent
    emits them (no process): each maps to a valid Codex event."""
    from dsh.runtime.headless.codexjson import CodexEvents

    codex = CodexEvents("s1")
    out = codex.started()
    feed = [
        {"type": "turn/start", "data": {"turn": 1}},
        {"type": "tool/call", "data": {"callId": "c1", "name": "mcp__files__read",
                                       "arguments": '{"path": "a"}'}},
        {"type": "tool/result", "data": {"message": {
            "toolCallId": "c1", "isError": True,
            "content": [{"type": "text", "text": "no such file"}]}}},
        {"type": "tool/call", "data": {"callId": "c2", "name": "web_search",
                                       "arguments": '{"queries": ["dsh", "codex"]}'}},
        {"type": "tool/result", "data": {"message": {
            "toolCallId": "c2", "isError": False, "content": [{"type": "text", "text": "r"}]}}},
        {"type": "tool/call", "data": {"callId": "c3", "name": "mcp__odd", "arguments": "{x"}},
        {"type": "error", "data": {"message": "hook h failed"}},
        {"type": "assistant/retry", "data": {"reason": {"message": "stream cut"}}},
        {"type": "tool/result", "data": {"message": {"toolCallId": "unknown"}}},
        {"type": "turn/end", "data": {"reason": {"kind": "cancelled"}}},
    ]
    for event in feed:
        out += codex.translate(event)
    validate(out)
    items = [e["item"] for e in out if "item" in e]
    mcp = items[1]
    assert (mcp["server"], mcp["tool"], mcp["status"]) == ("files", "read", "failed")
    assert mcp["error"] == {"message": "no such file"}
    assert items[3] == {"id": items[2]["id"], "type": "web_search", "query": "dsh; codex"}
    odd = items[4]
    assert (odd["server"], odd["tool"], odd["arguments"]) == ("dsh", "mcp__odd", "{x")
    assert items[5] == {"id": "item_3", "type": "error", "message": "hook h failed"}
    assert items[6]["message"] == "stream cut; asking the model again"
    assert out[-1] == {"type": "turn.failed", "error": {"message": "the turn was cancelled"}}
