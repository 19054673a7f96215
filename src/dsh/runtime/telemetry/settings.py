"""What the telemetry row does, decided from its config and the ``OTEL_*`` variables.

Pure and standard-library only: the plugin decides at ``apply`` whether to register its
hooks at all (off, nothing else of telemetry is imported), and ``dsh doctor`` reports the
same decision. :func:`decide` answers :class:`Settings` (on) or :class:`Off` (with the
one warning to give, when the user asked for telemetry and cannot have it).

Switched on by the row's ``enabled`` (``auto``, the shipped default: on when an OTLP
endpoint is set, in the row or in ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``;
``true``: on, at OTLP's default ``http://localhost:4318`` when none is set; ``false``:
off), unless ``OTEL_SDK_DISABLED=true``. The standard variables read, as the OpenTelemetry
specification defines them:

* endpoints: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base: ``/v1/traces`` and ``/v1/metrics``
  are added), ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT`` (used as they are);
* ``OTEL_EXPORTER_OTLP[_{TRACES,METRICS}]_HEADERS`` (``k=v,k2=v2``, values
  percent-decoded), ``_TIMEOUT`` (milliseconds), ``_COMPRESSION`` (``gzip``, ``none``),
  ``_PROTOCOL`` (only ``http/protobuf``), ``_CERTIFICATE``, ``_CLIENT_KEY``,
  ``_CLIENT_CERTIFICATE``;
* ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` (``otlp`` or ``none``),
  ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_SERVICE_NAME``,
  ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_MAX_QUEUE_SIZE``, ``OTEL_BSP_SCHEDULE_DELAY``,
  ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``, ``OTEL_METRIC_EXPORT_INTERVAL``;
* ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``true``: prompt, answer, tool
  arguments and results are exported; the row's ``capture_content`` wins).

A malformed value (an endpoint that is not an http(s) URL, headers that are not
``k=v`` pairs, a sampler argument outside [0, 1], a protocol dsh does not speak) turns
telemetry off with one warning naming the variable, never its value; the run goes on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

AUTO = "auto"
"""The row's ``enabled`` default: on when an OTLP endpoint is set."""
DEFAULT_ENDPOINT = "http://localhost:4318"
"""OTLP/HTTP's default collector address (the specification's)."""
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on",
            "parentbased_always_off", "parentbased_traceidratio")
"""The ``OTEL_TRACES_SAMPLER`` values the SDK's own samplers implement."""
DEFAULT_PROVIDER_NAMES: Mapping[str, str] = {}
"""Routes whose ``gen_ai.provider.name`` is not the route's own name (the bundles list
theirs in the row's ``provider_names``)."""
SECRET_HEADERS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                  "OTEL_EXPORTER_OTLP_METRICS_HEADERS")
"""The variables that hold the exporter's headers: usually a token."""
ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
             "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

_KEY = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+\Z")


