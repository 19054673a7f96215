"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1.

Every case boots the real kernel with one ``llm-openai-compatible`` row pointed at a
:class:`FakeOpenAIServer` and asserts both what the agent-facing stream yields and what
the server received. Timing is never asserted beyond the provider's own log of the delay
it chose.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from fake_openai_server import (
    FakeOpenAIServer,
    Reply,
    chunk,
    error_reply,
    event,
    text_stream,
)

from dsh.core.launch import EnvSnapshot
from dsh.runtime.kernel.kernel import Kernel
from dsh.runtime.providers.base import (
    Chunk,
    Exchange,
    Finish,
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from dsh.runtime.providers.http_route import _proxy_for, backoff_delay, retry_after_seconds
from dsh.runtime.providers.openai_compat import OpenAICompatibleProvider

KEY = "sk-canary-7f3a9c1e5b2d4f60"
"""A canary key: no exception text, log record or repr may ever contain it."""

HELLO = ModelRequest(session_id="s1", model="deepseek-chat",
                     messages=({"role": "user", "content": [{"type": "text", "text": "hi"}]},))


@pytest.fixture
def server() -> AsyncIterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@contextlib.asynccontextmanager
async def booted(server: FakeOpenAIServer | None, *, env: dict[str, str] | None = None,
                 **config: Any) -> AsyncIterator[Any]:
    """The ``llm:<route>`` service of a freshly started kernel, disposed on exit."""
    config = {"backoff_base_s": 0.01, "backoff_max_s": 0.05, **config}
    if server is not None:
        config.setdefault("base_url", server.base_url)
    values = {"DEEPSEEK_API_KEY": KEY} if env is None else env
    kernel = Kernel([{"id": "llm", "name": "llm-openai-compatible", "config": config}],
                    profile="test", home=os.environ["DSH_HOME"], cwd=os.getcwd(),
                    env=EnvSnapshot(values, dict.fromkeys(values, "environment")))
    kernel.load()
    await kernel.start()
    try:
        yield kernel.context.service(f"llm:{config.get('route', 'deepseek-official')}")
    finally:
        await kernel.dispose()


async def collect(provider: Any, request: ModelRequest = HELLO) -> list[Chunk]:
    """The answer's chunks. Each HTTP exchange the route made yields an :class:`Exchange`
    before any content (one per attempt that got a 200 before a retry); they are checked
    here and left out (the retry tests read them with :func:`exchange`)."""
    chunks = [c async for c in provider.stream(request)]
    exchanges = [i for i, c in enumerate(chunks) if isinstance(c, Exchange)]
    assert exchanges and exchanges == list(range(len(exchanges))), chunks[:3]
    return chunks[len(exchanges):]


def exchange(server: FakeOpenAIServer, **kwargs: Any) -> Exchange:
    """The :class:`Exchange` a successful request yields first."""

    async def go() -> Exchange:
        async with booted(server, **kwargs) as provider:
            return [c async for c in provider.stream(HELLO) if isinstance(c, Exchange)][-1]

    return asyncio.run(go())


def stream(server: FakeOpenAIServer | None, request: ModelRequest = HELLO,
           **kwargs: Any) -> list[Chunk]:
    """Boot, stream ``request`` to the end, dispose; the chunks."""

    async def go() -> list[Chunk]:
        async with booted(server, **kwargs) as provider:
            return await collect(provider, request)

    return asyncio.run(go())


def failure(server: FakeOpenAIServer | None, request: ModelRequest = HELLO,
            **kwargs: Any) -> tuple[ModelError, list[Chunk]]:
    """Like :func:`stream` for a stream that must fail: the error and what came before."""
    seen: list[Chunk] = []

    async def go() -> None:
        async with booted(server, **kwargs) as provider:
            async for c in provider.stream(request):
                if not isinstance(c, Exchange):
                    seen.append(c)

    with pytest.raises(ModelError) as info:
        asyncio.run(go())
    return info.value, seen


# -- streaming -----------------------------------------------------------------------------


def test_streams_text_then_usage_then_finish(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("Hel", "lo", prompt_tokens=11, completion_tokens=2)))
    assert stream(server) == [TextDelta("Hel"), TextDelta("lo"), Usage(11, 2), Finish("stop")]
    [received] = server.requests
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["accept"] == "text/event-stream"
    assert received.body["stream"] is True
    assert received.body["stream_options"] == {"include_usage": True}
    assert received.body["model"] == "deepseek-chat"


