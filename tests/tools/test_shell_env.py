"""What ``env`` shows inside the shell tool: no secret of the runtime, unless passed on.

A real ``dsh --profile sdk`` with the shell unsandboxed (the sandbox's own hiding is
tested in ``tests/security``): its launch environment holds a provider key, a token, and
a key under a name only the provider row's config marks as secret (``api_key_env``); the
model's ``env`` must see none of them, and sees exactly what the row's ``env`` policy
passes on.
"""

from __future__ import annotations

import sys

import pytest
from sdksession import session, text_of

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell")

ENV = {"DEEPSEEK_API_KEY": "canary-key-1", "SERVICE_TOKEN": "canary-token-2",
       "MODEL_ACCESS_CODE": "canary-declared-3", "BUILD_FLAVOUR": "visible-4"}
DECLARE = {"insert": [{"id": "llm-extra", "name": "llm-openai-compatible", "config": {
    "route": "extra", "api_key_env": "MODEL_ACCESS_CODE"}}]}


def shell(config: dict[str, object] | None = None) -> dict[str, object]:
    merged = {"sandbox": {"mode": "off"}, **({"env": config} if config else {})}
    return {"id": "tools:shell", "merge": {"config": merged}}


def run_env(tmp_path, config=None) -> str:
    results, _ = session(tmp_path, [{"name": "bash", "arguments": {"command": "env"}}],
                         [DECLARE, shell(config)], env=ENV)
    return text_of(results[0])


def test_the_shell_gets_no_secret_by_default(tmp_path) -> None:
    output = run_env(tmp_path)
    assert "BUILD_FLAVOUR=visible-4" in output
    for value in ("canary-key-1", "canary-token-2", "canary-declared-3"):
        assert value not in output, output


def test_the_row_policy_sets_and_excludes(tmp_path) -> None:
    """(``set: {NAME: !env SECRET}`` passing a secret on is exercised by the sub-agent
    tests, whose child patch does exactly that.)"""
    output = run_env(tmp_path, {"set": {"PASSED_KEY": "a-literal-value"},
                                "exclude": ["BUILD_*"]})
    assert "PASSED_KEY=a-literal-value" in output and "BUILD_FLAVOUR" not in output
    assert "canary" not in output
