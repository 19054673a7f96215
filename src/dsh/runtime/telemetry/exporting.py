"""The OpenTelemetry SDK set up for one runtime: OTLP/HTTP exporters that never hold a turn.

:func:`start` builds a tracer provider (the configured sampler, a batch processor with a
bounded queue) and a meter provider (a periodic reader), each exporting OTLP over HTTP
(protobuf) from the SDK's own threads. Nothing is made global: dsh's spans come from
its own providers, so a plugin that instruments with the global API gets its own.

A collector that is down or slow costs a turn nothing: spans wait in the bounded queue
(the oldest dropped when it is full) while an export thread retries with backoff. After
a failed export the next ones are not even tried for a while (1 s, doubling up to 60 s,
back to none at the first success): a collector that is down would otherwise cost an
export attempt (a connection refused, its exception) every batch, on a thread that shares
the interpreter with the turns. What is lost is counted (:class:`Tally`): a failed export
is said in one log line (the first, then every hundredth), and closing says what was sent
and what was lost. Closing is bounded too (``shutdown_timeout_s``), so a runtime never
waits long on a collector to exit. The SDK's own log lines (a line per retry) are kept
to errors of its exporter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, TypedDict

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.semconv.attributes import service_attributes

from dsh._version import __version__
from dsh.runtime.telemetry.settings import Settings

logger = logging.getLogger("dsh.telemetry")

SCOPE = "dsh"
"""The instrumentation scope of every span and metric."""
PAUSE_S = 1.0
MAX_PAUSE_S = 60.0
"""After a failed export, the next is not tried for PAUSE_S, doubling to MAX_PAUSE_S."""


class Tally:
    """What one signal's exporter sent and lost, and when it may try again after a
    failure; thread-safe (exports run on SDK threads)."""

    def __init__(self, signal: str, where: str) -> None:
        self.signal = signal
        self.where = where
        self.sent = 0
        self.failed = 0
        self.failures = 0
        self.last_ok: bool | None = None
        self._resume = 0.0
        self._pause = PAUSE_S
        self._lock = threading.Lock()

    def paused(self) -> bool:
        """Whether an export now should not be tried (a recent one failed)."""
        return time.monotonic() < self._resume

    def record(self, count: int, ok: bool) -> None:
        with self._lock:
            self.last_ok = ok
            if ok:
                self.sent += count
                self._resume, self._pause = 0.0, PAUSE_S
                return
            self._resume = time.monotonic() + self._pause
            self._pause = min(self._pause * 2, MAX_PAUSE_S)
            self.failed += count
            self.failures += 1
            failures = self.failures
        if failures == 1 or failures % 100 == 0:
            logger.warning("telemetry: exporting %s to %s failed (%d so far, %d %s lost); "
                           "the run goes on", self.signal, self.where, failures, self.failed,
                           self.signal)


class _CountingSpans(SpanExporter):
    """The OTLP span exporter, counting what each export sent or lost."""

    def __init__(self, inner: SpanExporter, tally: Tally) -> None:
        self._inner = inner
        self.tally = tally

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.tally.paused():
            self.tally.record(len(spans), False)
            return SpanExportResult.FAILURE
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        self.tally.record(len(spans), result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _Ended(SpanProcessor):
    """Counts the sampled spans that ended, before the batch processor queues them: a
    span neither sent nor lost to a failed export was dropped (its queue was full, or
    it was still waiting when closing gave up). Says so once when the queue overflows."""

    def __init__(self, tally: Tally, room: int) -> None:
        self.tally = tally
        self.ended = 0
        self._room = room
        self._told = False

    def on_end(self, span: ReadableSpan) -> None:
        if not (span.context and span.context.trace_flags.sampled):
            return
        self.ended += 1
        waiting = self.ended - self.tally.sent - self.tally.failed
        if waiting > self._room and not self._told:
            self._told = True
            logger.warning("telemetry: %d spans are waiting for %s, more than the queue "
                           "holds; the oldest are dropped (the run goes on)", waiting,
                           self.tally.where)

    def dropped(self) -> int:
        """Spans that never reached the exporter."""
        return max(0, self.ended - self.tally.sent - self.tally.failed)


class _CountingMetrics(MetricExporter):
    """The OTLP metric exporter, counting exports (a metric export is one batch)."""

    def __init__(self, inner: MetricExporter, tally: Tally) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality,
                         preferred_aggregation=inner._preferred_aggregation)
        self._inner = inner
        self.tally = tally

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        if self.tally.paused():
            self.tally.record(1, False)
            return MetricExportResult.FAILURE
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            result = MetricExportResult.FAILURE
        self.tally.record(1, result is MetricExportResult.SUCCESS)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class _Tls(TypedDict):
    """The TLS files both OTLP exporters take, as keyword arguments."""

    certificate_file: str | None
    client_key_file: str | None
    client_certificate_file: str | None


class Pipeline:
    """The providers of one runtime; ``tracer``/``meter`` are None for a signal off."""

    def __init__(self, settings: Settings, *, profile: str) -> None:
        self._settings = settings
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)  # Tally reports
        resource = Resource.create({
            **settings.resource,
            service_attributes.SERVICE_NAME: settings.service_name,
            service_attributes.SERVICE_VERSION: __version__,
            "dsh.profile": profile})
        compression = Compression(settings.compression)
        tls: _Tls = {"certificate_file": settings.certificate,
                     "client_key_file": settings.client_key,
                     "client_certificate_file": settings.client_certificate}
        self.spans: Tally | None = None
        self.metrics: Tally | None = None
        self.tracer: Any = None
        self.meter: Any = None
        self._tracer_provider: TracerProvider | None = None
        self._meter_provider: MeterProvider | None = None
        self._ended: _Ended | None = None
        self._exporters: list[Any] = []
        if settings.traces_endpoint is not None:
            self.spans = Tally("spans", settings.where())
            exporter = _CountingSpans(OTLPSpanExporter(
                endpoint=settings.traces_endpoint, headers=dict(settings.traces_headers),
                timeout=settings.timeout_s, compression=compression, **tls), self.spans)
            self._exporters.append(exporter)
            # Closing is this class's, bounded: no interpreter-exit hook waiting on it.
            self._tracer_provider = TracerProvider(resource=resource, sampler=_sampler(settings),
                                                   shutdown_on_exit=False)
            batch = min(settings.max_export_batch_size, settings.max_queue_size)
            self._ended = _Ended(self.spans, settings.max_queue_size + batch)
            self._tracer_provider.add_span_processor(self._ended)
            self._tracer_provider.add_span_processor(BatchSpanProcessor(
                exporter, max_queue_size=settings.max_queue_size,
                schedule_delay_millis=settings.schedule_delay_ms,
                max_export_batch_size=min(settings.max_export_batch_size,
                                          settings.max_queue_size)))
            self.tracer = self._tracer_provider.get_tracer(SCOPE, __version__)
        if settings.metrics_endpoint is not None:
            self.metrics = Tally("metrics", settings.where())
            exporter_m = _CountingMetrics(OTLPMetricExporter(
                endpoint=settings.metrics_endpoint, headers=dict(settings.metrics_headers),
                timeout=settings.timeout_s, compression=compression, **tls), self.metrics)
            self._exporters.append(exporter_m)
            reader = PeriodicExportingMetricReader(
                exporter_m, export_interval_millis=settings.metric_interval_ms,
                export_timeout_millis=settings.timeout_s * 1000)
            self._meter_provider = MeterProvider(resource=resource, metric_readers=[reader],
                                                 shutdown_on_exit=False)
            self.meter = self._meter_provider.get_meter(SCOPE, __version__)

    def shutdown(self) -> str:
        """Flush and stop both providers within ``shutdown_timeout_s``, then give up on
        what is left (it is counted lost); returns the summary line for the log.

        A collector whose last export failed gets no wait: its exporters stop retrying at
        once, so what is left fails fast instead of waiting out the backoff.
        """
        if any(t.last_ok is False for t in (self.spans, self.metrics) if t is not None):
            self._abort()
        worker = threading.Thread(target=self._shutdown, name="dsh-telemetry-shutdown",
                                  daemon=True)
        worker.start()
        worker.join(self._settings.shutdown_timeout_s)
        if worker.is_alive():  # a slow collector: stop the retries, lose the rest
            self._abort()
            worker.join(0.5)
        parts = []
        if self.spans is not None and self._ended is not None:
            parts.append(f"{self.spans.sent} spans sent, {self.spans.failed} lost to failed "
                         f"exports, {self._ended.dropped()} dropped unsent")
        if self.metrics is not None:
            parts.append(f"{self.metrics.sent} metric exports sent, {self.metrics.failed} "
                         "failed")
        if worker.is_alive():
            parts.append(f"gave up flushing after {self._settings.shutdown_timeout_s:g} s")
        return f"telemetry to {self._settings.where()}: " + "; ".join(parts)

    def lost(self) -> int:
        """Spans and metric exports lost: failed, or (after :meth:`shutdown`) dropped."""
        dropped = self._ended.dropped() if self._ended is not None else 0
        return dropped + sum(t.failed for t in (self.spans, self.metrics) if t is not None)

    def _abort(self) -> None:
        for exporter in self._exporters:
            exporter.shutdown()

    def _shutdown(self) -> None:
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
        if self._meter_provider is not None:
            self._meter_provider.shutdown(timeout_millis=self._settings.shutdown_timeout_s
                                          * 1000)


def _sampler(settings: Settings) -> sampling.Sampler:
    ratio = settings.sampler_arg if settings.sampler_arg is not None else 1.0
    return {
        "always_on": lambda: sampling.ALWAYS_ON,
        "always_off": lambda: sampling.ALWAYS_OFF,
        "traceidratio": lambda: sampling.TraceIdRatioBased(ratio),
        "parentbased_always_on": lambda: sampling.ParentBased(sampling.ALWAYS_ON),
        "parentbased_always_off": lambda: sampling.ParentBased(sampling.ALWAYS_OFF),
        "parentbased_traceidratio": lambda: sampling.ParentBasedTraceIdRatio(ratio),
    }[settings.sampler]()
