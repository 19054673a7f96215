"""One streaming HTTP model route: what every wire format's provider shares.

:class:`HttpRoute` is the ``llm:<route>`` service of an HTTP provider row. A wire format
(:mod:`.openai_compat` for chat completions, :mod:`.anthropic` for Anthropic Messages)
subclasses it with three things: the request path, the request body, and the decoder of
the response's events. Everything else is here, once:

* **Where and who.** The base URL is the row's ``base_url``, else ``$<base_url_env>``
  from the launch's environment snapshot, else ``default_base_url``; one that is not
  http(s) fails the request (``bad-base-url``) naming where it came from. The key is read
  from the snapshot variable ``api_key_env`` (or the row's discouraged literal
  ``api_key``) and sent only in the auth header. A missing key fails with ``missing-key``
  before any request, naming the variable and where to set it, so a profile can carry a
  route it never uses. :attr:`HttpRoute.secret_env` and :attr:`HttpRoute.routing_env`
  list the variables the route reads (see :func:`route_env`).
* **Secrets stay out.** The key never appears in a log line, an exception, a ``repr`` or an
  event: server text quoted in errors goes through :meth:`HttpRoute.redact` first.
* **Failures, as the APIs document them.** 401/403: one line naming the key variable, no
  retry. 402: insufficient balance. A 400/413/422 that says the prompt exceeds the
  context window is ``context-overflow`` (the agent compacts and asks again); other 4xx
  quote the server's message. 408, 409, 429 and 5xx (Anthropic's 529 included) and
  connection failures are retried with bounded exponential backoff and jitter, honouring
  ``Retry-After`` (capped by ``backoff_max_s``), at most ``max_retries`` times, but only
  while nothing has been yielded: once the agent has shown deltas, a retry would repeat
  them, so a stream cut or failed mid-answer is ``stream-interrupted`` (the agent decides
  whether to ask again) and a half answer is never passed off as whole.
* **Usage and cost.** Usage the server reports is priced from the row's price table
  (:mod:`.pricing`); a server that reports none gets an estimate marked ``estimated``.
* Closing the stream (the consumer stops, or its task is cancelled) closes the response
  and its connection at once. Proxy and CA settings come from the snapshot too
  (``trust_env`` is off), because the home ``.env`` may set them where ``os.environ``
  cannot see them.

httpx is imported on the first request, never at module import or start: a profile
that never calls this route never pays for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol
from urllib.parse import urlsplit

from dsh._version import __version__
from dsh.core.errors import ConfigError, PluginError
from dsh.core.redact import redact as redact_url
from dsh.runtime.kernel.plugin import EnvVar, Plugin, Registrar, RuntimeContext
from dsh.runtime.providers.base import (
    EFFORTS,
    OFF_EFFORTS,
    Chunk,
    Exchange,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.runtime.providers.catalog import ModelCatalog, allowed_efforts, shown_efforts
from dsh.runtime.providers.pricing import PriceTable, estimated

if TYPE_CHECKING:
    import httpx

    from dsh.runtime.transports.sse import ServerSentEvent, SSEDecoder

ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error response read for its message; the rest is never downloaded."""
MESSAGE_LIMIT = 1000
"""Characters of server text quoted in one error message."""
PROBE_TIMEOUT_S = 10.0

_REDACTED = "[redacted]"
_BEARER = re.compile(r"Bearer\s+\S+", re.IGNORECASE)
_MASKED = re.compile(r"\S*\*{3,}\S*")  # a server echoing the key masked, e.g. sk-ab****wxyz
_KEY_CHARS = re.compile(r"^[\x21-\x7e]+$")
# How the APIs word a prompt too long for the model: DeepSeek and OpenAI ("maximum context
# length", code context_length_exceeded), Anthropic ("prompt is too long"), vLLM and others.
_OVERFLOW = re.compile(
    r"maximum context length|context[ _-]length|context[ _-]window|prompt is too long|"
    r"too many input tokens", re.IGNORECASE)

log = logging.getLogger("dsh.providers")