def test_consecutive_calls_share_one_connection(server: FakeOpenAIServer) -> None:
    """The body is read to its end after [DONE], so the connection is reused."""
    server.script(Reply(pieces=text_stream("one")), Reply(pieces=text_stream("two")))

    async def go() -> None:
        async with booted(server) as provider:
            assert (await collect(provider))[0] == TextDelta("one")
            assert (await collect(provider))[0] == TextDelta("two")

    asyncio.run(go())
    assert server.requests[0].client_port == server.requests[1].client_port


def test_events_split_across_network_chunks_with_comments(server: FakeOpenAIServer) -> None:
    body = b"".join(piece for piece in text_stream("a", "b") if isinstance(piece, bytes))
    body = b": keep-alive\r\n\r\n" + body.replace(b"\n", b"\r\n")
    server.script(Reply(pieces=[body[i:i + 7] for i in range(0, len(body), 7)]))
    assert stream(server) == [TextDelta("a"), TextDelta("b"), Usage(7, 3), Finish("stop")]


def test_finish_length(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("cut", finish="length")))
    assert stream(server)[-1] == Finish("length")


def _call(index: int, *, call_id: str | None = None, name: str | None = None,
          arguments: str = "") -> bytes:
    function: dict[str, Any] = {"arguments": arguments}
    entry: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        entry |= {"id": call_id, "type": "function"}
        function["name"] = name
    return chunk({"tool_calls": [entry]})


def reassemble(chunks: list[Chunk]) -> dict[int, tuple[str, str, Any]]:
    """What an agent builds from ToolCallDelta: id and name once, arguments joined."""
    calls: dict[int, dict[str, Any]] = {}
    for c in chunks:
        if isinstance(c, ToolCallDelta):
            call = calls.setdefault(c.index, {"id": None, "name": None, "arguments": ""})
            for part in ("id", "name"):
                value = getattr(c, part)
                if value is not None:
                    assert call[part] is None, f"{part} of call {c.index} arrived twice"
                    call[part] = value
            call["arguments"] += c.arguments
    return {i: (c["id"], c["name"], json.loads(c["arguments"])) for i, c in calls.items()}


def test_parallel_tool_call_deltas_split_across_chunks(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=[
        chunk({"role": "assistant", "content": None}),
        _call(0, call_id="call_a", name="read_file"),
        _call(0, arguments='{"pa'),
        _call(1, call_id="call_b", name="grep"),
        _call(0, arguments='th": "a.'),
        0.02,
        _call(1, arguments='{"pattern"'),
        _call(0, arguments='txt"}'),
        _call(1, arguments=': "x"}'),
        chunk({}, finish="tool_calls"),
        chunk(usage={"prompt_tokens": 5, "completion_tokens": 9}),
        event("[DONE]"),
    ]))
    chunks = stream(server)
    assert chunks == [
        ToolCallDelta(0, id="call_a", name="read_file"),
        ToolCallDelta(0, arguments='{"pa'),
        ToolCallDelta(1, id="call_b", name="grep"),
        ToolCallDelta(0, arguments='th": "a.'),
        ToolCallDelta(1, arguments='{"pattern"'),
        ToolCallDelta(0, arguments='txt"}'),
        ToolCallDelta(1, arguments=': "x"}'),
        Usage(5, 9),
        Finish("tool-calls"),
    ]
    assert reassemble(chunks) == {0: ("call_a", "read_file", {"path": "a.txt"}),
                                  1: ("call_b", "grep", {"pattern": "x"})}


def test_ids_and_names_a_server_repeats_are_passed_once(server: FakeOpenAIServer) -> None:
    """Some servers (vLLM, llama.cpp) repeat id and name on every fragment, and a few say
    "stop" after calling tools; the agent still sees the contract."""
    server.script(Reply(pieces=[
        _call(0, call_id="c", name="ls", arguments='{"p'),
        _call(0, call_id="c", name="ls", arguments='": 1}'),
        chunk({}, finish="stop"),
        event("[DONE]"),
    ]))
    chunks = stream(server)
    assert [c for c in chunks if not isinstance(c, Usage)] == [
        ToolCallDelta(0, id="c", name="ls", arguments='{"p'),
        ToolCallDelta(0, arguments='": 1}'), Finish("tool-calls")]
    [usage] = [c for c in chunks if isinstance(c, Usage)]
    assert usage.estimated and chunks[-2] == usage  # the server sent none: estimated


