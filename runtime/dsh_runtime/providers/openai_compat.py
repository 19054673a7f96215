"""The ``llm-openai-compatible`` plugin: any chat-completions server as an ``llm:<route>``.

DeepSeek is the default (route ``deepseek-official``, ``DEEPSEEK_API_KEY``,
``DEEPSEEK_BASE_URL``); Ollama, vLLM or a llama.cpp server is another row with its own
``route`` and ``base_url`` (``api_key_env: null`` when it wants no key). The wire format
lives in :mod:`.openai_wire` and the event-stream framing in :mod:`.sse`; this module does
the HTTP and the failure policy:

* The key is read from the launch's environment snapshot (or the row's discouraged
  literal ``api_key``) and sent only in the ``Authorization`` header. It never appears in
  a log line, an exception, a ``repr`` or an event: server text quoted in errors is passed
  through :meth:`ChatCompletionsProvider.redact` first. A missing key fails with
  ``missing-key`` before any request, naming the variable and where to set it.
* 429, 5xx and connection failures are retried with bounded exponential backoff and
  jitter, honouring ``Retry-After`` (capped by ``backoff_max_s``), at most ``max_retries``
  times, but only while nothing has been yielded: once the agent has emitted deltas, a
  retry would repeat them, so a cut stream is ``stream-interrupted`` instead.
* Closing the stream (the consumer stops, or its task is cancelled) closes the response
  and its connection at once.
* Proxy and CA settings come from the snapshot too (``trust_env`` is off), because the
  home ``.env`` may set them where ``os.environ`` cannot see them.

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
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dsh._version import __version__
from dsh.errors import PluginError
from dsh.redact import redact as redact_url

from dsh_runtime.plugin import Capability, EnvVar, Manifest, Plugin, Registrar, RuntimeContext
from dsh_runtime.providers.base import Chunk, ModelError, ModelRequest

if TYPE_CHECKING:
    import httpx

    from dsh_runtime.providers.openai_wire import ChunkDecoder
    from dsh_runtime.providers.sse import SSEDecoder

DEFAULT_BASE_URL = "https://api.deepseek.com"
ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error response read for its message; the rest is never downloaded."""
MESSAGE_LIMIT = 500
"""Characters of server text quoted in one error message."""

_REDACTED = "[redacted]"
_BEARER = re.compile(r"Bearer\s+\S+", re.IGNORECASE)
_MASKED = re.compile(r"\S*\*{3,}\S*")  # a server echoing the key masked, e.g. sk-ab****wxyz
_KEY_CHARS = re.compile(r"^[\x21-\x7e]+$")

log = logging.getLogger("dsh.providers.openai")

CONFIG_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "route": {"type": "string", "default": "deepseek-official",
                  "description": "publishes service llm:<route>"},
        "base_url": {"type": "string",
                     "description": "default: $<base_url_env>, else " + DEFAULT_BASE_URL},
        "base_url_env": {"type": "string", "default": "DEEPSEEK_BASE_URL"},
        "api_key_env": {"type": ["string", "null"], "default": "DEEPSEEK_API_KEY",
                        "description": "NAME of the variable holding the key; null: no key"},
        "api_key": {"type": "string", "description": "literal key (discouraged)"},
        "default_model": {"type": "string", "default": "deepseek-chat"},
        "models": {"type": "array", "items": {"type": "string"}, "default": [],
                   "description": "accepted model ids; empty accepts any"},
        "context_window": {"type": "integer", "minimum": 1, "default": 128000},
        "timeout_s": {"type": "number", "minimum": 0.001, "default": 120,
                      "description": "longest wait for the next bytes of a response"},
        "connect_timeout_s": {"type": "number", "minimum": 0.001, "default": 10},
        "max_retries": {"type": "integer", "minimum": 0, "maximum": 20, "default": 4},
        "backoff_base_s": {"type": "number", "minimum": 0, "default": 0.5},
        "backoff_max_s": {"type": "number", "minimum": 0, "default": 20},
        "supports_images": {"type": "boolean", "default": False},
        "extra_headers": {"type": "object", "additionalProperties": {"type": "string"},
                          "default": {}},
    },
    "additionalProperties": False,
}


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


