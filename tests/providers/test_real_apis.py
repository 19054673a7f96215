"""The shipped routes against the real APIs, through the real runtime.

Each test skips without its key (``DEEPSEEK_API_KEY``, ``ANTHROPIC_API_KEY``,
``OPENAI_API_KEY``); with it, a
headless task that needs a tool call must complete, which on DeepSeek's thinking mode
means the reasoning of the tool-calling message went back on the second request.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable

import pytest

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
TASK = ("Call the working_directory tool once with no arguments, then answer with only "
        "the last path component of the directory it reports.")


def _run(run_dsh: RunDsh, provider: str, key: str) -> list[dict]:
    env = {key: os.environ[key]}
    proc = run_dsh("--profile", "headless", "--provider", provider, "--json", TASK,
                   env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["data"]["name"] for e in events if e["type"] == "tool/call"]
    return events


@pytest.mark.skipif(not os.environ.get("DEEPSEEK_API_KEY"),
                    reason="DEEPSEEK_API_KEY is not set; the real-API test needs a key")
@pytest.mark.parametrize("provider", ["deepseek-official", "deepseek-anthropic"])
def test_real_deepseek_tool_loop_in_thinking_mode(run_dsh: RunDsh, provider: str) -> None:
    events = _run(run_dsh, provider, "DEEPSEEK_API_KEY")
    usage = [e["data"]["usage"] for e in events if e["type"] == "assistant/message"]
    assert all(u["inputTokens"] > 0 and "estimated" not in u for u in usage)
    assert events[-1]["data"]["reason"] == {"kind": "completed"}


@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"),
                    reason="ANTHROPIC_API_KEY is not set; the real-API test needs a key")
def test_real_anthropic_tool_loop(run_dsh: RunDsh) -> None:
    events = _run(run_dsh, "anthropic", "ANTHROPIC_API_KEY")
    assert events[-1]["data"]["reason"] == {"kind": "completed"}


@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"),
                    reason="OPENAI_API_KEY is not set; the real-API test needs a key")
def test_real_openai_responses_tool_loop(run_dsh: RunDsh) -> None:
    """The Responses route: the encrypted reasoning of the tool call goes back unstored."""
    events = _run(run_dsh, "openai", "OPENAI_API_KEY")
    assert events[-1]["data"]["reason"] == {"kind": "completed"}