class Settings(NamedTuple):
    """Telemetry on: where and how to export, and what to record."""

    traces_endpoint: str | None
    metrics_endpoint: str | None
    traces_headers: Mapping[str, str]
    metrics_headers: Mapping[str, str]
    timeout_s: float
    compression: str
    certificate: str | None
    client_key: str | None
    client_certificate: str | None
    service_name: str
    resource: Mapping[str, str]
    sampler: str
    sampler_arg: float | None
    capture_content: bool
    max_queue_size: int
    schedule_delay_ms: int
    max_export_batch_size: int
    metric_interval_ms: int
    shutdown_timeout_s: float
    provider_names: Mapping[str, str]

    def where(self) -> str:
        """Where spans and metrics go, for messages (no path, no credentials)."""
        shown = {_origin(u) for u in (self.traces_endpoint, self.metrics_endpoint) if u}
        return ", ".join(sorted(shown))

    def child_env(self) -> dict[str, str]:
        """The variables a sub-agent's runtime needs to export where this one does, as
        these settings resolved them (a row-configured endpoint included); the headers
        among them are a secret the parent hands on deliberately."""
        env = {"OTEL_SERVICE_NAME": self.service_name,
               "OTEL_EXPORTER_OTLP_TIMEOUT": str(int(self.timeout_s * 1000)),
               "OTEL_EXPORTER_OTLP_COMPRESSION": self.compression,
               "OTEL_TRACES_SAMPLER": self.sampler}
        if self.sampler_arg is not None:
            env["OTEL_TRACES_SAMPLER_ARG"] = repr(self.sampler_arg)
        for signal, endpoint, headers in (("TRACES", self.traces_endpoint, self.traces_headers),
                                          ("METRICS", self.metrics_endpoint,
                                           self.metrics_headers)):
            if endpoint is None:
                env[f"OTEL_{signal}_EXPORTER"] = "none"
                continue
            env[f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"] = endpoint
            if headers:
                env[f"OTEL_EXPORTER_OTLP_{signal}_HEADERS"] = ",".join(
                    f"{k}={_quote(v)}" for k, v in headers.items())
        for name, value in (("CERTIFICATE", self.certificate), ("CLIENT_KEY", self.client_key),
                            ("CLIENT_CERTIFICATE", self.client_certificate)):
            if value:
                env[f"OTEL_EXPORTER_OTLP_{name}"] = value
        if self.resource:
            env["OTEL_RESOURCE_ATTRIBUTES"] = ",".join(
                f"{k}={_quote(v)}" for k, v in self.resource.items())
        if self.capture_content:
            env[CAPTURE_ENV] = "true"
        return env


class Off(NamedTuple):
    """Telemetry off: ``reason`` says why (``dsh doctor`` shows it); ``warning`` is the one
    line to log when the user asked for telemetry and does not get it (None when off is
    simply what was configured)."""

    reason: str
    warning: str | None = None


class _MalformedError(ValueError):
    """A variable or setting that does not parse; the message names it, not its value."""


def wanted(config: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    """Whether the row asks for telemetry at all (before any value is checked)."""
    enabled = config.get("enabled", "auto")
    if enabled != AUTO:
        return bool(enabled)
    return bool(config.get("endpoint")) or any(env.get(name, "").strip() for name in ENDPOINTS)


def decide(config: Mapping[str, Any], env: Mapping[str, str]) -> Settings | Off:
    """The row's telemetry (``config`` as validated by its schema) under ``env``."""
    if not wanted(config, env):
        return Off("off: no OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT, or the "
                   "row's endpoint)" if config.get("enabled", AUTO) == AUTO
                   else "off: the row's enabled is false")
    try:
        if _flag(env, "OTEL_SDK_DISABLED"):
            return Off("off: OTEL_SDK_DISABLED is true")
        return _settings(config, env)
    except _MalformedError as exc:
        return Off(f"off: {exc}", f"telemetry is off: {exc}; the run goes on without it")


def _settings(config: Mapping[str, Any], env: Mapping[str, str]) -> Settings | Off:
    for signal in ("", "_TRACES", "_METRICS"):
        name = f"OTEL_EXPORTER_OTLP{signal}_PROTOCOL"
        protocol = env.get(name, "").strip()
        if protocol and protocol != "http/protobuf":
            raise _MalformedError(f"{name} names another protocol than 'http/protobuf', the "
                                  "only one dsh exports with (OTLP over HTTP, protobuf)")
    base = config.get("endpoint") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() \
        or DEFAULT_ENDPOINT
    where = "the row's endpoint" if config.get("endpoint") else "OTEL_EXPORTER_OTLP_ENDPOINT"
    _url(base, where)
    endpoints: dict[str, str | None] = {}
    for signal, path in (("TRACES", "v1/traces"), ("METRICS", "v1/metrics")):
        exporter = env.get(f"OTEL_{signal}_EXPORTER", "otlp").strip().lower() or "otlp"
        if exporter not in ("otlp", "none"):
            raise _MalformedError(f"OTEL_{signal}_EXPORTER is neither 'otlp' nor 'none' (dsh "
                                  "exports with OTLP or not at all)")
        if exporter == "none" or config.get(signal.lower()) is False:
            endpoints[signal] = None
            continue
        key = f"{signal.lower()}_endpoint"
        name = f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"
        own = config.get(key) or env.get(name, "").strip()
        endpoints[signal] = (_url(own, f"the row's {key}" if config.get(key) else name)
                             if own else f"{base.rstrip('/')}/{path}")
    if endpoints["TRACES"] is None and endpoints["METRICS"] is None:
        return Off("off: both OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER are 'none'")
    headers = _pairs(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""), "OTEL_EXPORTER_OTLP_HEADERS")
    sampler = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    if sampler not in SAMPLERS:
        raise _MalformedError("OTEL_TRACES_SAMPLER names no sampler dsh has (it has "
                              + ", ".join(SAMPLERS) + ")")
    sampler_arg = None
    if sampler.endswith("traceidratio"):
        sampler_arg = _number(env, "OTEL_TRACES_SAMPLER_ARG", 1.0, low=0.0, high=1.0)
    resource = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES")
    service = (env.get("OTEL_SERVICE_NAME", "").strip() or config.get("service_name")
               or resource.get("service.name") or "dsh")
    capture = config.get("capture_content")
    if capture is None:
        capture = _flag(env, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    compression = env.get("OTEL_EXPORTER_OTLP_COMPRESSION", "").strip().lower() or "none"
    if compression not in ("gzip", "none"):
        raise _MalformedError("OTEL_EXPORTER_OTLP_COMPRESSION is neither 'gzip' nor 'none'")
    timeout_ms = _number(env, "OTEL_EXPORTER_OTLP_TIMEOUT",
                         float(config.get("export_timeout_s", 10)) * 1000, low=1)
    return Settings(
        traces_endpoint=endpoints["TRACES"], metrics_endpoint=endpoints["METRICS"],
        traces_headers=_signal_headers(env, "TRACES", headers, endpoints["TRACES"]),
        metrics_headers=_signal_headers(env, "METRICS", headers, endpoints["METRICS"]),
        timeout_s=timeout_ms / 1000, compression=compression,
        certificate=env.get("OTEL_EXPORTER_OTLP_CERTIFICATE") or None,
        client_key=env.get("OTEL_EXPORTER_OTLP_CLIENT_KEY") or None,
        client_certificate=env.get("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE") or None,
        service_name=service, resource=resource, sampler=sampler, sampler_arg=sampler_arg,
        capture_content=bool(capture),
        max_queue_size=int(_number(env, "OTEL_BSP_MAX_QUEUE_SIZE",
                                   config.get("max_queue_size", 2048), low=1)),
        schedule_delay_ms=int(_number(env, "OTEL_BSP_SCHEDULE_DELAY",
                                      config.get("schedule_delay_ms", 1000), low=1)),
        max_export_batch_size=int(_number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, low=1)),
        metric_interval_ms=int(_number(env, "OTEL_METRIC_EXPORT_INTERVAL",
                                       config.get("metric_interval_ms", 60000), low=1)),
        shutdown_timeout_s=float(config.get("shutdown_timeout_s", 1)),
        provider_names={**DEFAULT_PROVIDER_NAMES, **config.get("provider_names", {})})


def _signal_headers(env: Mapping[str, str], signal: str, common: Mapping[str, str],
                    endpoint: str | None) -> dict[str, str]:
    """A signal's headers: the common ones, then its own (none for a signal that is off)."""
    name = f"OTEL_EXPORTER_OTLP_{signal}_HEADERS"
    own = _pairs(env.get(name, ""), name)
    return {} if endpoint is None else {**common, **own}


def _flag(env: Mapping[str, str], name: str) -> bool:
    """A boolean variable: ``true``/``false`` (any case) or unset; anything else is
    malformed (the specification's rule is to read it as false and warn)."""
    value = env.get(name, "").strip().lower()
    if value in ("", "false"):
        return False
    if value == "true":
        return True
    raise _MalformedError(f"{name} is neither 'true' nor 'false'")


def _number(env: Mapping[str, str], name: str, default: float, *, low: float,
            high: float | None = None) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise _MalformedError(f"{name} is not a number") from None
    if value != value or value < low or (high is not None and value > high):
        bounds = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise _MalformedError(f"{name} must be {bounds}")
    return value


def _url(value: str, where: str) -> str:
    """An http(s) URL with a host, else malformed (naming ``where``, not the value)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise _MalformedError(f"{where} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _MalformedError(f"{where} is not an http:// or https:// URL with a host")
    return value


def _pairs(value: str, name: str) -> dict[str, str]:
    """``k=v,k2=v2`` (the W3C Baggage form the OTLP headers and resource attributes use),
    values percent-decoded; malformed when an entry has no ``=`` or a bad key."""
    found: dict[str, str] = {}
    for entry in value.split(","):
        if not entry.strip():
            continue
        key, sep, raw = entry.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise _MalformedError(f"{name} is not a list of key=value pairs")
        found[key] = unquote(raw.strip())
    return found


def _quote(value: str) -> str:
    """A value as ``k=v`` lists carry it: the separators and ``%`` percent-encoded."""
    return value.replace("%", "%25").replace(",", "%2C").replace("=", "%3D")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