def test_request_body_translates_messages_and_tools(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("ok")))
    request = ModelRequest(
        session_id="s1", model="deepseek-reasoner", max_tokens=64, reasoning_effort="high",
        messages=(
            {"role": "system", "content": [{"type": "text", "text": "be brief"},
                                           {"type": "text", "text": "be kind"}]},
            {"role": "user", "content": [{"type": "text", "text": "read a.txt"}], "id": "m1"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "reading"},
                {"type": "tool-call", "id": "call_1", "name": "read_file",
                 "arguments": '{"path": "a.txt"}'}]},
            {"role": "tool", "toolCallId": "call_1", "isError": False,
             "content": [{"type": "text", "text": "hello"}]},
            {"role": "assistant", "content": [
                {"type": "tool-call", "id": "call_2", "name": "ls", "arguments": "{}"}]},
        ),
        tools=(ToolSpec("read_file", "Read a file.", MappingProxyType(
            {"type": "object", "properties": {"path": {"type": "string"}},
             "required": ("path",)})),),
    )
    stream(server, request)
    body = server.requests[0].body
    assert body["model"] == "deepseek-reasoner"
    assert body["max_tokens"] == 64
    assert body["reasoning_effort"] == "high"
    assert body["thinking"] == {"type": "enabled"}
    assert body["messages"] == [
        {"role": "system", "content": "be brief\n\nbe kind"},
        {"role": "user", "content": "read a.txt"},
        {"role": "assistant", "content": "reading", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
        {"role": "assistant", "content": "", "tool_calls": [  # "", never null
            {"id": "call_2", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
    ]
    assert body["tools"] == [{"type": "function", "function": {
        "name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}}]


def test_optional_fields_are_omitted_and_extra_headers_sent(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("ok")))
    stream(server, extra_headers={"X-Title": "dsh-test"})
    [received] = server.requests
    assert not {"tools", "max_tokens", "reasoning_effort", "thinking"} & set(received.body)
    assert received.headers["x-title"] == "dsh-test"


def test_a_block_the_format_cannot_carry_is_refused_before_sending(
        server: FakeOpenAIServer) -> None:
    request = ModelRequest("s", "m", ({"role": "user", "content": [
        {"type": "tool-call", "id": "x", "name": "y", "arguments": "{}"}]},))
    error, _ = failure(server, request)
    assert error.code == "bad-request"
    assert server.requests == []


# -- retries -------------------------------------------------------------------------------


def test_429_honours_retry_after_then_succeeds(server: FakeOpenAIServer,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dsh.providers.openai")
    server.script(error_reply(429, "rate limited", **{"Retry-After": "1"}),
                  Reply(pieces=text_stream("late")))
    assert stream(server, backoff_max_s=20)[0] == TextDelta("late")
    assert len(server.requests) == 2
    [record] = caplog.records
    assert "HTTP 429" in record.getMessage()
    assert "retry 1 of 4 in 1.00s" in record.getMessage()  # the header's delay, no jitter


def test_500_then_success(server: FakeOpenAIServer) -> None:
    server.script(error_reply(500, "boom"), error_reply(503, "busy"),
                  Reply(pieces=text_stream("ok")))
    assert stream(server)[0] == TextDelta("ok")
    assert len(server.requests) == 3


def test_the_exchange_says_the_status_and_the_retries_it_took(
        server: FakeOpenAIServer) -> None:
    server.script(error_reply(500, "boom"), error_reply(429, "slow down"),
                  Reply(pieces=text_stream("ok")))
    assert exchange(server) == Exchange(status=200, retries=2)


def test_retries_are_bounded(server: FakeOpenAIServer) -> None:
    server.script(*[error_reply(502, "bad gateway")] * 3)
    error, _ = failure(server, max_retries=2)
    assert (error.code, error.retryable) == ("http-502", True)
    assert (error.status, error.retries) == (502, 2)
    assert "bad gateway" in error.message
    assert len(server.requests) == 3


def test_connection_refused_is_retried_then_reported() -> None:
    with FakeOpenAIServer() as gone:
        url = gone.base_url
    error, _ = failure(None, base_url=url, max_retries=1)
    assert error.code == "connection"
    assert url + "/chat/completions" in error.message


def test_cut_before_any_delta_is_retried(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=[chunk({"role": "assistant", "content": ""})], cut=True),
                  Reply(pieces=text_stream("again")))
    assert stream(server)[0] == TextDelta("again")
    assert len(server.requests) == 2


@pytest.mark.parametrize("cut", [True, False], ids=["abrupt-close", "body-ends-early"])
def test_stream_cut_midway_is_interrupted_without_retry(server: FakeOpenAIServer,
                                                        cut: bool) -> None:
    server.script(Reply(pieces=[chunk({"content": "par"}), 0.02, chunk({"content": "tial"})],
                        cut=cut),
                  Reply(pieces=text_stream("must not be fetched")))
    error, seen = failure(server)
    assert seen == [TextDelta("par"), TextDelta("tial")]
    assert error.code == "stream-interrupted"
    assert len(server.requests) == 1


def test_finish_without_done_still_finishes(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=[chunk({"content": "x"}), chunk({}, finish="stop")], cut=True))
    chunks = stream(server)
    assert [c for c in chunks if not isinstance(c, Usage)] == [TextDelta("x"), Finish("stop")]


# -- bad responses -------------------------------------------------------------------------


def test_invalid_json_event_is_bad_response(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=[chunk({"content": "a"}), b"data: {not json\n\n"]))
    error, seen = failure(server)
    assert (error.code, seen) == ("bad-response", [TextDelta("a")])


def test_json_instead_of_a_stream_is_bad_response(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=[b'{"choices": []}'],
                        headers={"Content-Type": "application/json"}))
    assert failure(server)[0].code == "bad-response"


def test_error_event_before_any_output_is_retried(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=[event({"error": {"message": "overloaded"}})]),
                  Reply(pieces=text_stream("recovered")))
    assert stream(server)[0] == TextDelta("recovered")
    server.script(Reply(pieces=[event({"error": {"message": "overloaded"}})]))
    error, _ = failure(server, max_retries=0)
    assert error.code == "server-error"
    assert "overloaded" in error.message


def test_error_event_after_output_is_an_interrupted_stream(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=[chunk({"content": "par"}),
                                event({"error": {"message": "overloaded"}})]))
    error, seen = failure(server)
    assert (error.code, seen) == ("stream-interrupted", [TextDelta("par")])
    assert "overloaded" in error.message and len(server.requests) == 1


def test_other_4xx_carries_the_server_message_truncated(server: FakeOpenAIServer) -> None:
    server.script(error_reply(400, "model does not exist " + "x" * 5000))
    error, _ = failure(server)
    assert error.code == "http-400"
    assert "model does not exist" in error.message
    assert len(error.message) < 1200
    assert len(server.requests) == 1


# -- the key -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_names_the_variable_and_never_the_key(
        server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture, status: int) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore included
    server.script(error_reply(status, f"Incorrect API key provided: {KEY} "
                                      f"(sk-can****4f60); header was Bearer {KEY}"))
    captured: list[str] = []

    async def go() -> None:
        async with booted(server) as provider:
            captured.append(repr(provider))
            await collect(provider)

    with pytest.raises(ModelError) as info:
        asyncio.run(go())
    error = info.value
    assert error.code == "auth"
    assert "DEEPSEEK_API_KEY" in error.message
    assert "export DEEPSEEK_API_KEY=" in error.message
    assert f"{os.environ['DSH_HOME']}/.env" in error.message
    assert len(server.requests) == 1
    captured += [str(error), repr(error), *map(str, error.args),
                 *traceback.format_exception(error), caplog.text,
                 *(record.getMessage() for record in caplog.records)]
    leaks = [text for text in captured if KEY in text or "4f60" in text]
    assert not leaks


