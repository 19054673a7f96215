"""``dsh doctor --live [--provider ROUTE | --all-routes]``: each model route checked with
its own code against stand-ins on 127.0.0.1 (key, server reachable, model listed); a
missing key fails only the route in use, and the others are reported as not configured.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

from anthropic_standin import AnthropicStandIn
from deepseek_standin import DeepSeekStandIn
from responses_standin import ResponsesStandIn

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
DEEPSEEK_KEY = "sk-standin-aa11bb22cc33dd44"
ANTHROPIC_KEY = "sk-ant-standin-ee55ff66aa77"
OPENAI_KEY = "sk-proj-standin-bb88cc99dd00"
ROUTE_VARIABLES = ("DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL", "DEEPSEEK_ANTHROPIC_BASE_URL",
                   "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
                   "OPENAI_BASE_URL", "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL",
                   "LOCAL_LLM_BASE_URL")


def doctor(run_dsh: RunDsh, *args: str, **env: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """Exit code and the route checks by id, with only ``env`` of the route variables."""
    environ: dict[str, str | None] = dict.fromkeys(ROUTE_VARIABLES)
    environ.update(env)
    proc = run_dsh("doctor", "--live", "--json", *args, env=environ, timeout=120)
    document = json.loads(proc.stdout)
    return proc.returncode, {c["id"]: c for c in document["data"]["checks"]
                             if c["id"].startswith("route.")}


def test_provider_checks_the_named_route_and_not_the_default(run_dsh: RunDsh) -> None:
    with AnthropicStandIn(api_key=ANTHROPIC_KEY) as anthropic, \
            ResponsesStandIn(api_key=OPENAI_KEY) as responses:
        _, checks = doctor(run_dsh, "--provider", "anthropic",
                           ANTHROPIC_BASE_URL=anthropic.base_url,
                           ANTHROPIC_API_KEY=ANTHROPIC_KEY)
        assert sorted(checks) == ["route.anthropic.key", "route.anthropic.server"]
        assert checks["route.anthropic.key"]["status"] == "ok"
        server = checks["route.anthropic.server"]
        assert server["status"] == "ok" and "lists 'claude-sonnet-5-5'" in server["message"]
        # no DeepSeek key anywhere, and nothing says so: nobody uses that route here
        _, checks = doctor(run_dsh, "--provider", "openai", OPENAI_BASE_URL=responses.base_url,
                           OPENAI_API_KEY=OPENAI_KEY)
        assert checks["route.openai.server"]["status"] == "ok"
        assert "lists 'gpt-5.5'" in checks["route.openai.server"]["message"]
        assert [r.path for r in responses.requests] == ["/v1/models"]
        assert ANTHROPIC_KEY not in json.dumps(checks) and OPENAI_KEY not in json.dumps(checks)


def test_all_routes_reports_unused_unconfigured_ones_without_failing(
        run_dsh: RunDsh) -> None:
    with DeepSeekStandIn(api_key=DEEPSEEK_KEY) as deepseek, \
            AnthropicStandIn(api_key=DEEPSEEK_KEY, models=["deepseek-flash"]) as messages, \
            ResponsesStandIn(api_key=OPENAI_KEY) as responses:
        _, checks = doctor(run_dsh, "--all-routes", DEEPSEEK_BASE_URL=deepseek.base_url,
                           DEEPSEEK_API_KEY=DEEPSEEK_KEY,
                           DEEPSEEK_ANTHROPIC_BASE_URL=messages.base_url,
                           OPENAI_BASE_URL=responses.base_url, OPENAI_API_KEY=OPENAI_KEY)
    status = {check: c["status"] for check, c in checks.items()}
    assert status == {
        "route.deepseek-official.key": "ok", "route.deepseek-official.server": "ok",
        "route.deepseek-anthropic.key": "ok", "route.deepseek-anthropic.server": "ok",
        "route.openai.key": "ok", "route.openai.server": "ok",
        # the chat-completions preset shares OpenAI's variables, so it is configured too
        "route.openai-chat.key": "ok", "route.openai-chat.server": "ok",
        "route.anthropic.key": "ok", "route.openrouter.key": "ok", "route.local.key": "ok"}
    for route, variable in (("anthropic", "ANTHROPIC_API_KEY"),
                            ("openrouter", "OPENROUTER_API_KEY"),
                            ("local", "LOCAL_LLM_BASE_URL")):
        message = checks[f"route.{route}.key"]["message"]
        assert message.startswith(f"not configured ({variable} is not set); not in use")


def test_a_missing_key_fails_the_route_in_use_only(run_dsh: RunDsh) -> None:
    _, checks = doctor(run_dsh, "--all-routes")
    assert checks["route.deepseek-official.key"]["status"] == "fail"  # the default: in use
    assert "DEEPSEEK_API_KEY is not set" in checks["route.deepseek-official.key"]["message"]
    assert checks["route.anthropic.key"]["status"] == "ok"
    code, checks = doctor(run_dsh, "--all-routes", "--provider", "anthropic")
    assert checks["route.anthropic.key"]["status"] == "fail"  # now this one is in use
    assert checks["route.deepseek-official.key"]["status"] == "ok"
    assert "not configured" in checks["route.deepseek-official.key"]["message"]
    assert code == 1


def test_unknown_routes_and_usage_errors(run_dsh: RunDsh) -> None:
    code, checks = doctor(run_dsh, "--provider", "nope")
    assert code == 1 and checks["route.nope"]["status"] == "fail"
    assert "routes: anthropic, deepseek-anthropic, deepseek-official" in \
        checks["route.nope"]["message"]
    usage = run_dsh("doctor", "--provider", "openai")
    assert usage.returncode == 2 and "add --live" in usage.stderr