COMMON_SCHEMA: Mapping[str, Any] = {
    "base_url": {"type": "string", "description": "fixed base URL (wins over the variable)"},
    "base_url_env": {"type": ["string", "null"],
                     "description": "NAME of the variable that may set the base URL"},
    "default_base_url": {"type": "string"},
    "api_key_env": {"type": ["string", "null"],
                    "description": "NAME of the variable holding the key; null: no key"},
    "api_key": {"type": "string", "description": "literal key (discouraged)"},
    "context_window": {"type": "integer", "minimum": 1},
    "reasoning_effort": {"type": ["string", "null"], "enum": [*EFFORTS, None],
                         "default": None,
                         "description": "effort used when the client names none"},
    "timeout_s": {"type": "number", "minimum": 0.001, "default": 120,
                  "description": "longest wait for the next bytes of a response"},
    "connect_timeout_s": {"type": "number", "minimum": 0.001, "default": 10},
    "max_retries": {"type": "integer", "minimum": 0, "maximum": 20, "default": 4},
    "backoff_base_s": {"type": "number", "minimum": 0, "default": 0.5},
    "backoff_max_s": {"type": "number", "minimum": 0, "default": 20},
    "extra_headers": {"type": "object", "additionalProperties": {"type": "string"},
                      "default": {}},
}
"""Row config keys every HTTP route reads (defaults that differ per format are added by
the format's plugin)."""


