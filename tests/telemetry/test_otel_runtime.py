"""Telemetry in real runtimes: free when off, and bad input never stops a run.

Off (no endpoint, the shipped default) a runtime imports nothing of OpenTelemetry, checked
with the interpreter's own import log (as tests/runtime/test_boot_imports.py does).
Malformed ``OTEL_*`` values are one warning and telemetry off; a collector that is down or
refuses costs the run nothing but log lines saying what was lost; a trace context that
is garbage is ignored (the turn starts its own trace). ``dsh doctor`` says which it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from otlp_receiver import Receiver

from dsh.core.errors import ConfigError
from dsh.core.launch import EnvSnapshot
from dsh.runtime.kernel.kernel import Kernel
from dsh.runtime.telemetry.plugin import CARRIER_HINT
from dsh.sdk import AsyncDshClient, ClientConfig

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
OFFLINE = Path(__file__).resolve().parents[2] / "examples" / "offline" / "patch.yml"
LOOK = """\
- tool_calls: [{name: working_directory, arguments: {}}]
- text: "Done: looked around."
"""
GUARD = 60.0
OTEL_OFF = {name: None for name in os.environ if name.startswith("OTEL_")}
FOREIGN = ("opentelemetry", "google.protobuf", "requests")
TELEMETRY_ONLY = ("dsh.runtime.telemetry.recorder", "dsh.runtime.telemetry.exporting",
                  "dsh.runtime.telemetry.names")


def imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def foreign(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in FOREIGN or m in TELEMETRY_ONLY)


def headless(run_dsh: RunDsh, env: dict[str, str | None],
             *patches: Path) -> subprocess.CompletedProcess[str]:
    """One offline headless turn (a tool call, then the answer ``Done: ...``)."""
    script = Path.cwd().parent / "look.yml"
    script.write_text(LOOK)
    patch = script.with_name("look-patch.yml")
    patch.write_text(f"- {{id: llm-scripted, merge: {{config: {{script: {script}}}}}}}\n")
    flags = [f for p in (OFFLINE, patch, *patches) for f in ("--patch", str(p))]
    return run_dsh("--profile", "headless", *flags, "look around",
                   env={**OTEL_OFF, "PYTHONPROFILEIMPORTTIME": "1", **env})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "telemetry" in line
            and not line.startswith("import time:")]


def test_off_a_turn_imports_nothing_of_opentelemetry(run_dsh: RunDsh) -> None:
    proc = headless(run_dsh, {})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Done:")
    modules = imported(proc.stderr)
    # The row is there, and off. (The log shows a module that an import statement loads:
    # the plugin's own, loaded by importlib, shows by what it imports.)
    assert "dsh.runtime.telemetry.settings" in modules
    assert foreign(modules) == []
    assert warnings(proc.stderr) == []


def test_on_the_same_turn_does_import_it(run_dsh: RunDsh) -> None:
    """The measurement above can fail: with an endpoint set, the SDK is loaded."""
    with Receiver() as receiver:
        proc = headless(run_dsh, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        receiver.wait(lambda r: bool(r.traces))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "opentelemetry.sdk.trace" in imported(proc.stderr)


@pytest.mark.parametrize(("variable", "value"), [
    ("OTEL_TRACES_SAMPLER_ARG", "2"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign-here"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
])
def test_a_malformed_variable_is_one_warning_and_the_run_goes_on(
        run_dsh: RunDsh, variable: str, value: str) -> None:
    proc = headless(run_dsh, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                              "OTEL_TRACES_SAMPLER": "traceidratio", variable: value})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Done:")
    [line] = warnings(proc.stderr)
    assert "telemetry is off" in line and variable in line and "the run goes on" in line
    assert value not in line
    assert foreign(imported(proc.stderr)) == []


def test_sdk_disabled_is_off_and_silent(run_dsh: RunDsh) -> None:
    proc = headless(run_dsh, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                              "OTEL_SDK_DISABLED": "true"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert warnings(proc.stderr) == []
    assert foreign(imported(proc.stderr)) == []


def test_a_collector_that_is_down_costs_the_run_log_lines_only(run_dsh: RunDsh) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    proc = headless(run_dsh, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Done:")
    lines = warnings(proc.stderr)
    assert any(f"exporting spans to {endpoint} failed" in line and "the run goes on" in line
               for line in lines), lines
    [summary] = [line for line in lines if f"telemetry to {endpoint}:" in line]
    assert "0 spans sent" in summary and "lost to failed exports" in summary


def test_a_collector_that_refuses_is_counted_the_same(run_dsh: RunDsh) -> None:
    with Receiver(status=503) as receiver:
        proc = headless(run_dsh, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    assert proc.returncode == 0, proc.stderr[-2000:]
    [summary] = [line for line in warnings(proc.stderr)
                 if f"telemetry to {receiver.endpoint}:" in line]
    assert "0 spans sent" in summary
    assert receiver.traces  # it was asked, and said no


ANSWERS = """\
- text: "a"
- text: "b"
- text: "c"
"""
SCRIPTED = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path answers.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
"""


