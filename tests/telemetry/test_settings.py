"""How the telemetry row decides from its config and the ``OTEL_*`` variables (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.runtime.telemetry.settings import Off, Settings, decide, wanted

ROW: dict[str, Any] = {"enabled": "auto"}


def on(env: dict[str, str], **config: Any) -> Settings:
    decision = decide({**ROW, **config}, env)
    assert isinstance(decision, Settings), decision
    return decision


def off(env: dict[str, str], **config: Any) -> Off:
    decision = decide({**ROW, **config}, env)
    assert isinstance(decision, Off), decision
    return decision


def test_off_without_an_endpoint_and_silent_about_it() -> None:
    assert not wanted(ROW, {"OTEL_SERVICE_NAME": "x"})
    assert off({"OTEL_SERVICE_NAME": "x"}).warning is None
    assert off({}, enabled=False).reason == "off: the row's enabled is false"
    assert off({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, enabled=False).warning is None


def test_the_standard_endpoint_turns_it_on_with_the_signal_paths() -> None:
    settings = on({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318/"})
    assert settings.traces_endpoint == "https://collector.example:4318/v1/traces"
    assert settings.metrics_endpoint == "https://collector.example:4318/v1/metrics"
    assert settings.where() == "https://collector.example:4318"
    assert (settings.service_name, settings.sampler, settings.capture_content) == (
        "dsh", "parentbased_always_on", False)


def test_a_signal_endpoint_is_used_as_it_is_and_either_signal_can_be_off() -> None:
    settings = on({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/custom",
                   "OTEL_METRICS_EXPORTER": "none"})
    assert (settings.traces_endpoint, settings.metrics_endpoint) == ("http://t:1/custom", None)
    assert on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
              metrics=False).metrics_endpoint is None
    assert off({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none"}).warning is None


def test_enabled_true_uses_the_default_collector_and_the_row_wins_over_the_variable() -> None:
    assert on({}, enabled=True).traces_endpoint == "http://localhost:4318/v1/traces"
    settings = on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318"}, endpoint="http://row:4318")
    assert settings.traces_endpoint == "http://row:4318/v1/traces"


def test_headers_resource_sampler_and_content_capture() -> None:
    settings = on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                   "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc, x-tenant = a%3Db",
                   "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-tenant=metrics",
                   "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-resource,team=ai",
                   "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                   "OTEL_TRACES_SAMPLER_ARG": "0.25",
                   "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "TRUE"})
    assert settings.traces_headers == {"Authorization": "Bearer abc", "x-tenant": "a=b"}
    assert settings.metrics_headers == {"Authorization": "Bearer abc", "x-tenant": "metrics"}
    assert settings.resource == {"service.name": "from-resource", "team": "ai"}
    assert settings.service_name == "from-resource"
    assert (settings.sampler, settings.sampler_arg) == ("parentbased_traceidratio", 0.25)
    assert settings.capture_content is True
    assert on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
               "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
              capture_content=False).capture_content is False


def test_a_childs_environment_reproduces_the_settings() -> None:
    settings = on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                   "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20a%2Cb",
                   "OTEL_METRICS_EXPORTER": "none"}, service_name="fleet")
    child = settings.child_env()
    assert child["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] == "authorization=Bearer a%2Cb"
    assert child["OTEL_METRICS_EXPORTER"] == "none"
    assert on(child) == settings._replace(provider_names={})


@pytest.mark.parametrize(("env", "named"), [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://c"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:port"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "nonsense"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "token-without-a-key"}, "OTEL_EXPORTER_OTLP_HEADERS"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
     "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
     "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
    ({"OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "=x"}, "OTEL_RESOURCE_ATTRIBUTES"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
])
def test_a_malformed_value_is_one_warning_naming_the_variable_never_its_value(
        env: dict[str, str], named: str) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", **env}
    decision = off(env)
    assert decision.warning is not None and named in decision.warning
    assert "the run goes on" in decision.warning
    assert not any(v in decision.warning for k, v in env.items() if k == named and len(v) > 4)


def test_sdk_disabled_is_off_without_a_warning() -> None:
    decision = off({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "True"})
    assert (decision.reason, decision.warning) == ("off: OTEL_SDK_DISABLED is true", None)
