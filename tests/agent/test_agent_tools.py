"""Tool calls inside turns: argument checks, failures, guardrails and approvals."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentkit import JOURNAL, Booted, rows, text, write_script

FIXTURE_TOOLS = {"id": "fixture-tools", "name": "agentkit:FixtureTools"}


def call(name: str, arguments: Any) -> dict[str, Any]:
    """A scripted response making one tool call, followed in scripts by a final answer."""
    return {"text": "calling", "tool_calls": [{"name": name, "arguments": arguments}]}


def run_one(tmp_path: Path, name: str, arguments: Any, *, policy: dict[str, Any] | None = None,
            extra: list[dict[str, Any]] | None = None,
            approver: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run a turn making one call; return its tool/result data and the turn/end data."""
    script = write_script(tmp_path, [call(name, arguments), {"text": "after"}])

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with Booted(rows(script, policy=policy, extra=[FIXTURE_TOOLS, *(extra or [])])) as b:
            b.agent.set_approver(approver)
            await b.agent.prompt("s1", text("go"))
            await b.idle("s1")
            (result,) = b.of("s1", "tool/result")
            return result, b.of("s1", "turn/end")

    return asyncio.run(scenario())


def content(result: dict[str, Any]) -> str:
    return result["message"]["content"][0]["text"]


def test_schema_failure_is_an_error_result_and_the_turn_continues(tmp_path: Path) -> None:
    result, ends = run_one(tmp_path, "working_directory", {"cd": 5})
    assert result["message"]["isError"] is True
    assert result["error"] == {"name": "ToolArgsError", "code": "INVALID_ARGS"}
    assert content(result) == "Error: invalid arguments: cd: expected string"
    assert ends[0]["reason"] == {"kind": "completed"}


def test_missing_required_and_unknown_arguments_are_named(tmp_path: Path) -> None:
    result, _ = run_one(tmp_path, "write_note", {"text": "x"})
    assert content(result) == "Error: invalid arguments: path: required field is missing"
    result, _ = run_one(tmp_path, "working_directory", {"dir": "x"})
    assert content(result) == "Error: invalid arguments: dir: unknown field"


def test_arguments_that_are_not_json_or_not_an_object(tmp_path: Path) -> None:
    result, ends = run_one(tmp_path, "working_directory", '{"cd": ')
    assert content(result).startswith("Error: invalid arguments: not valid JSON")
    assert ends[0]["reason"]["kind"] == "completed"
    result, _ = run_one(tmp_path, "working_directory", "[1]")
    assert content(result) == "Error: invalid arguments: expected a JSON object"


def test_unknown_tool(tmp_path: Path) -> None:
    result, ends = run_one(tmp_path, "teleport", {})
    assert result["error"]["code"] == "UNKNOWN_TOOL"
    assert "unknown tool 'teleport'" in content(result)
    assert "working_directory" in content(result)
    assert ends[0]["reason"]["kind"] == "completed"


def test_a_tool_that_raises_is_an_error_result(tmp_path: Path) -> None:
    result, ends = run_one(tmp_path, "boom", {})
    assert result["error"]["code"] == "TOOL_FAILED"
    assert content(result) == "Error: tool 'boom' failed: RuntimeError: kaboom"
    assert ends[0]["reason"]["kind"] == "completed"


def test_a_tool_reporting_its_own_error_has_no_agent_error(tmp_path: Path) -> None:
    result, _ = run_one(tmp_path, "working_directory", {"cd": "missing"})
    assert result["message"]["isError"] is True
    assert "error" not in result
    assert content(result).startswith("not a directory: ")


def test_workspace_policy_allows_writes_inside_the_cwd(tmp_path: Path) -> None:
    result, _ = run_one(tmp_path, "write_note", {"path": "note.txt", "text": "hi"})
    assert result["message"]["isError"] is False
    assert Path("note.txt").read_text() == "hi"


def test_workspace_policy_denies_writes_outside_when_nobody_can_approve(tmp_path: Path) -> None:
    result, _ = run_one(tmp_path, "write_note", {"path": "../escape.txt", "text": "x"})
    assert result["error"] == {"name": "ToolDeniedError", "code": "DENIED"}
    assert "outside the workspace root" in content(result)
    assert "no client can approve" in content(result)
    assert not Path("../escape.txt").exists()


def test_workspace_policy_asks_the_approver_and_follows_it(tmp_path: Path) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def approve(session_id: str, tool_call: dict[str, Any]) -> str:
        asked.append((session_id, tool_call))
        return "allow"

    result, _ = run_one(tmp_path, "write_note", {"path": "../ok.txt", "text": "x"},
                        approver=approve)
    assert result["message"]["isError"] is False
    assert Path("../ok.txt").read_text() == "x"
    ((session_id, request),) = asked
    assert session_id == "s1"
    assert request["name"] == "write_note"
    assert request["callId"] == result["message"]["toolCallId"]
    assert '"../ok.txt"' in request["arguments"]
    assert "outside the workspace root" in request["reason"]
    assert request["outside"] == [str(Path("../ok.txt").resolve())]


def test_an_approver_that_denies_or_fails_denies(tmp_path: Path) -> None:
    async def deny(session_id: str, tool_call: dict[str, Any]) -> str:
        return "deny"

    async def broken(session_id: str, tool_call: dict[str, Any]) -> str:
        raise RuntimeError("client went away")

    for approver in (deny, broken):
        result, ends = run_one(tmp_path, "untyped", {}, approver=approver)
        assert content(result) == "Error: the client denied this tool call"
        assert ends[0]["reason"]["kind"] == "completed"


def test_policy_modes(tmp_path: Path) -> None:
    result, _ = run_one(tmp_path, "untyped", {}, policy={"mode": "deny-mutating"})
    assert result["error"]["code"] == "DENIED"
    assert "policy denies" in content(result)
    result, _ = run_one(tmp_path, "working_directory", {}, policy={"mode": "deny-mutating"})
    assert result["message"]["isError"] is False
    result, _ = run_one(tmp_path, "untyped", {}, policy={"mode": "allow-all"})
    assert content(result) == "changed"
    result, _ = run_one(tmp_path, "untyped", {}, policy={"mode": "ask"})
    assert result["error"]["code"] == "DENIED"
    result, _ = run_one(tmp_path, "untyped", {}, policy={"mode": "ask", "unattended": "allow"})
    assert content(result) == "changed"


def test_another_guardrails_ask_with_no_approver_is_denied(tmp_path: Path) -> None:
    guard = {"id": "guard", "name": "agentkit:FixtureGuardrail", "config": {"decision": "ask"}}
    result, _ = run_one(tmp_path, "working_directory", {}, extra=[guard])
    assert result["error"]["code"] == "DENIED"
    assert "needs approval (guardrail 'fixture': fixture says so)" in content(result)
    assert ("guardrail", "working_directory", False) in JOURNAL


def test_a_guardrails_deny_wins(tmp_path: Path) -> None:
    guard = {"id": "guard", "name": "agentkit:FixtureGuardrail", "config": {"decision": "deny"}}
    result, _ = run_one(tmp_path, "working_directory", {}, policy={"mode": "allow-all"},
                        extra=[guard])
    assert content(result) == "Error: denied by guardrail 'fixture': fixture says so"
