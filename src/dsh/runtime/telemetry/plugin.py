"""The ``telemetry-otel`` plugin row: OpenTelemetry traces and metrics, when asked for.

The ``dsh-base`` and ``dsh-sdk-minimal`` bundles carry the row enabled and inert: with no
OTLP endpoint set (:mod:`.settings`) its ``apply`` registers nothing, so the agent fires
no hook for it (a hook table without telemetry's is the table of a runtime without the
row) and nothing of OpenTelemetry is imported. With one set, it registers six hooks
(:mod:`.recorder`), and ``start`` builds the exporters (:mod:`.exporting`) and publishes
service ``telemetry`` (``trace_context(session_id)`` and ``child_env()``, which the
sub-agent row uses so a child's spans join its parent's trace and reach the same
collector).

The OpenTelemetry packages are the ``otel`` extra, which the frozen runtime does not
carry. Where they are missing (frozen, or not installed) telemetry that the environment
turned on (``enabled: auto``) is off with one warning naming what it needs, and the run
goes on; a row that says ``enabled: true`` refuses to start instead (exit 2), as
``sessions-postgres`` does.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

from dsh._version import __version__
from dsh.core.distribution import OTEL_EXTRA, install_hint
from dsh.core.errors import ConfigError
from dsh.runtime.kernel.hooks import HookEvent
from dsh.runtime.kernel.plugin import (
    Capability,
    Checkup,
    Diagnosis,
    EnvVar,
    Manifest,
    Plugin,
    Registrar,
    RuntimeContext,
)
from dsh.runtime.telemetry.settings import AUTO, SECRET_HEADERS, Off, Settings, decide

logger = logging.getLogger("dsh.telemetry")

SERVICE = "telemetry"
HOOKS = ("before_turn", "after_turn", "after_model_response", "before_tool_call",
         "after_tool_call", "session_end")
"""The events telemetry listens to. Not ``before_model_request``: its payload (the whole
conversation) would be copied for every request; the ``chat`` span is drawn from
``after_model_response``, which carries the request's own start time."""

CARRIER_HINT = (f"telemetry needs the python carrier (`dsh` from `{install_hint(OTEL_EXTRA)}`;"
                " SDK: ClientConfig(carrier='python')): the frozen dsh-runtime does not carry "
                "OpenTelemetry")
PACKAGE_HINT = (f"telemetry needs the OpenTelemetry packages: {install_hint(OTEL_EXTRA)}")

_ENV = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": EnvVar(description="OTLP/HTTP base URL (turns telemetry "
                                                      "on)"),
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": EnvVar(description="OTLP/HTTP URL for spans"),
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": EnvVar(description="OTLP/HTTP URL for metrics"),
    **{name: EnvVar(secret=True, description="OTLP exporter headers (a token)")
       for name in SECRET_HEADERS},
    "OTEL_SERVICE_NAME": EnvVar(description="service.name of dsh's telemetry"),
    "OTEL_TRACES_SAMPLER": EnvVar(description="the span sampler"),
    "OTEL_TRACES_SAMPLER_ARG": EnvVar(description="the sampler's ratio"),
    "OTEL_SDK_DISABLED": EnvVar(description="true: telemetry off"),
}