class _Retry(Exception):
    """One attempt failed in a way worth repeating; ``error`` is raised if none are left."""

    def __init__(self, error: ModelError, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after = retry_after


class ChatCompletionsProvider:
    """The ``llm:<route>`` service one row publishes (the :class:`~.base.Provider` contract)."""

    def __init__(self, config: Mapping[str, Any], *, env: Mapping[str, str], home: str) -> None:
        self.route: str = config["route"]
        self.default_model: str = config["default_model"]
        self.context_window: int = config["context_window"]
        self.supports_images: bool = config["supports_images"]
        self._models = frozenset(config["models"])
        base_url = config.get("base_url") or env.get(config["base_url_env"]) or DEFAULT_BASE_URL
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.shown_url = redact_url(self.url)
        """The URL as messages show it: credentials in it (user:pass@, ?key=) masked."""
        self._max_retries: int = config["max_retries"]
        self._backoff = (config["backoff_base_s"], config["backoff_max_s"])
        self._extra_headers = dict(config["extra_headers"])
        self._key_env: str | None = config["api_key_env"]
        self._literal_key = bool(config.get("api_key"))
        self._key = (config.get("api_key") or
                     (env.get(self._key_env, "") if self._key_env else "")).strip()
        self._home = home
        self._secrets = sorted({s for s in [self._key, *self._extra_headers.values()]
                                if len(s) >= 8}, key=len, reverse=True)
        self._env = env
        self._timeouts = (config["timeout_s"], config["connect_timeout_s"])
        # Built on the first request: importing httpx and its TLS context costs ~10 MB and
        # tens of ms, which a runtime that never calls this route should not pay at boot.
        self._http: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"ChatCompletionsProvider(route={self.route!r}, url={self.shown_url!r})"

    def accepts_model(self, model: str) -> bool:
        """Any model when the row lists none; otherwise only the listed ones."""
        return not self._models or model in self._models

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
        """Stream one completion; see the module docstring for the retry policy."""
        # The wire format and the event-stream framing load with the first request, like
        # httpx: a boot that never calls this route does not pay for them (~2 ms).
        from dsh_runtime.providers.openai_wire import encode_body

        headers = self._headers()  # missing-key fails here, before any request
        body = encode_body(request, images=self.supports_images)
        attempt = 0
        while True:
            try:
                async with contextlib.aclosing(self._attempt(body, headers)) as chunks:
                    async for chunk in chunks:
                        yield chunk
                return
            except _Retry as retry:
                if attempt >= self._max_retries:
                    raise retry.error from retry.__cause__
                base, cap = self._backoff
                delay = backoff_delay(attempt, base=base, cap=cap,
                                      retry_after=retry.retry_after)
                attempt += 1
                log.warning("route '%s': %s; retry %d of %d in %.2fs", self.route,
                            retry.error.message, attempt, self._max_retries, delay)
            await asyncio.sleep(delay)

    async def _attempt(self, body: bytes, headers: Mapping[str, str]) -> AsyncIterator[Chunk]:
        """One HTTP exchange. Raises :class:`_Retry` only while nothing has been yielded."""
        import httpx

        from dsh_runtime.providers.openai_wire import ChunkDecoder
        from dsh_runtime.providers.sse import SSEDecoder

        decoder = ChunkDecoder(self.redact)
        yielded = False
        try:
            async with self._client.stream("POST", self.url, content=body,
                                           headers=headers) as response:
                if not response.is_success:
                    raise await self._status_error(response)
                if response.headers.get("content-type", "").startswith("application/json"):
                    detail = await self._detail(response)
                    raise ModelError(f"expected an event stream, got JSON: {detail}",
                                     code="bad-response")
                events = SSEDecoder()
                # read on past [DONE] to the end of the body (servers end it right there),
                # so that the connection goes back to the pool for the next turn
                async for data in response.aiter_bytes():
                    for chunk in self._decode(events, decoder, data):
                        yielded = True
                        yield chunk
        except httpx.RequestError as exc:
            if not decoder.finished:  # a cut after the finish reason loses only usage
                if yielded:
                    raise self._interrupted(exc) from exc
                raise _Retry(self._transport_error(exc)) from exc
        if not decoder.finished:
            if yielded:
                raise self._interrupted(None)
            raise _Retry(ModelError(f"{self.shown_url} closed the stream before answering",
                                    code="connection", retryable=True))
        for chunk in decoder.end():
            yield chunk

    def _decode(self, events: SSEDecoder, decoder: ChunkDecoder, data: bytes) -> list[Chunk]:
        from dsh_runtime.providers.sse import SSEError

        chunks: list[Chunk] = []
        if decoder.done:
            return chunks
        try:
            for event in events.feed(data):
                if not decoder.done:
                    chunks += decoder.decode(event.data)
        except SSEError as exc:
            raise ModelError(f"bad event stream: {exc}", code="bad-response") from exc
        return chunks

    def _headers(self) -> dict[str, str]:
        headers = {**self._extra_headers, "Accept": "text/event-stream",
                   "Content-Type": "application/json"}
        if self._key_env is None and not self._literal_key:
            return headers
        if not self._key:
            raise ModelError(f"no API key for route '{self.route}': {self._key_where()} is "
                             f"not set; {self._key_hint()}", code="missing-key")
        if not _KEY_CHARS.match(self._key):
            raise ModelError(f"the API key in {self._key_where()} contains spaces or "
                             f"non-ASCII characters; {self._key_hint()}", code="invalid-key")
        headers["Authorization"] = f"Bearer {self._key}"
        return headers

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
                              f"check the key: {self._key_hint()}", code="auth")
        error = ModelError(f"HTTP {status} from {self.shown_url}: {detail}", code=f"http-{status}",
                           retryable=status == 429 or status >= 500)
        if error.retryable:
            return _Retry(error, retry_after_seconds(response.headers.get("retry-after")))
        return error

    async def _detail(self, response: httpx.Response) -> str:
        """The server's own message from a (bounded) error body, redacted and shortened."""
        raw = bytearray()
        async for piece in response.aiter_bytes():
            raw += piece
            if len(raw) >= ERROR_BODY_LIMIT:
                break
        text = raw[:ERROR_BODY_LIMIT].decode("utf-8", "replace")
        from dsh_runtime.providers.openai_wire import error_message

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

    def _interrupted(self, exc: Exception | None) -> ModelError:
        reason = "closed" if exc is None else self.redact(str(exc) or type(exc).__name__)
        return ModelError(f"the model stream from {self.shown_url} broke off mid-answer ({reason})",
                          code="stream-interrupted", retryable=True)


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