def test_missing_key_fails_before_any_request(server: FakeOpenAIServer) -> None:
    error, _ = failure(server, env={})
    assert error.code == "missing-key"
    assert "DEEPSEEK_API_KEY" in error.message
    assert f"{os.environ['DSH_HOME']}/.env" in error.message
    assert server.requests == []


def test_key_variable_name_is_configurable(server: FakeOpenAIServer) -> None:
    error, _ = failure(server, env={"DEEPSEEK_API_KEY": KEY}, api_key_env="OTHER_KEY")
    assert "export OTHER_KEY=" in error.message
    server.script(Reply(pieces=text_stream("ok")))
    stream(server, env={"OTHER_KEY": KEY}, api_key_env="OTHER_KEY")
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_malformed_key_is_refused_without_quoting_it(server: FakeOpenAIServer) -> None:
    error, _ = failure(server, env={"DEEPSEEK_API_KEY": KEY + " trailing"})
    assert error.code == "invalid-key"
    assert KEY not in str(error)
    assert server.requests == []


def test_keyless_route_sends_no_authorization(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("local")))
    stream(server, env={}, route="ollama", api_key_env=None)
    assert "authorization" not in server.requests[0].headers


# -- cancellation --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["aclose", "cancel"])
def test_stopping_early_closes_the_connection(server: FakeOpenAIServer, how: str) -> None:
    server.script(Reply(pieces=[chunk({"content": "first"})], hold=True))

    async def go() -> None:
        async with booted(server) as provider:
            first = asyncio.Event()

            async def consume() -> None:
                async with contextlib.aclosing(provider.stream(HELLO)) as chunks:
                    async for _ in chunks:
                        first.set()
                        if how == "aclose":
                            return

            task = asyncio.create_task(consume())
            await first.wait()
            if how == "cancel":
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            disconnected = await asyncio.to_thread(server.disconnected.wait, 5)
            assert disconnected, "the server never saw the client hang up"

    asyncio.run(go())


