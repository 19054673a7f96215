"""OpenTelemetry traces and metrics of the agent's work, off by default and free when off.

The ``telemetry-otel`` row (:mod:`.plugin`) reads its settings from the standard
``OTEL_*`` variables and its own config (:mod:`.settings`, standard library only); when
they turn it on it registers lifecycle hooks whose handlers (:mod:`.recorder`) turn turns,
model requests, tool calls and approvals into spans and metrics named by OpenTelemetry's
GenAI conventions (:mod:`.names`), exported over OTLP/HTTP by :mod:`.exporting`. Only those
last three import OpenTelemetry, and only a row that is on loads them.
"""