class OpenAICompatibleProvider(Plugin):
    """Publishes one OpenAI-compatible chat-completions endpoint as ``llm:<route>``."""

    manifest = Manifest(
        id="llm-openai-compatible",
        version=__version__,
        capabilities=frozenset({Capability.SERVICE}),
        description="A streaming OpenAI chat-completions provider (DeepSeek by default).",
        config_schema=CONFIG_SCHEMA,
        env={
            # not required: a profile may carry this row without ever using its route
            "DEEPSEEK_API_KEY": EnvVar(secret=True, description="DeepSeek API key"),
            "DEEPSEEK_BASE_URL": EnvVar(default=DEFAULT_BASE_URL,
                                        description="DeepSeek API base URL"),
        },
    )

    def __init__(self, row_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(row_id, config)
        self._provider: ChatCompletionsProvider | None = None

    @property
    def service_name(self) -> str:
        """``llm:<route>``, the service this row publishes."""
        return f"llm:{self.config['route']}"

    def apply(self, reg: Registrar) -> None:
        """Declare the route's service; nothing connects until a request is made."""
        reg.service(self.service_name)

    async def start(self, rt: RuntimeContext) -> None:
        """Publish the route (no connection yet: a missing key only matters when used)."""
        self._provider = ChatCompletionsProvider(self.config, env=rt.env, home=rt.home)
        rt.publish(self.service_name, self._provider)

    async def dispose(self) -> None:
        """Close the route's connection pool."""
        if self._provider is not None:
            provider, self._provider = self._provider, None
            await provider.aclose()
