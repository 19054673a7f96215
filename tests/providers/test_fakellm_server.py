"""The ``local`` route against an OpenAI-compatible server nobody here wrote: ``fakellm``.

fakellm (PyPI, MIT) is a mock OpenAI/Anthropic server driven by YAML rules; it runs here
as its own process on a free port on 127.0.0.1, and a headless run goes through the
shipped ``local`` preset (keyless, ``LOCAL_LLM_BASE_URL``): a tool call on the first
request, the answer on the second. fakellm streams no usage, so the run's usage must be
an estimate, marked as such.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("fakellm", reason="fakellm is not installed: pip install -e '.[test]'")

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
RULES = """\
version: 1
rules:
  - name: look_first
    when: {turn: 1}
    respond:
      tool_calls:
        - {name: working_directory, arguments: {}}
  - name: then_answer
    when: {turn: 2}
    respond:
      content: "fakellm says you are in the working directory."
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def fakellm(tmp_path: Path) -> Iterator[str]:
    """A fakellm server process; yields its OpenAI base URL."""
    import httpx

    config = tmp_path / "fakellm.yaml"
    config.write_text(RULES)
    command = shutil.which("fakellm", path=str(Path(sys.executable).parent))
    assert command, "fakellm's console script is missing beside the interpreter"
    port = _free_port()
    proc = subprocess.Popen([command, "serve", "--port", str(port), "--config", str(config)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_fakellm/stats").is_success:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"fakellm did not start: {proc.stderr.read()!r}"
                                     if proc.stderr else "fakellm did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_headless_turn_with_a_tool_call_on_the_local_route(run_dsh: RunDsh,
                                                            fakellm: str) -> None:
    proc = run_dsh("--profile", "headless", "--provider", "local", "--json", "Where am I?",
                   env={"LOCAL_LLM_BASE_URL": fakellm})
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    calls = [e["data"] for e in events if e["type"] == "tool/call"]
    assert [c["name"] for c in calls] == ["working_directory"]
    results = [e["data"]["message"] for e in events if e["type"] == "tool/result"]
    assert results[0]["isError"] is False
    messages = [e["data"] for e in events if e["type"] == "assistant/message"]
    assert messages[-1]["message"]["content"] == [
        {"type": "text", "text": "fakellm says you are in the working directory."}]
    # fakellm reports no usage: the runtime estimates it and says so.
    assert all(m["usage"]["estimated"] is True for m in messages)
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"] == {"kind": "completed"}