def test_a_garbage_trace_context_is_ignored(tmp_path: Path, dsh_home: Path) -> None:
    lines: list[str] = []
    (tmp_path / "answers.yml").write_text(ANSWERS)
    (tmp_path / "patch.yml").write_text(SCRIPTED)
    with Receiver() as receiver:
        config = ClientConfig(profile="sdk", dsh_home=dsh_home, cwd=tmp_path,
                              patches=[tmp_path / "patch.yml"], carrier="python",
                              trace_context={"traceparent": "garbage"},
                              env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
                              initialize_timeout=GUARD, request_timeout=GUARD,
                              stderr=lines.append)

        async def go() -> list[Any]:
            async with AsyncDshClient(config) as client:
                session = await client.new_session()
                first = await asyncio.wait_for(session.run("a"), GUARD)
                second = await asyncio.wait_for(session.run("b", trace_context={
                    "traceparent": "00-00000000000000000000000000000000-0000000000000000-01",
                    "tracestate": "x" * 10_000}), GUARD)
                # Not even an object: ignored where it enters, never refused.
                answer = await client.request("session/prompt", {
                    "sessionId": session.id, "_meta": {"traceparent": 5},
                    "contentBlocks": [{"type": "text", "text": "c"}]})
                return [first, second, answer]

        results = asyncio.run(go())
        receiver.wait(lambda r: sum(s.name == "invoke_agent dsh" for s in r.spans()) >= 3)
        turns = [s for s in receiver.spans() if s.name == "invoke_agent dsh"]
    assert [r.stop_reason for r in results[:2]] == ["completed", "completed"]
    assert "messageId" in results[2]
    assert all(t.parent_id == "" for t in turns)  # each a trace of its own
    assert len({t.trace_id for t in turns}) == len(turns)
    assert sum("not a W3C traceparent was ignored" in line for line in lines) == 1


def test_the_sdk_refuses_a_trace_context_that_is_no_mapping() -> None:
    with pytest.raises(ConfigError, match="trace_context must be a mapping of strings"):
        ClientConfig(trace_context="00-abc")  # type: ignore[arg-type]
    config = ClientConfig(trace_context={"TraceParent": "00-x", "baggage": "k=v"})
    assert dict(config.trace_context or {}) == {"traceparent": "00-x"}


def test_the_doctor_says_off_on_and_whether_the_collector_answers(run_dsh: RunDsh) -> None:
    def check(env: dict[str, str | None], *flags: str) -> dict[str, Any]:
        proc = run_dsh("doctor", "--json", *flags, env={**OTEL_OFF, **env})
        document = json.loads(proc.stdout)
        return {c["id"]: (c["status"], c["message"]) for c in document["data"]["checks"]
                if c["id"].startswith("telemetry.")}

    assert check({}) == {"telemetry.telemetry": ("ok", "off: no OTLP endpoint is set "
                                                       "(OTEL_EXPORTER_OTLP_ENDPOINT, or the "
                                                       "row's endpoint)")}
    with Receiver() as receiver:
        on = check({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                     "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20secret-token"},
                    "--live")
    assert on == {
        "telemetry.telemetry": ("ok", f"on: spans and metrics to {receiver.endpoint} "
                                      "(OTLP/HTTP, service 'dsh'; prompt and answer text "
                                      "not exported)"),
        "telemetry.telemetry.collector": ("ok", f"{receiver.endpoint} accepts OTLP "
                                                "(HTTP 200)")}
    assert receiver.headers[-1]["authorization"] == "Bearer secret-token"
    bad = check({"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"})
    assert bad["telemetry.telemetry"][0] == "warn"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in bad["telemetry.telemetry"][1]


def _kernel(config: dict[str, Any], env: dict[str, str]) -> Kernel:
    return Kernel([{"id": "telemetry", "name": "telemetry-otel", "config": config}],
                  profile="test", home=os.environ["DSH_HOME"], cwd=os.getcwd(),
                  env=EnvSnapshot(env, dict.fromkeys(env, "environment")))


def test_the_frozen_runtime_says_telemetry_needs_the_python_carrier(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}

    async def boot(config: dict[str, Any]) -> tuple[Any, Any]:
        kernel = _kernel(config, env)
        kernel.load()
        try:
            await kernel.start()
            telemetry = kernel.context.service("telemetry")
            return telemetry.child_env(), telemetry.trace_context("any session")
        finally:
            await kernel.dispose()

    caplog.set_level(logging.WARNING, logger="dsh.telemetry")
    # On by the environment: off, said once; the service answers nothing.
    assert asyncio.run(boot({"enabled": "auto"})) == ({}, None)
    assert [r.getMessage() for r in caplog.records] == [f"telemetry is off: {CARRIER_HINT}"]
    with pytest.raises(Exception, match="python carrier") as refused:
        asyncio.run(boot({"enabled": True}))  # asked for by the row: refused
    assert isinstance(refused.value, ConfigError) or isinstance(refused.value.__cause__,
                                                                ConfigError)


def test_off_the_row_registers_no_hook() -> None:
    kernel = _kernel({"enabled": "auto"}, {})
    kernel.load()
    hooks = kernel.context.hooks
    assert [h for e in ("before_turn", "after_turn", "after_model_response",
                        "before_tool_call", "after_tool_call", "session_end")
            for h in hooks.hooks(e)] == []
    on = _kernel({"enabled": "auto"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    on.load()
    assert [h.name for h in on.context.hooks.hooks("before_turn")] == ["otel-before_turn"]


def test_without_the_packages_telemetry_says_which_extra_and_the_run_goes_on(
        run_dsh: RunDsh, tmp_path: Path) -> None:
    """An installation without the otel extra: the packages are hidden by a package of the
    same name that cannot be imported, first on the path."""
    stub = tmp_path / "stub" / "opentelemetry"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('not installed here')\n")
    hidden = {"PYTHONPATH": str(stub.parent), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
    proc = headless(run_dsh, hidden)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Done:")
    [line] = warnings(proc.stderr)
    assert "telemetry is off: telemetry needs the OpenTelemetry packages: pip install " \
           "'dsh-harness[otel]'" in line
    explicit = tmp_path / "explicit.yml"
    explicit.write_text("- {id: telemetry, merge: {config: {enabled: true}}}\n")
    proc = headless(run_dsh, hidden, explicit)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "dsh-harness[otel]" in proc.stderr.strip().splitlines()[-1]
