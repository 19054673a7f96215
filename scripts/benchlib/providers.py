"""Provider overhead per streamed chunk, on each wire format, against the model stand-ins.

The stand-ins (``tests/fixtures/deepseek_standin.py``, ``anthropic_standin.py`` and
``responses_standin.py``) run as their own processes on 127.0.0.1, each scripted with long
answers (reasoning and text, about a thousand events each). One repetition streams the
same request twice, interleaved:

* **raw**: httpx reads the response body to its end, doing nothing with it (the
  transport's share, and the server's);
* **provider**: the route's own ``stream()`` (event-stream framing, the wire format's
  decoder, usage and pricing) yields every chunk to a consumer that drops them.

The row is ``(median provider - median raw) / events``: what dsh adds per streamed event,
which is what a user pays on every token the model streams. Target: under 50 µs.
``python -c pass`` is sampled between the repetitions (each row's yardstick).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib.procs import FIXTURES, PythonPass, installed_environ
from benchlib.registry import Metric, Options, Result, benchmark

KEY = "sk-bench-0123456789abcdef"
ANSWER_CHARS = 6000  # reasoning and text each; the stand-ins stream 12 characters an event


@contextmanager
def _standin(module: str, entries: list[dict[str, Any]]) -> Iterator[str]:
    """A stand-in process serving ``entries``; yields its base URL."""
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        script = Path(tmp) / "script.jsonl"
        script.write_text("".join(json.dumps(e) + "\n" for e in entries))
        proc = subprocess.Popen([sys.executable, str(FIXTURES / f"{module}.py"), "--api-key",
                                 KEY, "--script", str(script)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdin is not None
            yield json.loads(proc.stdout.readline())["base_url"]
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def _route(plugin: Any, config: dict[str, Any]) -> Any:
    from dsh.runtime.kernel.schema import validate

    values = validate(plugin.manifest.config_schema, {"api_key": KEY, "max_retries": 0,
                                                      **config}, row_id="bench")
    return plugin.route_for(values, env={}, home=tempfile.gettempdir(), row_id="bench")


async def _measure(route: Any, request: Any, reps: int, baseline: PythonPass,
                   ) -> tuple[list[float], list[float], int]:
    """Interleaved (raw, provider) timings of ``reps`` repetitions, and events per answer;
    ``python -c pass`` sampled once per repetition."""
    import httpx

    body = route.encode(request, route.catalog.wire_id(request.model))
    headers = route._headers()
    raw_times: list[float] = []
    provider_times: list[float] = []
    events = 0
    async with httpx.AsyncClient(timeout=60) as http:
        for _ in range(reps):
            baseline.sample()
            start = time.perf_counter()
            async with http.stream("POST", route.url, content=body, headers=headers) as reply:
                data = b"".join([piece async for piece in reply.aiter_bytes()])
            raw_times.append(time.perf_counter() - start)
            events = data.count(b"data: ")
            start = time.perf_counter()
            async for _chunk in route.stream(request):
                pass
            provider_times.append(time.perf_counter() - start)
    await route.aclose()
    return raw_times, provider_times, events


def _metric(name: str, fmt: str, module: str) -> Metric:
    return Metric(
        name, "µs", "<", 50,
        about=f"What dsh adds per streamed event on the {fmt} wire: the route's own "
              f"stream() over a stream from tests/fixtures/{module}.py (its own process, "
              "127.0.0.1, about a thousand events of reasoning and text), minus httpx "
              "reading the same body, divided by the events.",
        changes="The provider's per-chunk work (event-stream framing, the wire format's "
                "decoder, usage and pricing), the SSE decoder, CPU speed and load. Target "
                "50 µs a chunk.")


def _row(metric: Metric, plugin: Callable[[], Any], module: str, config: dict[str, Any],
         entry: dict[str, Any], opts: Options) -> Result:
    from dsh.runtime.providers.base import ModelRequest

    reps = opts.reps(15, 4)
    request = ModelRequest("bench", config["default_model"], (
        {"role": "user", "content": [{"type": "text", "text": "Stream a long answer."}]},),
        reasoning_effort=config.pop("effort", None), route=config["route"])
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        with _standin(module, [entry] * (2 * reps)) as base_url:
            route = _route(plugin(), {**config, "base_url": base_url})
            raw, provider, events = asyncio.run(_measure(route, request, reps, baseline))
    overhead = (statistics.median(provider) - statistics.median(raw)) / events * 1e6
    return metric.measure(round(overhead, 2), runs=reps, python_pass_ms=baseline.median_ms,
                          events=events, raw_ms=round(statistics.median(raw) * 1000, 2),
                          provider_ms=round(statistics.median(provider) * 1000, 2))


OPENAI = _metric("provider_chunk_overhead_openai", "chat-completions", "deepseek_standin")
ANTHROPIC = _metric("provider_chunk_overhead_anthropic", "Anthropic Messages",
                    "anthropic_standin")
RESPONSES = _metric("provider_chunk_overhead_responses", "OpenAI Responses",
                    "responses_standin")


@benchmark("provider_chunk_overhead_openai", OPENAI)
def provider_chunk_overhead_openai(opts: Options) -> Result:
    """Chat-completions route (DeepSeek stand-in): dsh's cost per streamed event."""
    from dsh.runtime.providers.openai_compat import OpenAICompatibleProvider

    entry = {"reasoning": "r" * ANSWER_CHARS, "content": "c" * ANSWER_CHARS}
    return _row(OPENAI, lambda: OpenAICompatibleProvider, "deepseek_standin",
                {"route": "deepseek-official", "default_model": "deepseek-flash"},
                entry, opts)


@benchmark("provider_chunk_overhead_anthropic", ANTHROPIC)
def provider_chunk_overhead_anthropic(opts: Options) -> Result:
    """Anthropic Messages route (Anthropic stand-in): dsh's cost per streamed event."""
    from dsh.runtime.providers.anthropic import AnthropicProvider

    entry = {"thinking": "r" * ANSWER_CHARS, "text": "c" * ANSWER_CHARS}
    return _row(ANTHROPIC, lambda: AnthropicProvider, "anthropic_standin",
                {"route": "anthropic", "default_model": "claude-sonnet-5-5",
                 "effort": "high"}, entry, opts)



@benchmark("provider_chunk_overhead_responses", RESPONSES)
def provider_chunk_overhead_responses(opts: Options) -> Result:
    """OpenAI Responses route (Responses stand-in): dsh's cost per streamed event."""
    from dsh.runtime.providers.responses import OpenAIResponsesProvider

    entry = {"reasoning": "r" * ANSWER_CHARS, "text": "c" * ANSWER_CHARS}
    return _row(RESPONSES, lambda: OpenAIResponsesProvider, "responses_standin",
                {"route": "openai", "default_model": "gpt-5.5", "effort": "high"}, entry,
                opts)
