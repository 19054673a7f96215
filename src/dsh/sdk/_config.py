"""``ClientConfig``: everything that decides how a client starts and talks to its runtime.

One frozen, keyword-only value, validated when it is built, so a typo in a timeout or a
carrier name fails on the line that wrote it rather than at spawn time. Paths are kept as
given here; :mod:`dsh.sdk._launch` makes them absolute against the caller's working
directory at start, which is when "relative" has a meaning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Union

from dsh.core.errors import ConfigError

Carrier = Literal["auto", "exe", "python"]
StrPath = Union[str, "os.PathLike[str]"]
StderrCallback = Callable[[str], None]

CARRIERS: tuple[str, ...] = ("auto", "exe", "python")
# The runtime's own default frame cap (dsh.core.jsonrpc.DEFAULT_MAX_FRAME_BYTES; a test pins
# the two together). Spelled out so that building a config does not import the codec.
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """How to find, launch and talk to a dsh runtime.

    ``dsh_bin`` is a path to a runtime executable (a bare name is looked up on ``PATH``);
    left out, the runtime is found in this order: ``DSH_RUNTIME_BIN``, the installed
    ``dsh-runtime-bin`` wheel (``exe`` carrier), ``sys.executable -m dsh`` (``python``
    carrier). ``carrier`` restricts that search; an explicit choice is never silently
    replaced by another runtime.

    ``dsh_home`` (else a non-blank ``DSH_HOME`` in ``env`` or the environment) is required:
    the SDK never falls back to ``~/.dsh``, so an embedded agent cannot wander into a
    user's personal home by accident. ``patches`` are applied in order after the profile's
    layers. ``cwd`` is the runtime's working directory and the sessions' default one.

    ``env`` is laid over the caller's environment; with ``inherit_env=False`` it is the
    runtime's whole environment (plus ``DSH_HOME``), which is how a runtime starting a
    sub-agent hands it a scrubbed environment without exposing its own credentials.

    ``provider``, ``model``, ``reasoning_effort`` and ``max_tokens`` are sent with
    ``initialize``; left out, the profile's default route applies.

    Timeouts are in seconds: ``initialize_timeout`` bounds each startup request,
    ``request_timeout`` every later request (``None``: no bound), ``shutdown_timeout`` each
    rung of the shutdown ladder. ``max_frame_bytes`` caps one JSON-RPC line either way.
    ``stderr`` receives each line the runtime writes to stderr (on the client's event-loop
    thread); the last 200 lines are kept and attached to errors whether or not it is set.

    ``trace_context`` is a W3C Trace Context carrier (``{"traceparent": ...,
    "tracestate": ...}``, the dict ``opentelemetry.propagate.inject`` fills): when the
    runtime exports telemetry, its turns become children of that span, so an embedding
    program's trace contains the agent's work. It reaches the runtime as ``TRACEPARENT``
    and ``TRACESTATE`` in its environment; ``run``/``stream`` take one per prompt too,
    which wins for that prompt's turn. A value the runtime cannot parse is ignored there.
    """

    dsh_bin: StrPath | None = None
    profile: str = "sdk"
    patches: Sequence[StrPath] = ()
    dsh_home: StrPath | None = None
    cwd: StrPath | None = None
    env: Mapping[str, str] | None = None
    provider: str | None = None
    model: str | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    initialize_timeout: float = 30.0
    request_timeout: float | None = None
    shutdown_timeout: float = 5.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    carrier: Carrier = "auto"
    inherit_env: bool = True
    trace_context: Mapping[str, str] | None = None
    stderr: StderrCallback | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.patches, (str, bytes, os.PathLike)):
            # A lone path would otherwise be iterated character by character.
            raise ConfigError("patches must be a sequence of paths, not one path")
        object.__setattr__(self, "patches", tuple(self.patches))
        if self.env is not None:
            bad = [k for k, v in self.env.items() if not isinstance(k, str)
                   or not isinstance(v, str)]
            if bad:
                raise ConfigError(f"env names and values must be strings: {bad[0]!r}")
            object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        if self.trace_context is not None:
            object.__setattr__(self, "trace_context", trace_carrier(self.trace_context))
        _check_profile(self.profile)
        if self.carrier not in CARRIERS:
            raise ConfigError(f"carrier must be one of {', '.join(CARRIERS)}, "
                              f"not {self.carrier!r}")
        if self.dsh_bin is not None and self.carrier == "python":
            raise ConfigError("dsh_bin names an executable, but carrier='python' runs "
                              "sys.executable -m dsh: give one or the other")
        for name in ("dsh_bin", "dsh_home", "cwd"):
            value = getattr(self, name)
            if value is not None and not os.fspath(value).strip():
                raise ConfigError(f"{name} is blank; leave it out instead")
        for name in ("provider", "model", "reasoning_effort"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"{name} must be a non-empty string")
        if self.max_tokens is not None:
            _check_positive_int("max_tokens", self.max_tokens)
        _check_positive_int("max_frame_bytes", self.max_frame_bytes)
        _check_seconds("initialize_timeout", self.initialize_timeout)
        _check_seconds("shutdown_timeout", self.shutdown_timeout)
        if self.request_timeout is not None:
            _check_seconds("request_timeout", self.request_timeout)


def _check_profile(name: object) -> None:
    if (not isinstance(name, str) or not name.strip() or name in (".", "..")
            or "/" in name or "\\" in name):
        raise ConfigError(f"profile must be a name without path separators, not {name!r}")


def _check_positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, not {value!r}")


def _check_seconds(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ConfigError(f"{name} must be a positive number of seconds, not {value!r}")


TRACE_KEYS = ("traceparent", "tracestate")


def trace_carrier(value: object, name: str = "trace_context") -> MappingProxyType[str, str]:
    """The W3C trace context keys of a carrier (names case-insensitive, as HTTP headers
    are), others dropped; ConfigError when it is not a mapping of strings. The values
    are passed on as given: the runtime, not the client, ignores one that does not parse.
    """
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{name} must be a mapping of strings (a W3C trace context "
                          f"carrier such as {{'traceparent': '00-...'}}), not {value!r}")
    return MappingProxyType({k.lower(): v for k, v in value.items()
                             if k.lower() in TRACE_KEYS})
