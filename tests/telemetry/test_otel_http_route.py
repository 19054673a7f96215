"""A model request over HTTP, as its ``chat`` span tells it: status, retries, cached and
reasoning tokens, cost, the server, and a request that fails.

The DeepSeek route (``deepseek-official``, as dsh-base ships it) talks to the DeepSeek
stand-in (tests/fixtures/deepseek_standin.py, a real HTTP server that reports usage as
DeepSeek does: cache hits, reasoning tokens); a headless run exports to the OTLP receiver.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deepseek_standin import DeepSeekStandIn
from otlp_receiver import Receiver

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
KEY = "sk-standin-1f2e3d4c5b6a7980"
LOOK = {"reasoning": "The working_directory tool says where we are.", "content": "Let me check.",
        "tool_calls": [{"name": "working_directory", "arguments": {}}]}
ANSWER = {"reasoning": "That is enough to answer.", "content": "Here."}
FAST_RETRIES = """\
- {id: llm, merge: {config: {max_retries: 1, backoff_base_s: 0.01, backoff_max_s: 0.01}}}
"""


@pytest.fixture
def standin() -> Iterator[DeepSeekStandIn]:
    with DeepSeekStandIn(api_key=KEY) as server:
        yield server


def run(run_dsh: RunDsh, standin: DeepSeekStandIn, receiver: Receiver,
        patch: Path) -> subprocess.CompletedProcess[str]:
    return run_dsh("--profile", "headless", "--patch", str(patch), "Where am I?",
                   env={"DEEPSEEK_BASE_URL": standin.base_url, "DEEPSEEK_API_KEY": KEY,
                        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})


def chats(receiver: Receiver) -> list[Any]:
    return sorted((s for s in receiver.spans() if s.name.startswith("chat ")),
                  key=lambda s: s.start_ns)


def test_a_request_retried_after_a_429_and_its_usage(run_dsh: RunDsh, standin: DeepSeekStandIn,
                                                     tmp_path: Path) -> None:
    (tmp_path / "patch.yml").write_text(FAST_RETRIES)
    standin.script({"status": 429, "retry_after": "0", "message": "slow down"}, LOOK, ANSWER)
    with Receiver() as receiver:
        proc = run(run_dsh, standin, receiver, tmp_path / "patch.yml")
        receiver.wait(lambda r: len(chats(r)) == 2 and bool(r.metrics))
        first, second = chats(receiver)
        metrics = receiver.metric_points()
    assert proc.returncode == 0, proc.stderr[-2000:]
    port = int(standin.base_url.rsplit(":", 1)[1].split("/")[0])
    for chat, retries, finish in ((first, 1, "tool_calls"), (second, 0, "stop")):
        attributes = chat.attributes
        assert chat.name == "chat deepseek-flash" and chat.kind == "CLIENT"
        assert {k: attributes[k] for k in (
            "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
            "dsh.route", "http.response.status_code", "dsh.retries", "server.address",
            "server.port", "gen_ai.response.finish_reasons")} == {
            "gen_ai.provider.name": "deepseek", "gen_ai.request.model": "deepseek-flash",
            "gen_ai.response.model": "deepseek-flash", "dsh.route": "deepseek-official",
            "http.response.status_code": 200, "dsh.retries": retries,
            "server.address": "127.0.0.1", "server.port": port,
            "gen_ai.response.finish_reasons": [finish]}
        assert attributes["gen_ai.usage.reasoning.output_tokens"] > 0
        assert attributes["gen_ai.usage.output_tokens"] >= \
            attributes["gen_ai.usage.reasoning.output_tokens"]
        assert attributes["dsh.cost.usd"] > 0
        assert "dsh.usage.estimated" not in attributes
    # The second request repeats the first one's prompt: DeepSeek's cache serves part of it.
    assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 0
    assert 0 < second.attributes["gen_ai.usage.cache_read.input_tokens"] < \
        second.attributes["gen_ai.usage.input_tokens"]
    cost = metrics["dsh.cost"]
    assert sum(p.as_double for _, p in cost) == pytest.approx(
        first.attributes["dsh.cost.usd"] + second.attributes["dsh.cost.usd"])
    assert {a["gen_ai.provider.name"] for a, _ in cost} == {"deepseek"}


def test_a_request_that_fails_ends_its_span_and_the_turn_with_its_error(
        run_dsh: RunDsh, standin: DeepSeekStandIn, tmp_path: Path) -> None:
    (tmp_path / "patch.yml").write_text(FAST_RETRIES)
    standin.script({"status": 500, "message": "boom"}, {"status": 500, "message": "boom"})
    with Receiver() as receiver:
        proc = run(run_dsh, standin, receiver, tmp_path / "patch.yml")
        receiver.wait(lambda r: any(s.name == "invoke_agent dsh" for s in r.spans())
                      and bool(r.metrics))
        [chat] = chats(receiver)
        [turn] = [s for s in receiver.spans() if s.name == "invoke_agent dsh"]
        errors = receiver.metric_points()["dsh.errors"]
    assert proc.returncode != 0
    assert (chat.status, chat.parent_id) == ("ERROR", turn.span_id)
    assert "HTTP 500" in chat.status_message
    assert {k: chat.attributes[k] for k in ("error.type", "http.response.status_code",
                                            "dsh.retries")} == {
        "error.type": "http-500", "http.response.status_code": 500, "dsh.retries": 1}
    assert "gen_ai.usage.input_tokens" not in chat.attributes
    assert (turn.status, turn.attributes["error.type"],
            turn.attributes["dsh.turn.outcome"]) == ("ERROR", "http-500", "error")
    assert sorted((a["dsh.error.source"], a["error.type"], p.as_int) for a, p in errors) == [
        ("model", "http-500", 1), ("turn", "http-500", 1)]