# -- plugin, config and pure helpers -------------------------------------------------------


def test_route_models_and_manifest(server: FakeOpenAIServer) -> None:
    async def go() -> None:
        async with booted(server, route="local", default_model="qwen", models=["qwen"],
                          context_window=32768) as provider:
            assert (provider.default_model, provider.context_window) == ("qwen", 32768)
            assert provider.accepts_model("qwen")
            assert not provider.accepts_model("deepseek-chat")
        async with booted(server) as provider:
            assert provider.accepts_model("anything")

    asyncio.run(go())
    env = OpenAICompatibleProvider.manifest.env
    assert env["DEEPSEEK_API_KEY"].secret and not env["DEEPSEEK_API_KEY"].required
    assert "DEEPSEEK_BASE_URL" in env


def test_base_url_comes_from_the_snapshot(server: FakeOpenAIServer) -> None:
    server.script(Reply(pieces=text_stream("ok")))
    stream(None, env={"DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.base_url + "/"})
    assert server.requests[0].path == "/v1/chat/completions"


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds("1") == 1.0
    assert retry_after_seconds(" 2.5 ") == 2.5
    assert retry_after_seconds("Tue, 14 Nov 2023 22:13:50 GMT", now=now) == 30.0
    assert retry_after_seconds("Tue, 14 Nov 2023 22:00:00 GMT", now=now) == 0.0
    for junk in (None, "", "soon", "nan", "inf"):
        assert retry_after_seconds(junk) is None


def test_backoff_delay_is_bounded_and_jittered() -> None:
    assert backoff_delay(0, base=0.5, cap=20, retry_after=3) == 3
    assert backoff_delay(0, base=0.5, cap=20, retry_after=3600) == 20
    assert backoff_delay(2, base=0.5, cap=20, retry_after=None, rand=lambda: 0.0) == 1.0
    assert backoff_delay(2, base=0.5, cap=20, retry_after=None, rand=lambda: 1.0) == 2.0
    assert backoff_delay(30, base=0.5, cap=20, retry_after=None, rand=lambda: 1.0) == 20


def test_proxy_comes_from_the_snapshot_and_no_proxy() -> None:
    url = "https://api.deepseek.com/chat/completions"
    assert _proxy_for(url, {}) is None
    assert _proxy_for(url, {"HTTPS_PROXY": "http://p:3128"}) == "http://p:3128"
    assert _proxy_for(url, {"all_proxy": "http://a:1"}) == "http://a:1"
    assert _proxy_for("http://h/x", {"HTTPS_PROXY": "http://p:3128"}) is None
    for no_proxy in ("*", "deepseek.com", ".deepseek.com", "x, api.deepseek.com:443"):
        assert _proxy_for(url, {"HTTPS_PROXY": "http://p", "NO_PROXY": no_proxy}) is None
    assert _proxy_for(url, {"HTTPS_PROXY": "http://p", "NO_PROXY": "seek.com"}) == "http://p"


# -- the real API --------------------------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("DEEPSEEK_API_KEY"),
                    reason="DEEPSEEK_API_KEY is not set; the real-API test needs a key")
def test_real_deepseek_tiny_completion(tmp_path: Path) -> None:
    env = {name: os.environ[name] for name in ("DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL")
           if os.environ.get(name)}
    request = ModelRequest("real", "deepseek-flash", max_tokens=8, reasoning_effort="none",
                           messages=({"role": "user", "content": [
                               {"type": "text", "text": "Reply with the word: pong"}]},))
    chunks = stream(None, request, env=env, timeout_s=60)
    assert any(isinstance(c, TextDelta) and c.text for c in chunks)
    assert isinstance(chunks[-1], Finish)
    assert any(isinstance(c, Usage) and c.input_tokens > 0 for c in chunks)
