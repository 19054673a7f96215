"""The stderr progress lines, tested directly on event dicts (no process)."""

from __future__ import annotations

from dsh.runtime.headless.progress import WIDTH, Progress


def tool_call(call_id: str, name: str, arguments: str) -> dict:
    return {"type": "tool/call", "data": {"callId": call_id, "name": name,
                                          "arguments": arguments}}


def tool_result(call_id: str, text: str, *, is_error: bool = False,
                code: str | None = None) -> dict:
    data: dict = {"message": {"role": "tool", "toolCallId": call_id, "isError": is_error,
                              "content": [{"type": "text", "text": text}]}}
    if code:
        data["error"] = {"name": "x", "code": code}
    return {"type": "tool/result", "data": data}


def test_tool_call_and_result_lines_name_the_tool() -> None:
    progress = Progress()
    assert progress.line(tool_call("c1", "read_file", '{"path":"a.txt"}')) == \
        '→ read_file {"path": "a.txt"}'
    assert progress.line(tool_result("c1", "one\ntwo\nthree")) == "← read_file: one (+2 lines)"


def test_failed_result_shows_the_code() -> None:
    progress = Progress()
    progress.line(tool_call("c1", "write_file", "{}"))
    line = progress.line(tool_result("c1", "denied by policy", is_error=True, code="DENIED"))
    assert line == "← write_file failed [DENIED]: denied by policy"


def test_only_non_final_assistant_text_is_progress() -> None:
    progress = Progress()
    final = {"type": "assistant/message", "data": {"message": {
        "content": [{"type": "text", "text": "the answer"}]}}}
    on_the_way = {"type": "assistant/message", "data": {"message": {"content": [
        {"type": "text", "text": "let me look"},
        {"type": "tool-call", "id": "c1", "name": "ls", "arguments": "{}"}]}}}
    assert progress.line(final) is None
    assert progress.line(on_the_way) == "· let me look"


def test_long_values_are_clipped_and_quiet_events_skipped() -> None:
    progress = Progress()
    line = progress.line(tool_call("c1", "t", '{"x": "' + "y" * 1000 + '"}'))
    assert line is not None and len(line) <= WIDTH + 10 and line.endswith("...")
    assert progress.line({"type": "step/start", "data": {}}) is None
    assert progress.line({"type": "error", "data": {"message": "hook failed"}}) == \
        "! hook failed"
    assert progress.line({"type": "warning", "data": {"message": "names collide"}}) == \
        "! warning: names collide"