class TelemetryOtel(Plugin):
    """Plugin row ``telemetry-otel``; publishes service ``telemetry`` when it runs."""

    manifest = Manifest(
        id="telemetry-otel",
        version=__version__,
        capabilities=frozenset({Capability.LIFECYCLE, Capability.SERVICE}),
        description="OpenTelemetry traces and metrics (OTLP over HTTP) of turns, model "
                    "requests, tool calls, approvals and sub-agents; on when an OTLP "
                    "endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT), free when off.",
        config_schema={
            "type": "object",
            "properties": {
                "enabled": {"enum": [AUTO, True, False], "default": AUTO,
                            "description": "auto: on when an OTLP endpoint is set; true: "
                                           "on (at http://localhost:4318 by default); "
                                           "false: off."},
                "endpoint": {"type": "string", "description": "OTLP/HTTP base URL (wins "
                                                              "over the variable)."},
                "traces_endpoint": {"type": "string"},
                "metrics_endpoint": {"type": "string"},
                "traces": {"type": "boolean", "default": True},
                "metrics": {"type": "boolean", "default": True},
                "service_name": {"type": "string",
                                 "description": "service.name (OTEL_SERVICE_NAME wins)."},
                "capture_content": {
                    "type": ["boolean", "null"], "default": None,
                    "description": "Export prompt and answer text, tool arguments and "
                                   "results (default: no; null follows "
                                   "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)."},
                "export_timeout_s": {"type": "number", "minimum": 0.001, "default": 10},
                "max_queue_size": {"type": "integer", "minimum": 1, "default": 2048},
                "schedule_delay_ms": {"type": "integer", "minimum": 1, "default": 1000},
                "metric_interval_ms": {"type": "integer", "minimum": 1, "default": 60000},
                "shutdown_timeout_s": {"type": "number", "minimum": 0, "default": 1,
                                       "description": "The most closing waits to flush."},
                "provider_names": {"type": "object",
                                   "additionalProperties": {"type": "string"},
                                   "default": {},
                                   "description": "gen_ai.provider.name of a route (default: "
                                                  "the route's name)."},
            },
            "additionalProperties": False,
        },
        env=_ENV,
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._decision: Settings | Off = Off("off: not applied")
        self._recorder: Any = None
        self._pipeline: Any = None

    def apply(self, reg: Registrar) -> None:
        """Decide from the config and the environment; register the hooks only when on."""
        self._decision = decide(self.config, reg.env)
        if not isinstance(self._decision, Settings):
            return
        reg.service(SERVICE)
        for event in HOOKS:  # inline: they only record in memory (see the recorder)
            reg.hook(event, f"otel-{event}", getattr(self, f"_{event}"), inline=True)

    async def start(self, rt: RuntimeContext) -> None:
        """Build the exporters and publish ``telemetry``; say once why not, when not."""
        settings = self._decision
        if not isinstance(settings, Settings):
            if settings.warning:
                logger.warning("%s", settings.warning)
            return
        rt.publish(SERVICE, self)  # answers nothing until the recorder runs
        explicit = self.config.get("enabled") is True
        if getattr(sys, "frozen", False):
            if explicit:
                raise ConfigError(CARRIER_HINT)
            logger.warning("telemetry is off: %s", CARRIER_HINT)
            return
        try:
            from dsh.runtime.telemetry.exporting import Pipeline
            from dsh.runtime.telemetry.recorder import Recorder
        except ImportError as exc:
            if explicit:
                raise ConfigError(f"{PACKAGE_HINT} ({exc})") from exc
            logger.warning("telemetry is off: %s (%s)", PACKAGE_HINT, exc)
            return
        pipeline = Pipeline(settings, profile=rt.profile)
        parent = {k.lower(): rt.env[k] for k in ("TRACEPARENT", "TRACESTATE") if rt.env.get(k)}
        self._recorder = Recorder(settings, pipeline.tracer, pipeline.meter,
                                  profile=rt.profile, parent=parent or None,
                                  provider_url=_route_url(rt), clock=time.time_ns)
        self._pipeline = pipeline

    async def update(self, config: Mapping[str, Any]) -> bool:
        """Any change replaces the row (hooks and exporters are built from the config)."""
        return config == self.config

    async def dispose(self) -> None:
        """End open spans, flush within ``shutdown_timeout_s``, log what was lost."""
        recorder, pipeline = self._recorder, self._pipeline
        self._recorder = self._pipeline = None
        if recorder is None or pipeline is None:
            return
        recorder.close()
        summary = await asyncio.to_thread(pipeline.shutdown)
        (logger.warning if pipeline.lost() else logger.info)("%s", summary)

    # -- service ``telemetry`` ----------------------------------------------------------------

    def trace_context(self, session_id: str) -> dict[str, str] | None:
        """The W3C trace context of ``session_id``'s running tool call (else its turn)."""
        recorder = self._recorder
        return recorder.trace_context(session_id) if recorder is not None else None

    def child_env(self) -> dict[str, str]:
        """The ``OTEL_*`` variables a sub-agent's runtime exports with (headers included:
        a secret handed on deliberately, never to a shell, a job or an MCP server)."""
        settings = self._decision
        if self._recorder is None or not isinstance(settings, Settings):
            return {}
        return settings.child_env()

    # -- hooks (inline; each forwards to the recorder once it runs) ------------------------------

    def _before_turn(self, event: HookEvent) -> None:
        if self._recorder is not None:
            self._recorder.before_turn(event)

    def _after_turn(self, event: HookEvent) -> None:
        if self._recorder is not None:
            self._recorder.after_turn(event)

    def _after_model_response(self, event: HookEvent) -> None:
        if self._recorder is not None:
            self._recorder.after_model_response(event)

    def _before_tool_call(self, event: HookEvent) -> None:
        if self._recorder is not None:
            self._recorder.before_tool_call(event)

    def _after_tool_call(self, event: HookEvent) -> None:
        if self._recorder is not None:
            self._recorder.after_tool_call(event)

    def _session_end(self, event: HookEvent) -> None:
        if self._recorder is not None:
            self._recorder.session_end(event)

    # -- dsh doctor ---------------------------------------------------------------------------

    @classmethod
    def diagnose(cls, row_id: str, config: Mapping[str, Any],
                 checkup: Checkup) -> list[Diagnosis]:
        """``telemetry.<row id>``: off and why, on and where (with ``--live``: whether
        the collector answers), or the warning a runtime would give."""
        from dsh.runtime.kernel.schema import validate

        check = f"telemetry.{row_id}"
        try:
            config = validate(cls.manifest.config_schema or {}, config, row_id=row_id)
        except ConfigError as exc:
            return [Diagnosis(check, "fail", str(exc))]
        decision = decide(config, checkup.env)
        if isinstance(decision, Off):
            return [Diagnosis(check, "warn" if decision.warning else "ok",
                              decision.warning or decision.reason)]
        problem = _missing()
        if problem is not None:
            status = "fail" if config.get("enabled") is True else "warn"
            return [Diagnosis(check, status, f"on, but {problem}")]
        signals = " and ".join(s for s, on in (("spans", decision.traces_endpoint),
                                                ("metrics", decision.metrics_endpoint)) if on)
        found = [Diagnosis(check, "ok", f"on: {signals} to {decision.where()} (OTLP/HTTP, "
                                        f"service {decision.service_name!r}; prompt and "
                                        "answer text "
                                        + ("exported" if decision.capture_content
                                           else "not exported") + ")")]
        if checkup.live:
            found.append(_reachable(check, decision))
        return found


def _route_url(rt: RuntimeContext) -> Any:
    """``url(route)``: the base URL of a route's provider service, if it has one."""

    def url(route: str) -> str | None:
        name = f"llm:{route}"
        if name not in rt.service_names():
            return None
        value = getattr(rt.service(name), "url", None)
        return value if isinstance(value, str) else None

    return url


def _missing() -> str | None:
    """Why this runtime could not export (frozen, packages missing), or None."""
    if getattr(sys, "frozen", False):
        return CARRIER_HINT
    import importlib.util

    for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http",
                   "opentelemetry.semconv"):
        try:
            if importlib.util.find_spec(module) is None:
                return PACKAGE_HINT
        except ImportError:
            return PACKAGE_HINT
    return None


def _reachable(check: str, settings: Settings) -> Diagnosis:
    """Send the collector an empty span export (a valid OTLP request that adds nothing)."""
    import httpx

    url = settings.traces_endpoint or settings.metrics_endpoint or ""
    headers = {**(settings.traces_headers if settings.traces_endpoint
                  else settings.metrics_headers),
               "Content-Type": "application/x-protobuf"}
    try:
        answer = httpx.post(url, content=b"", headers=headers, timeout=5.0, trust_env=False)
    except httpx.HTTPError as exc:
        return Diagnosis(f"{check}.collector", "fail", f"{settings.where()} did not answer "
                                                       f"({type(exc).__name__})")
    if answer.is_success:
        return Diagnosis(f"{check}.collector", "ok", f"{settings.where()} accepts OTLP "
                                                     f"(HTTP {answer.status_code})")
    return Diagnosis(f"{check}.collector", "fail", f"{settings.where()} answered HTTP "
                                                   f"{answer.status_code}")
