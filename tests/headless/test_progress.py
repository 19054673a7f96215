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


def test_everything_from_elsewhere_is_shown_not_obeyed() -> None:
    progress = Progress()
    call = progress.line(tool_call("c1", "evil\x1b]0;t\x07", '{"x": "\x1b[2J"}'))
    result = progress.line(tool_result("c1", "\x1b]52;c;aGk=\x07 out\rhidden"))
    error = progress.line({"type": "error", "data": {"message": "bad\x9b2J"}})
    for line in (call, result, error):
        assert line is not None and "\x1b" not in line and "\x07" not in line
    assert call == '→ evil^[]0;t^G {"x": "^[[2J"}'  # (a raw ESC is no JSON: kept as text)
    assert result == "← evil^[]0;t^G: ^[]52;c;aGk=^G out (+1 lines)"
    assert error == "! bad<U+009B>2J"


def test_paint_styles_the_pieces_after_they_are_made_visible() -> None:
    def paint(text: str, *names: str) -> str:
        return f"<{','.join(names)}>{text}</>"

    progress = Progress(paint)
    assert progress.line(tool_call("c1", "read\x1b", "{}")) == "<dim>→</> <bold,cyan>read^[</> {}"
    ok = {"type": "tool/result", "data": {
        "message": {"toolCallId": "c1", "content": [{"type": "text", "text": "Edited a."}]},
        "diff": {"added": 3, "removed": 1}}}
    assert progress.line(ok) == "<dim>←</> <green>read^[</>: Edited a.<dim> (+3 -1)</>"
    remark = {"type": "assistant/message", "data": {"message": {"content": [
        {"type": "text", "text": "looking"}, {"type": "tool-call", "id": "c2"}]}}}
    assert progress.line(remark) == "<dim>· looking</>"
    assert progress.line(remark, remarks=False) is None
