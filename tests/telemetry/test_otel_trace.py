"""A real runtime exports one trace to a real OTLP/HTTP receiver, checked field by field.

An embedding program (the SDK client) holds a trace of its own and hands its context to
the runtime, once for the client (``ClientConfig.trace_context``: the runtime's
``TRACEPARENT``) and once for its second prompt (``run(..., trace_context=...)``: the
prompt's ``_meta``). The scripted session has two turns: the first runs a command
(``bash``), reads a file that is not there (a tool error) and moves out of the workspace
(an approval, which the client grants); the second comes back and delegates to a
sub-agent, a second runtime whose spans join the trace under the ``subagent`` call. The
receiver (tests/fixtures/otlp_receiver.py) decodes what arrives with OpenTelemetry's own
protobuf classes.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from otlp_receiver import Receiver, Span

from dsh.runtime.tools.sandbox import Policy, in_force
from dsh.sdk import ApprovalRequest, AsyncDshClient, ClientConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

GUARD = 60.0
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"  # the program's span around the whole client
SECOND_SPAN = "53995c3f42cd8ad8"  # the program's span around its second prompt

PARENT_SCRIPT = """\
- text: "running"
  tool_calls:
    - {name: bash, arguments: {command: "echo headers=${OTEL_EXPORTER_OTLP_HEADERS:-absent}"}}
  usage: {inputTokens: 100, outputTokens: 10}
- tool_calls: [{name: read_file, arguments: {path: missing.txt}}]
  usage: {inputTokens: 120, outputTokens: 8}
- tool_calls: [{name: working_directory, arguments: {cd: ".."}}]
  usage: {inputTokens: 140, outputTokens: 6}
- text: "first turn done"
  usage: {inputTokens: 160, outputTokens: 4}
- tool_calls: [{name: working_directory, arguments: {cd: "%(root)s"}}]
  usage: {inputTokens: 200, outputTokens: 6}
- tool_calls: [{name: subagent, arguments: {description: "ask the child", prompt: "answer"}}]
  usage: {inputTokens: 220, outputTokens: 12}
- text: "second turn done"
  usage: {inputTokens: 240, outputTokens: 5}
"""
CHILD_SCRIPT = """\
- text: "child answer 42"
  usage: {inputTokens: 30, outputTokens: 3}