def config_schema(*parts: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A provider row's config schema: the properties of ``parts``, with ``defaults``."""
    properties: dict[str, Any] = {}
    for part in parts:
        properties.update(part)
    for key, value in defaults.items():
        properties[key] = {**properties[key], "default": value}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """The delay a ``Retry-After`` header asks for (delta-seconds or an HTTP date), or
    None when absent or unreadable; a date in the past means no wait."""
    if not value or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        import email.utils  # only for an HTTP-date header: the package costs ~2 ms at boot

        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def backoff_delay(attempt: int, *, base: float, cap: float, retry_after: float | None,
                  rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number ``attempt + 1``.

    The server's ``Retry-After`` wins when given, capped at ``cap`` so that a hostile or
    confused header cannot park a turn for an hour. Otherwise exponential growth capped at
    ``cap``, with half of it jittered so that many clients do not retry in lockstep.
    """
    if retry_after is not None:
        return min(retry_after, cap)
    ceiling = min(cap, base * 2.0**attempt)
    return ceiling / 2 + rand() * ceiling / 2


def event_payload(data: str) -> Any:
    """A streamed event's ``data`` decoded as JSON (ModelError ``bad-response`` if not)."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ModelError("the server sent an event that is not valid JSON",
                         code="bad-response") from exc


def typed_event(data: str) -> tuple[str, dict[str, Any]]:
    """``(type, payload)`` of a streamed event whose JSON object names its ``type``
    (Anthropic's Messages stream and OpenAI's Responses stream)."""
    payload = event_payload(data)
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        raise ModelError("the server sent an event without a type", code="bad-response")
    return payload["type"], payload


def error_message(payload: Any) -> str | None:
    """The human message in an error document, in the shapes servers use:
    ``{"error": {"message"}}`` (OpenAI, DeepSeek, and Anthropic's ``{"type": "error",
    "error": {...}}``), ``{"error": "..."}`` (Ollama), ``{"message"}`` or ``{"detail"}``
    (FastAPI-based servers)."""
    if not isinstance(payload, Mapping):
        return None
    error = payload.get("error")
    if isinstance(error, Mapping):
        error = error.get("message")
    for candidate in (error, payload.get("message"), payload.get("detail")):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


class RouteEnv(NamedTuple):
    """The environment names one route row reads: ``secret`` ones hold credentials,
    ``routing`` ones decide where they are sent (a base URL)."""

    secret: tuple[str, ...]
    routing: tuple[str, ...]

    def as_env(self, what: str) -> dict[str, EnvVar]:
        """The names as :class:`~dsh.runtime.kernel.plugin.EnvVar` declarations."""
        env = {name: EnvVar(secret=True, description=f"API key of {what}")
               for name in self.secret}
        env.update({name: EnvVar(routing=True, description=f"base URL of {what}")
                    for name in self.routing})
        return env


def route_env(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> RouteEnv:
    """The variables a route row with (raw or validated) ``config`` reads.

    Pure and tolerant: it reads only string names, so it can run on a composed row before
    its tags are resolved or its config validated (the trust rules need it at launch).
    """
    def name(key: str) -> str | None:
        value = config[key] if key in config else defaults.get(key)
        return value if isinstance(value, str) and value else None

    key = None if isinstance(config.get("api_key"), str) else name("api_key_env")
    base = None if isinstance(config.get("base_url"), str) else name("base_url_env")
    return RouteEnv(tuple(n for n in (key,) if n), tuple(n for n in (base,) if n))


class Decoder(Protocol):
    """Turns one response's server-sent events into chunks (one per wire format)."""

    @property
    def finished(self) -> bool:
        """Whether the answer itself is complete (its finish reason has arrived)."""
        ...

    @property
    def done(self) -> bool:
        """Whether the stream's end marker arrived (nothing more is read)."""
        ...

    def decode(self, event: ServerSentEvent) -> list[Chunk]:
        """The chunks one event carries; raises ModelError for a malformed or failed one."""
        ...

    def end(self) -> list[Chunk]:
        """The closing chunks (usage if reported, then Finish); valid once finished."""
        ...


class _RetryError(Exception):
    """One attempt failed in a way worth repeating; ``error`` is raised if none are left."""

    def __init__(self, error: ModelError, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after = retry_after


class HttpRoute:
    """The ``llm:<route>`` service of one HTTP provider row (the Provider contract).

    Subclasses set :attr:`path` and implement :meth:`encode`, :meth:`decoder`,
    :meth:`auth_headers` and :meth:`form_refusal`.
    """

    path: ClassVar[str] = ""
    models_path: ClassVar[str] = "/models"
    log: ClassVar[logging.Logger] = log

    def __init__(self, config: Mapping[str, Any], *, env: Mapping[str, str], home: str,
                 row_id: str = "llm") -> None:
        self.route: str = config["route"]
        self.row_id = row_id
        self.catalog = ModelCatalog.from_config(config)
        self.default_model: str = config["default_model"]
        self.context_window: int = config["context_window"]
        self.supports_images: bool = config["supports_images"]
        self.reasoning_effort: str | None = config.get("reasoning_effort")
        self.prices = PriceTable(config["prices"], config["peak_hours_utc"], row_id=row_id)
        names = route_env(config, {})
        self.secret_env, self.routing_env = names.secret, names.routing
        base_env = config.get("base_url_env")
        if config.get("base_url"):
            base_url, self._url_where = config["base_url"], "the row's base_url"
        elif base_env and env.get(base_env):
            base_url, self._url_where = env[base_env], base_env
        else:
            base_url, self._url_where = config["default_base_url"], "the row's default_base_url"
        self.base_url = base_url.strip().rstrip("/")
        self.url = self.base_url + self.path
        self.shown_url = redact_url(self.url)
        """The URL as messages show it: credentials in it (user:pass@, ?key=) masked."""
        self._url_problem = _url_problem(self.base_url, self._url_where)
        self._max_retries: int = config["max_retries"]
        self._backoff = (config["backoff_base_s"], config["backoff_max_s"])
        self._extra_headers = dict(config["extra_headers"])
        self._key_env: str | None = config.get("api_key_env")
        self._literal_key = bool(config.get("api_key"))
        self._key = (config.get("api_key") or
                     (env.get(self._key_env, "") if self._key_env else "")).strip()
        self._home = home
        self._secrets = sorted({s for s in [self._key, *self._extra_headers.values()]
                                if len(s) >= 8}, key=len, reverse=True)
        self._env = env
        self._timeouts = (config["timeout_s"], config["connect_timeout_s"])
        if self.reasoning_effort is not None:
            problem = self.effort_refusal(self.reasoning_effort, self.default_model)
            if problem is not None:
                raise ConfigError(f"row '{row_id}' config.reasoning_effort: {problem}")
        # Built on the first request: importing httpx and its TLS context costs ~10 MB and
        # tens of ms, which a runtime that never calls this route should not pay at boot.
        self._http: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(route={self.route!r}, url={self.shown_url!r})"

    # -- what the agent asks before using the route -------------------------------------

    def accepts_model(self, model: str) -> bool:
        """Whether ``model`` is served here (aliases count, retired ids do not)."""
        return self.catalog.accepts(model)

    def model_refusal(self, model: str) -> str | None:
        """Why ``model`` cannot be chosen on this route (retired, unknown), or None."""
        return self.catalog.refusal(model)

    def request_refusal(self, model: str, effort: str | None = None) -> ModelError | None:
        """What a request for ``model`` with ``effort`` (None: the row's default) would
        fail with before it is sent, or None: a base URL that is no URL, a key missing or
        malformed, an effort the model or the route's wire form cannot take (the row's
        default effort, or a session's model changed since the effort was chosen). The
        agent asks before it creates a session for a prompt, so a run that cannot reach
        the model leaves no session behind; :meth:`stream` fails the same way."""
        if self._url_problem is not None:
            return ModelError(self._url_problem, code="bad-base-url")
        try:
            self._checked_key()
        except ModelError as exc:
            return exc
        effort = effort if effort is not None else self.reasoning_effort
        problem = None if effort is None else self.effort_refusal(effort, model)
        return None if problem is None else ModelError(problem, code="unsupported-effort")

    def effort_refusal(self, effort: str, model: str | None = None) -> str | None:
        """Why this route cannot send reasoning effort ``effort`` to ``model``, or None:
        its wire form cannot carry it (:meth:`form_refusal`), or the model's facts
        (``model_facts``) do not list it, a model that always thinks refusing ``none``.
        Asked when a client chooses the effort and again before each request, so what a
        model would refuse is refused before anything is sent."""
        problem = self.form_refusal(effort, model)
        if problem is not None or model is None:
            return problem
        efforts = self.catalog.facts(model).efforts
        if efforts is None or effort in allowed_efforts(efforts):
            return None
        served = self.catalog.wire_id(model)
        if effort in OFF_EFFORTS:
            return (f"model '{served}' on route '{self.route}' always thinks (it cannot "
                    f"turn thinking off); it takes reasoning effort {shown_efforts(efforts)}")
        return (f"model '{served}' on route '{self.route}' takes reasoning effort "
                f"{shown_efforts(efforts)}; not '{effort}'")

    def form_refusal(self, effort: str,
                     model: str | None) -> str | None:  # pragma: no cover - interface
        """Why the route's wire form (its reasoning or thinking style, for ``model``)
        cannot carry ``effort``, or None."""
        raise NotImplementedError

    def supports_images_for(self, model: str) -> bool:
        """Whether ``model`` takes image input on this route."""
        return self.catalog.images(model)

    def context_window_for(self, model: str) -> int:
        """``model``'s context window: its facts' where they say, else the route's."""
        return self.catalog.facts(model).context_window or self.context_window

    # -- the wire format (subclasses) ---------------------------------------------------

    def encode(self, request: ModelRequest, model: str) -> bytes:  # pragma: no cover
        """The request body for ``request``, sent as model id ``model``."""
        raise NotImplementedError

    def decoder(self) -> Decoder:  # pragma: no cover - interface
        """A fresh decoder for one response."""
        raise NotImplementedError

    def auth_headers(self, key: str) -> dict[str, str]:  # pragma: no cover - interface
        """The headers that carry ``key``."""
        raise NotImplementedError

    def base_headers(self) -> dict[str, str]:
        """Headers every request of this format carries, besides the key."""
        return {}

    # -- streaming ------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` without the key, header secrets, bearer tokens, masked key echoes or
        credentials inside URLs."""
        for secret in self._secrets:
            text = text.replace(secret, _REDACTED)
        return redact_url(_MASKED.sub(_REDACTED, _BEARER.sub("Bearer " + _REDACTED, text)))

    @property
    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = _client(self.url, self._env, *self._timeouts)
        return self._http

    async def aclose(self) -> None:
        """Close the connection pool (the row's ``dispose``), if one was opened."""
        if self._http is not None:
            client, self._http = self._http, None
            await client.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """Stream one response; see the module docstring for the failure policy."""
        problem = self.request_refusal(request.model, request.reasoning_effort)
        if problem is not None:
            raise problem
        headers = self._headers()
        model = self.catalog.wire_id(request.model)
        if request.reasoning_effort is None and self.reasoning_effort is not None:
            request = request._replace(reasoning_effort=self.reasoning_effort)
        body = self.encode(request, model)
        attempt = 0
        while True:
            try:
                async with contextlib.aclosing(
                        self._attempt(body, headers, request, model)) as chunks:
                    async for chunk in chunks:
                        yield chunk._replace(retries=attempt) if isinstance(
                            chunk, Exchange) else chunk
                return
            except _RetryError as retry:
                if attempt >= self._max_retries:
                    retry.error.retries = attempt
                    raise retry.error from retry.__cause__
                base, cap = self._backoff
                delay = backoff_delay(attempt, base=base, cap=cap,
                                      retry_after=retry.retry_after)
                attempt += 1
                self.log.warning("route '%s': %s; retry %d of %d in %.2fs", self.route,
                                 retry.error.message, attempt, self._max_retries, delay)
            await asyncio.sleep(delay)

    async def _attempt(self, body: bytes, headers: Mapping[str, str], request: ModelRequest,
                       model: str) -> AsyncGenerator[Chunk, None]:
        """One HTTP exchange. Raises :class:`_RetryError` only while nothing has been yielded."""
        import httpx

        from dsh.runtime.transports.sse import SSEDecoder

        decoder = self.decoder()
        yielded = False
        said = 0  # characters of output, for an estimate when the server sends no usage
        usage_seen = False
        try:
            async with self._client.stream("POST", self.url, content=body,
                                           headers=headers) as response:
                if not response.is_success:
                    raise await self._status_error(response)
                yield Exchange(response.status_code)
                if response.headers.get("content-type", "").startswith("application/json"):
                    detail = await self._detail(response)
                    raise ModelError(f"expected an event stream, got JSON: {detail}",
                                     code="bad-response")
                events = SSEDecoder()
                # read on past the end marker to the end of the body (servers end it right
                # there), so that the connection goes back to the pool for the next turn
                async for data in response.aiter_bytes():
                    try:
                        chunks = self._decode(events, decoder, data)
                    except ModelError as exc:
                        if exc.retryable and not yielded:
                            raise _RetryError(exc) from exc
                        if exc.retryable:
                            raise self._interrupted(exc.message) from exc
                        raise
                    for chunk in chunks:
                        if isinstance(chunk, Usage):
                            usage_seen = True
                            chunk = self.prices.priced(model, chunk)
                        else:
                            said += _size(chunk)
                        yielded = True
                        yield chunk
        except httpx.RequestError as exc:
            if not decoder.finished:  # a cut after the finish reason loses only usage
                if yielded:
                    raise self._interrupted(self.redact(str(exc) or type(exc).__name__)
                                            ) from exc
                raise _RetryError(self._transport_error(exc)) from exc
        if not decoder.finished:
            if yielded:
                raise self._interrupted("closed")
            raise _RetryError(ModelError(f"{self.shown_url} closed the stream before answering",
                                    code="connection", retryable=True))
        for chunk in decoder.end():
            if isinstance(chunk, Usage):
                usage_seen = True
                chunk = self.prices.priced(model, chunk)
            elif not usage_seen:
                # the Finish: a server that reported no usage gets an estimate before it
                usage_seen = True
                yield self.prices.priced(model, estimated(request, said))
            yield chunk

    def _decode(self, events: SSEDecoder, decoder: Decoder, data: bytes) -> list[Chunk]:
        from dsh.runtime.transports.sse import SSEError

        chunks: list[Chunk] = []
        if decoder.done:
            return chunks
        try:
            for event in events.feed(data):
                if not decoder.done:
                    chunks += decoder.decode(event)
        except SSEError as exc:
            raise ModelError(f"bad event stream from {self.shown_url}: {exc}",
                             code="bad-response") from exc
        return chunks

    # -- the key and the errors -----------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {**self._extra_headers, **self.base_headers(),
                   "Accept": "text/event-stream", "Content-Type": "application/json"}
        key = self._checked_key()
        if key:
            headers.update(self.auth_headers(key))
        return headers

    def key_problem(self) -> str | None:
        """Why a request on this route would fail for its key before it is sent (missing,
        malformed), with the fix; None when it has one or needs none. Clients ask before
        a first turn (``models/list``), so a missing key creates no session."""
        try:
            self._checked_key()
        except ModelError as exc:
            return exc.message
        return None

    def _checked_key(self) -> str:
        """The key, or "" for a keyless route; ModelError when it is missing or malformed."""
        if self._key_env is None and not self._literal_key:
            return ""
        if not self._key:
            raise ModelError(f"no API key for route '{self.route}': {self._key_where()} is "
                             f"not set; {self._key_hint()}", code="missing-key")
        if not _KEY_CHARS.match(self._key):
            raise ModelError(f"the API key in {self._key_where()} contains spaces or "
                             f"non-ASCII characters; {self._key_hint()}", code="invalid-key")
        return self._key

    def _key_where(self) -> str:
        return "the row's api_key" if self._literal_key else str(self._key_env)

    def _key_hint(self) -> str:
        if self._literal_key:
            return "fix config.api_key of this route's row (an env variable is safer)"
        if self._key_env is None:
            return "this route sends no key; set config.api_key_env to the variable's name"
        name = self._key_env
        return f"export {name}=... or add {name}=... to {self._home}/.env"

    async def _status_error(self, response: httpx.Response) -> Exception:
        status = response.status_code
        detail = await self._detail(response)
        if status in (401, 403):
            return ModelError(f"route '{self.route}' was refused (HTTP {status}: {detail}); "
                              f"check the key: {self._key_hint()}", code="auth",
                              status=status)
        if status == 402:
            return ModelError(f"route '{self.route}': insufficient balance (HTTP 402: "
                              f"{detail}); top up the account of this key",
                              code="insufficient-balance", status=status)
        if status in (400, 413, 422) and _OVERFLOW.search(detail):
            return ModelError(f"the conversation is too long for the model on route "
                              f"'{self.route}' (HTTP {status}: {detail})",
                              code="context-overflow", status=status)
        retryable = status in (408, 409, 429) or status >= 500
        error = ModelError(f"route '{self.route}' answered HTTP {status}: {detail}",
                           code=f"http-{status}", retryable=retryable, status=status)
        if retryable:
            return _RetryError(error, retry_after_seconds(response.headers.get("retry-after")))
        return error

    async def _detail(self, response: httpx.Response) -> str:
        """The server's own message from a (bounded) error body, redacted and shortened."""
        raw = bytearray()
        async for piece in response.aiter_bytes():
            raw += piece
            if len(raw) >= ERROR_BODY_LIMIT:
                break
        text = raw[:ERROR_BODY_LIMIT].decode("utf-8", "replace")
        try:
            message = error_message(json.loads(text))
        except ValueError:
            message = None
        message = " ".join((message or text).split()) or response.reason_phrase or "no details"
        return self.redact(message)[:MESSAGE_LIMIT]

    def _transport_error(self, exc: httpx.RequestError) -> ModelError:
        import httpx

        code = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
        if isinstance(exc, httpx.LocalProtocolError):
            # Its text quotes the offending header value: the key, or a configured secret.
            reason = "a header value or the URL cannot be sent"
        else:
            reason = self.redact(str(exc) or type(exc).__name__)[:MESSAGE_LIMIT]
        return ModelError(f"cannot reach {self.shown_url}: {reason}", code=code, retryable=True)

    def _interrupted(self, reason: str) -> ModelError:
        return ModelError(f"the model stream from {self.shown_url} broke off mid-answer "
                          f"({reason[:MESSAGE_LIMIT]})", code="stream-interrupted",
                          retryable=True)

    # -- doctor --live --------------------------------------------------------------------

    def unconfigured(self) -> str | None:
        """Why nobody has set this route up, or None: its key variable is unset, or (a
        keyless route) the variable naming its server is, so it points at a default
        nobody chose. Such a route is reported, not failed, while nobody uses it."""
        if self._literal_key or self._key:
            return None
        if self._key_env is not None:
            return f"{self._key_env} is not set"
        if self._url_where == "the row's default_base_url" and self.routing_env:
            return f"{self.routing_env[0]} is not set"
        return None

    async def probe(self, model: str | None = None) -> list[tuple[str, str, str]]:
        """``(check, status, message)`` for ``dsh doctor --live``: the key, the base URL,
        whether the server answers, and whether it lists ``model`` (its wire id; default
        the route's default model) where the API has a model list."""
        checks: list[tuple[str, str, str]] = []
        try:
            key = self._checked_key()
            checks.append(("key", "ok", f"{self._key_where()} is set" if key
                           else "this route sends no key"))
        except ModelError as exc:
            checks.append(("key", "fail", exc.message))
            key = None
        if self._url_problem is not None:
            checks.append(("server", "fail", self._url_problem))
            return checks
        import httpx

        url = self.base_url + self.models_path
        headers = {**self._extra_headers, **self.base_headers(),
                   **(self.auth_headers(key) if key else {})}
        wanted = self.catalog.wire_id(model or self.default_model)
        try:
            async with _client(url, self._env, PROBE_TIMEOUT_S, PROBE_TIMEOUT_S) as client:
                response = await client.get(url, headers=headers)
        except httpx.RequestError as exc:
            reason = self.redact(str(exc) or type(exc).__name__)[:200]
            checks.append(("server", "fail", f"cannot reach {self.base_url}: {reason}"))
            return checks
        status = response.status_code
        if status in (401, 403):
            checks.append(("server", "fail", f"{self.base_url} answers, but refused the key "
                           f"(HTTP {status}); {self._key_hint()}"))
            return checks
        if status in (404, 405):
            checks.append(("server", "ok", f"{self.base_url} answers (HTTP {status}); it has "
                           "no model list, so the model is not checked"))
            return checks
        try:
            listed = {m.get("id") for m in response.json().get("data", ())
                      if isinstance(m, Mapping)} if response.is_success else None
        except (ValueError, AttributeError, TypeError):
            listed = None
        if listed is None:
            checks.append(("server", "warn", f"{self.base_url}{self.models_path} answered "
                           f"HTTP {status} without a model list"))
        elif wanted in listed:
            checks.append(("server", "ok", f"{self.base_url} answers and lists '{wanted}'"))
        else:
            checks.append(("server", "fail", f"{self.base_url} answers but does not list "
                           f"'{wanted}' ({len(listed)} models listed)"))
        return checks


def _size(chunk: Chunk) -> int:
    if isinstance(chunk, (TextDelta, ReasoningDelta)):
        return len(chunk.text)
    if isinstance(chunk, ToolCallDelta):
        return len(chunk.arguments) + len(chunk.name or "")
    return 0


def _url_problem(url: str, where: str) -> str | None:
    """Why ``url`` cannot be a base URL (not http(s), no host), or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # an unbalanced IPv6 bracket, a bad port
        return f"the base URL from {where} is not a valid URL"
    if parts.scheme not in ("http", "https") or not host:
        # the URL itself is not quoted: it may hold a credential
        return (f"the base URL from {where} must be an http(s) URL with a host "
                f"(got scheme {parts.scheme or 'none'!r})")
    if parts.username or parts.password:
        return f"the base URL from {where} must not carry credentials; use the key variable"
    return None


def efforts_refusal(effort: str, allowed: Sequence[str], what: str) -> str | None:
    """The refusal of ``effort`` when it is not one of ``allowed`` (None when it is)."""
    if effort in allowed:
        return None
    if not allowed:
        return f"{what} sends no reasoning effort (got '{effort}')"
    return f"{what} takes reasoning effort {', '.join(allowed)}; not '{effort}'"


def _client(url: str, env: Mapping[str, str], timeout_s: float,
            connect_timeout_s: float) -> httpx.AsyncClient:
    """An AsyncClient whose proxy and CA settings come from ``env``, not ``os.environ``."""
    import httpx

    verify: Any = True
    cafile, capath = env.get("SSL_CERT_FILE") or None, env.get("SSL_CERT_DIR") or None
    if cafile or capath:
        import ssl

        try:
            verify = ssl.create_default_context(cafile=cafile, capath=capath)
        except (OSError, ssl.SSLError) as exc:
            raise PluginError("cannot load the CA certificates named by SSL_CERT_FILE / "
                              "SSL_CERT_DIR") from exc
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
        proxy=_proxy_for(url, env),
        verify=verify,
        trust_env=False,
        headers={"User-Agent": f"dsh/{__version__}"},
    )


def _proxy_for(url: str, env: Mapping[str, str]) -> str | None:
    """The proxy ``url`` should use under the curl conventions (``https_proxy``,
    ``all_proxy``, ``no_proxy`` host suffixes or ``*``), lowercase names first."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()

    def var(name: str) -> str:
        return env.get(name.lower()) or env.get(name.upper()) or ""

    for entry in var("no_proxy").lower().split(","):
        entry = entry.strip().lstrip(".")
        if entry.count(":") == 1:
            entry = entry.partition(":")[0]  # a host:port entry
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return None
    return var(f"{parts.scheme}_proxy") or var("all_proxy") or None


class HttpProviderPlugin(Plugin):
    """A provider row publishing one :class:`HttpRoute` subclass as ``llm:<route>``.

    Subclasses set the manifest, :attr:`route_class` and :attr:`defaults` (the schema
    defaults that differ per format, which :meth:`env_for` needs before validation).
    """

    route_class: ClassVar[type[HttpRoute]]
    defaults: ClassVar[Mapping[str, Any]]

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._provider: HttpRoute | None = None

    @classmethod
    def env_for(cls, config: Mapping[str, Any]) -> Mapping[str, EnvVar]:
        """The key and base-URL variables this row's route reads (see :func:`route_env`)."""
        route = config.get("route", cls.defaults["route"])
        return route_env(config, cls.defaults).as_env(f"route '{route}'")

    @classmethod
    def published_route(cls, config: Any) -> str | None:
        """The route a row with ``config`` (raw: not validated) publishes."""
        route = config.get("route", cls.defaults["route"]) if isinstance(config, Mapping) \
            else None
        return route if isinstance(route, str) else None

    @classmethod
    def route_for(cls, config: Mapping[str, Any], *, env: Mapping[str, str], home: str,
                  row_id: str) -> HttpRoute:
        """The route a row with validated ``config`` publishes (no I/O: ``dsh doctor
        --live`` builds one to probe it without starting a runtime)."""
        return cls.route_class(config, env=env, home=home, row_id=row_id)

    @property
    def service_name(self) -> str:
        """``llm:<route>``, the service this row publishes."""
        return f"llm:{self.config['route']}"

    def apply(self, reg: Registrar) -> None:
        """Declare the route's service; nothing connects until a request is made."""
        reg.service(self.service_name)

    async def start(self, rt: RuntimeContext) -> None:
        """Publish the route (no connection yet: a missing key only matters when used)."""
        self._provider = self.route_for(self.config, env=rt.env, home=rt.home,
                                        row_id=self.row_id)
        rt.publish(self.service_name, self._provider)

    async def dispose(self) -> None:
        """Close the route's connection pool."""
        if self._provider is not None:
            provider, self._provider = self._provider, None
            await provider.aclose()
