"""What users meet when a model route fails, through the real runtime and the DeepSeek
stand-in: each failure ends its turn with one clear error (the API's own message where it
gave one), retries only what the API documents as retryable, and leaves the session whole
and usable for the next prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deepseek_standin import DeepSeekStandIn
from standin_http import tokens

from dsh.core.errors import JsonRpcError
from dsh.sdk import ClientConfig, DshClient, RunResult

KEY = "sk-standin-77aa88bb99cc00dd"
OK = {"reasoning": "Simple.", "content": "All good."}


@pytest.fixture
def standin() -> Iterator[DeepSeekStandIn]:
    with DeepSeekStandIn(api_key=KEY) as server:
        yield server


def client(home: Path, env: dict[str, str | None], **config: Any) -> DshClient:
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith("DEEPSEEK_")}
    environ.update({k: v for k, v in env.items() if v is not None})
    return DshClient(ClientConfig(dsh_home=home, cwd=Path.cwd(), env=environ,
                                  inherit_env=False, initialize_timeout=60,
                                  request_timeout=60, **config))


def good(server: DeepSeekStandIn) -> dict[str, str | None]:
    return {"DEEPSEEK_BASE_URL": server.base_url, "DEEPSEEK_API_KEY": KEY}


def error_of(result: RunResult) -> dict[str, str]:
    [end] = [e for e in result.events if e.type == "turn/end"]
    assert end.data["reason"]["kind"] == "error", end.data
    return end.data["reason"]["error"]


def posts(server: DeepSeekStandIn) -> int:
    return sum(1 for r in server.requests if r.method == "POST")


def test_http_failures_as_the_api_documents_them(dsh_home: Path,
                                                 standin: DeepSeekStandIn) -> None:
    standin.script(
        {"status": 402, "message": "Insufficient Balance"},
        {"status": 422, "message": "Invalid max_tokens value, the valid range of "
                                   "max_tokens is [1, 393216]"},
        {"status": 429, "message": "Rate Limit Reached", "retry_after": "0"},
        {"status": 503, "message": "Server Overloaded", "retry_after": "0"},
        OK,
    )
    with client(dsh_home, good(standin)) as sdk:
        session = sdk.new_session()
        balance = error_of(session.run("one"))
        assert balance["code"] == "insufficient-balance"
        assert "Insufficient Balance" in balance["message"] and posts(standin) == 1
        invalid = error_of(session.run("two"))
        assert invalid["code"] == "http-422" and posts(standin) == 2
        assert "Invalid max_tokens value, the valid range of max_tokens is [1, 393216]" \
            in invalid["message"]  # the API's message, verbatim
        retried = session.run("three")  # 429 then 503, both retried after Retry-After
        assert (retried.stop_reason, retried.final_text) == ("completed", "All good.")
        assert posts(standin) == 5
    assert standin.left == 0


def test_a_wrong_key_is_one_line_and_never_retried(dsh_home: Path,
                                                   standin: DeepSeekStandIn) -> None:
    with client(dsh_home, {**good(standin), "DEEPSEEK_API_KEY": "sk-wrong-key-123456"}) as sdk:
        error = error_of(sdk.new_session().run("hello"))
    assert error["code"] == "auth" and posts(standin) == 1
    assert "\n" not in error["message"] and "DEEPSEEK_API_KEY" in error["message"]
    assert "sk-wrong-key-123456" not in error["message"]


def test_context_overflow_compacts_and_asks_again(dsh_home: Path,
                                                  standin: DeepSeekStandIn) -> None:
    long_answer = {"reasoning": "Long.", "content": "word " * 2000}
    standin.script(long_answer, {"content": "Summary: a long answer was given."}, OK)
    with client(dsh_home, good(standin)) as sdk:
        session = sdk.new_session()
        assert session.run("Say a lot.").stop_reason == "completed"
        first = next(r.body for r in standin.requests if r.method == "POST")
        # The next request (history + the long answer) no longer fits; a summary does.
        standin.context_limit = tokens(json.dumps([first["messages"], first.get("tools")],
                                                  sort_keys=True)) + 200
        result = session.run("Go on.")
    assert (result.stop_reason, result.final_text) == ("completed", "All good.")
    [compacted] = [e.data for e in result.events if e.type == "context/compacted"]
    assert compacted["reason"] == "overflow"
    assert [status for status, _ in standin.refused] == [400]


def test_overflow_that_compaction_cannot_fix_is_a_clear_error(
        dsh_home: Path, standin: DeepSeekStandIn) -> None:
    standin.context_limit = 10
    with client(dsh_home, good(standin)) as sdk:
        session = sdk.new_session()
        error = error_of(session.run("Anything at all."))
        assert error["code"] == "context-overflow"
        assert "maximum context length is 10 tokens" in error["message"]
        assert "start a new session" in error["message"]
        standin.context_limit = 1_000_000
        standin.script(OK)
        assert session.run("Again.").stop_reason == "completed"


def test_bad_answers_end_the_turn_and_the_session_goes_on(dsh_home: Path,
                                                          standin: DeepSeekStandIn) -> None:
    standin.script(
        {"malformed": True},
        {"reasoning": "I will call it.", "tool_calls": [
            {"name": "working_directory", "arguments": "{not json"}]},
        {"reasoning": "The arguments were wrong; answer anyway.", "content": "Recovered."},
        {"reasoning": "Only thinking, no answer."},
        OK,
    )
    with client(dsh_home, good(standin)) as sdk:
        session = sdk.new_session()
        malformed = error_of(session.run("one"))
        assert malformed["code"] == "bad-response"
        assert "not valid JSON" in malformed["message"]
        bad_args = session.run("two")
        assert (bad_args.stop_reason, bad_args.final_text) == ("completed", "Recovered.")
        [result] = [e.data for e in bad_args.events if e.type == "tool/result"]
        assert result["error"]["code"] == "INVALID_ARGS" and result["message"]["isError"]
        thinking_only = session.run("three")
        assert error_of(thinking_only)["code"] == "empty-answer"
        assert thinking_only.final_text == ""
        after = session.run("four")
        assert (after.stop_reason, after.final_text) == ("completed", "All good.")
    assert standin.refused == [] and standin.left == 0


def test_malformed_stream_is_not_retried_forever(dsh_home: Path,
                                                 standin: DeepSeekStandIn) -> None:
    standin.script(*[{"malformed": True}] * 2, OK)
    with client(dsh_home, good(standin)) as sdk:
        result = sdk.new_session().run("hello")
    # A stream that is not valid JSON is the server's bug, not a hiccup: no retry.
    assert error_of(result)["code"] == "bad-response" and posts(standin) == 1


@pytest.mark.parametrize(("env", "code", "names"), [
    ({"DEEPSEEK_API_KEY": None}, "missing-key", "DEEPSEEK_API_KEY"),
    ({"DEEPSEEK_BASE_URL": "ftp://mirror.example/deepseek"}, "bad-base-url",
     "DEEPSEEK_BASE_URL"),
])
def test_configuration_faults_fail_before_any_request(
        dsh_home: Path, standin: DeepSeekStandIn, env: dict[str, str | None], code: str,
        names: str) -> None:
    with client(dsh_home, {**good(standin), **env}) as sdk:
        session = sdk.new_session()
        error = error_of(session.run("hello"))
        assert error["code"] == code and names in error["message"]
        assert "mirror.example" not in error["message"]
        listed = {s["sessionId"]: s["status"] for s in sdk.sessions()}
        assert listed[session.id] == "idle"  # intact: a later prompt may run
    assert posts(standin) == 0


def test_unknown_route_is_refused_at_initialize(dsh_home: Path,
                                                standin: DeepSeekStandIn) -> None:
    with pytest.raises(JsonRpcError) as info, client(dsh_home, good(standin), provider="nope"):
        pass
    assert info.value.code == -32602
    assert "unknown provider route 'nope'" in info.value.message
    assert "deepseek-official" in info.value.message and "anthropic" in info.value.message


def test_an_effort_the_route_cannot_send_is_refused_at_initialize(
        dsh_home: Path, standin: DeepSeekStandIn) -> None:
    with pytest.raises(JsonRpcError) as info, client(dsh_home, good(standin),
                                                     provider="openrouter",
                                                     reasoning_effort="max"):
        pass
    assert info.value.code == -32602
    assert "route 'openrouter'" in info.value.message and "'max'" in info.value.message
    with pytest.raises(JsonRpcError) as info, client(dsh_home, good(standin),
                                                     provider="openai",
                                                     reasoning_effort="ultra"):
        pass
    assert "route 'openai'" in info.value.message and "'ultra'" in info.value.message