"""
CHILD_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
"""
PARENT_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
- {id: "tools:subagent", config: {patches: [%s]}}
"""


def scenario(tmp_path: Path, home: Path, env: dict[str, str]) -> tuple[list[Any], list[Any]]:
    """Run the two prompts; the results and the approvals asked."""
    root = tmp_path / "workspace"
    root.mkdir()
    (tmp_path / "parent.yml").write_text(PARENT_SCRIPT % {"root": root})
    (tmp_path / "child.yml").write_text(CHILD_SCRIPT)
    (tmp_path / "child-patch.yml").write_text(CHILD_PATCH)
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(PARENT_PATCH % (tmp_path / "child-patch.yml"))
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return "allow"

    # Telemetry needs the python carrier (the frozen one says so and stays off), so the
    # runtime is that one even where a runtime wheel is installed.
    config = ClientConfig(profile="sdk", dsh_home=home, cwd=root, patches=[patch], env=env,
                          trace_context={"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01",
                                         "tracestate": "vendor=client"},
                          carrier="python", initialize_timeout=GUARD, request_timeout=GUARD)

    async def go() -> list[Any]:
        async with AsyncDshClient(config, on_approval=approve) as client:
            session = await client.new_session()
            first = await asyncio.wait_for(session.run("prompt-one-canary"), GUARD)
            second = await asyncio.wait_for(session.run("prompt-two-canary", trace_context={
                "traceparent": f"00-{TRACE}-{SECOND_SPAN}-01"}), GUARD)
            return [first, second]

    return asyncio.run(go()), asked


def by_name(spans: list[Span], name: str) -> list[Span]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_ns)


def test_a_two_turn_session_is_one_trace_with_the_conventions_attributes(
        tmp_path: Path, dsh_home: Path) -> None:
    with Receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
               "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t0ken,x-team=agents",
               "OTEL_SERVICE_NAME": "agents-ci"}
        results, asked = scenario(tmp_path, dsh_home, env)
        # The parent flushes as its client closes it; the child when the parent closed it.
        receiver.wait(lambda r: len([s for s in r.spans() if s.name == "invoke_agent dsh"]) >= 3
                      and any(m for m in r.metric_points()) and len(r.metrics) >= 2)
        spans = receiver.spans()
        metrics = receiver.metric_points()
        units = receiver.units()
        headers = receiver.headers

    first, second = results
    assert (first.stop_reason, first.final_text) == ("completed", "first turn done")
    assert (second.stop_reason, second.final_text) == ("completed", "second turn done")
    assert [a.tool_call["name"] for a in asked] == ["working_directory"]
    outputs = [e.data["message"]["content"][0]["text"] for e in first.events
               if e.type == "tool/result"]
    # The exporter's headers are a secret: the command never saw them.
    assert outputs[0].startswith("headers=absent")

    # Every export carried the headers, the parent's and the child's alike.
    assert headers and all(h["authorization"] == "Bearer t0ken" and h["x-team"] == "agents"
                           for h in headers)

    # One trace, the program's: every span of both runtimes is in it.
    assert {s.trace_id for s in spans} == {TRACE}
    assert len({s.span_id for s in spans}) == len(spans)
    assert {s.scope for s in spans} == {"dsh"}
    assert all(s.resource["service.name"] == "agents-ci" for s in spans)
    assert all(s.end_ns >= s.start_ns > 0 for s in spans)
    ids = {s.span_id: s for s in spans}

    turns = by_name(spans, "invoke_agent dsh")
    parent_session = first.session_id
    turn1, turn2 = (t for t in turns if t.attributes["gen_ai.conversation.id"] == parent_session)
    [child_turn] = [t for t in turns if t.attributes["gen_ai.conversation.id"] != parent_session]
    assert turn1.parent_id == CLIENT_SPAN  # the client's context (TRACEPARENT)
    assert turn2.parent_id == SECOND_SPAN  # the prompt's own context (_meta)
    for number, turn in ((1, turn1), (2, turn2)):
        assert (turn.kind, turn.status) == ("INTERNAL", "UNSET")
        assert turn.attributes == {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "dsh",
            "gen_ai.conversation.id": parent_session, "dsh.profile": "sdk",
            "dsh.turn": number, "dsh.turn.outcome": "completed"}

    chats = [s for s in by_name(spans, "chat scripted") if s.parent_id in (turn1.span_id,
                                                                           turn2.span_id)]
    usage = [(100, 10), (120, 8), (140, 6), (160, 4), (200, 6), (220, 12), (240, 5)]
    finish = ["tool_calls"] * 3 + ["stop"] + ["tool_calls"] * 2 + ["stop"]
    assert len(chats) == 7
    for chat, (inputs, outputs_), reason, turn in zip(chats, usage, finish,
                                                      [turn1] * 4 + [turn2] * 3, strict=True):
        assert (chat.kind, chat.status, chat.parent_id) == ("CLIENT", "UNSET", turn.span_id)
        ttfc = chat.attributes.pop("gen_ai.response.time_to_first_chunk")
        assert 0 < ttfc <= (chat.end_ns - chat.start_ns) / 1e9
        assert turn.start_ns <= chat.start_ns <= chat.end_ns <= turn.end_ns
        assert chat.attributes == {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted", "gen_ai.response.model": "scripted",
            "gen_ai.request.stream": True, "gen_ai.conversation.id": parent_session,
            "gen_ai.response.finish_reasons": [reason],
            "gen_ai.usage.input_tokens": inputs, "gen_ai.usage.output_tokens": outputs_,
            "dsh.route": "scripted", "dsh.retries": 0}

    tools = {s.name: s for s in spans if s.name.startswith("execute_tool ")
             and s.parent_id in (turn1.span_id, turn2.span_id)}
    assert sorted(tools) == ["execute_tool bash", "execute_tool read_file",
                             "execute_tool subagent", "execute_tool working_directory"]
    moves = by_name(spans, "execute_tool working_directory")
    assert [m.parent_id for m in moves] == [turn1.span_id, turn2.span_id]

    def tool(span: Span, name: str, step: int, **more: Any) -> None:
        assert span.kind == "INTERNAL"
        attributes = dict(span.attributes)
        assert attributes.pop("gen_ai.tool.call.id").startswith("call_")
        assert attributes == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                              "gen_ai.tool.type": "function",
                              "gen_ai.conversation.id": parent_session, "dsh.step": step,
                              **more}

    rung = in_force(Policy.from_config({"mode": "workspace-write", "network": False}))
    tool(tools["execute_tool bash"], "bash", 1, **{"dsh.tool.outcome": "ok",
                                                   "dsh.sandbox.rung": rung})
    assert tools["execute_tool bash"].status == "UNSET"
    tool(tools["execute_tool read_file"], "read_file", 2,
         **{"dsh.tool.outcome": "tool_error", "error.type": "tool_error"})
    assert (tools["execute_tool read_file"].status,
            tools["execute_tool read_file"].status_message) == ("ERROR", "tool_error")
    tool(moves[0], "working_directory", 3, **{"dsh.tool.outcome": "ok"})
    tool(moves[1], "working_directory", 1, **{"dsh.tool.outcome": "ok"})
    delegated = tools["execute_tool subagent"]
    tool(delegated, "subagent", 2, **{"dsh.tool.outcome": "ok",
                                      "dsh.subagent.id": "agent-1",
                                      "dsh.subagent.session_id": child_turn.attributes[
                                          "gen_ai.conversation.id"]})

    # The approval wait: its own span, inside the call it held.
    [approval] = by_name(spans, "approval working_directory")
    assert (approval.kind, approval.parent_id) == ("INTERNAL", moves[0].span_id)
    assert approval.attributes == {"gen_ai.tool.name": "working_directory",
                                   "dsh.approval.decision": "allow"}
    assert moves[0].start_ns <= approval.start_ns <= approval.end_ns <= moves[0].end_ns

    # The sub-agent's runtime: its turn is a child of the subagent call, its model call
    # a child of its turn.
    assert child_turn.parent_id == delegated.span_id
    assert child_turn.attributes["dsh.profile"] == "sdk-minimal"
    assert child_turn.attributes["dsh.turn.outcome"] == "completed"
    [child_chat] = [s for s in spans if s.parent_id == child_turn.span_id]
    assert child_chat.name == "chat scripted"
    assert (child_chat.attributes["gen_ai.usage.input_tokens"],
            child_chat.attributes["gen_ai.usage.output_tokens"]) == (30, 3)

    # Nothing of the prompts, answers or tool results left the runtimes (capture_content
    # is off by default).
    canaries = ("prompt-one-canary", "prompt-two-canary", "child-prompt-canary",
                "turn done", "child answer", "missing.txt", "headers=")
    for span in spans:
        for value in (*span.attributes.values(), span.status_message, span.name):
            assert not any(c in str(value) for c in canaries), (span.name, value)

    # Every gen_ai.* name is one the installed conventions package defines.
    defined = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_")}
    used = {k for s in spans for k in s.attributes if k.startswith("gen_ai.")}
    assert used <= defined, used - defined
    assert all(k.split(".")[0] in ("gen_ai", "dsh", "error") for s in spans
               for k in s.attributes)

    # Ids hang together: every parent is a span of the trace or one of the program's.
    assert {s.parent_id for s in spans} <= set(ids) | {CLIENT_SPAN, SECOND_SPAN}

    # The metrics: tokens by type, durations, and the tool error counted by kind.
    def points(name: str, **where: Any) -> list[Any]:
        return [p for a, p in metrics.get(name, []) if all(a.get(k) == v
                                                          for k, v in where.items())]

    tokens_in = points("gen_ai.client.token.usage", **{"gen_ai.token.type": "input",
                                                        "gen_ai.provider.name": "scripted",
                                                        "gen_ai.request.model": "scripted",
                                                        "gen_ai.operation.name": "chat"})
    assert sum(p.sum for p in tokens_in) == sum(i for i, _ in usage) + 30
    assert sum(p.count for p in tokens_in) == 8
    tokens_out = points("gen_ai.client.token.usage", **{"gen_ai.token.type": "output"})
    assert sum(p.sum for p in tokens_out) == sum(o for _, o in usage) + 3
    assert sum(p.count for p in points("gen_ai.client.operation.duration")) == 8
    assert sum(p.count for p in points("gen_ai.client.operation.time_to_first_chunk")) == 8
    assert sum(p.count for p in points("dsh.turn.duration",
                                       **{"dsh.turn.outcome": "completed"})) == 3
    assert sum(p.count for p in points("dsh.tool.duration", **{
        "gen_ai.tool.name": "read_file", "dsh.tool.outcome": "tool_error"})) == 1
    assert sum(p.count for p in points("dsh.tool.duration")) == 5
    assert sum(p.count for p in points("dsh.approval.duration", **{
        "dsh.approval.decision": "allow"})) == 1
    [error] = points("dsh.errors")
    assert error.as_int == 1
    assert [a for a, _ in metrics["dsh.errors"]] == [{"error.type": "tool_error",
                                                      "dsh.error.source": "tool"}]
    assert {name: units[name] for name in (
        "gen_ai.client.token.usage", "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk", "dsh.turn.duration",
        "dsh.tool.duration", "dsh.approval.duration", "dsh.errors")} == {
        "gen_ai.client.token.usage": "{token}", "gen_ai.client.operation.duration": "s",
        "gen_ai.client.operation.time_to_first_chunk": "s", "dsh.turn.duration": "s",
        "dsh.tool.duration": "s", "dsh.approval.duration": "s", "dsh.errors": "{error}"}
