"""The ``web_fetch`` tool: one URL, read as text, HTML turned into Markdown.

A fetch is bounded three ways by the ``tools-web`` row: ``timeout_s`` for the whole call
(every redirect included), ``max_bytes`` of body read (the download stops there, and the
answer says it was cut), and ``max_chars`` of text returned. Redirects are followed here,
not by httpx, so that the address guard (:mod:`.netguard`) judges every hop, at most
``max_redirects`` of them; a URL seen twice is reported as a redirect loop.

HTML (``text/html``, ``application/xhtml+xml``) becomes Markdown through markdownify on
BeautifulSoup's stdlib parser, scripts, styles and other non-content elements removed and
relative links made absolute, so the model can fetch them next. Other text (``text/*``,
JSON, XML, JavaScript ...) passes through; anything else (images, PDFs, archives) is
refused before its body is downloaded. The client connects directly (``trust_env`` off, no
proxy): through a proxy the guard's resolution would not be the one that counts.
"""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urljoin

from dsh._version import __version__
from dsh.core.redact import redact
from dsh.runtime.tools.base import ToolContext, ToolResult

if TYPE_CHECKING:
    import httpx

    from dsh.runtime.kernel.plugin import Plugin
    from dsh.runtime.tools.netguard import Network

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({
    "application/json", "application/xml", "application/javascript",
    "application/x-javascript", "application/ecmascript", "application/yaml",
    "application/x-yaml", "application/toml", "application/x-sh", "application/sql",
    "application/x-ndjson", "application/graphql", "application/rss+xml",
    "application/atom+xml",
})
#: Elements whose content is never reading matter.
DROPPED_ELEMENTS = ("script", "style", "noscript", "template", "iframe", "svg", "canvas",
                    "object", "embed", "head")
USER_AGENT = f"dsh/{__version__} (web_fetch)"


class FetchError(Exception):
    """The fetch failed; the message is written for the model."""


class Page(NamedTuple):
    """What a fetch brought back: the final URL, its media type and the (bounded) body."""

    url: str
    media_type: str
    charset: str | None
    body: bytes
    truncated: bool
    redirects: tuple[str, ...]


def kind_of(media_type: str, head: bytes) -> str:
    """``html``, ``text`` or ``binary`` for a response's media type (sniffed when absent)."""
    if media_type in HTML_TYPES:
        return "html"
    if (media_type.startswith("text/") or media_type in TEXT_TYPES
            or media_type.endswith(("+json", "+xml"))):
        return "text"
    if media_type:
        return "binary"
    if b"\x00" in head:
        return "binary"
    start = head.lstrip()[:15].lower()
    return "html" if start.startswith((b"<!doctype html", b"<html")) else "text"


def allow_setting(value: bool | Sequence[str]) -> bool | tuple[Network, ...]:
    """The row's ``allow_private`` as the guard takes it (networks parsed)."""
    if isinstance(value, bool):
        return value
    from dsh.runtime.tools.netguard import parse_networks

    return parse_networks(value)


async def fetch(url: str, *, allow: bool | Sequence[Network], max_bytes: int,
                max_redirects: int, timeout: float) -> Page:
    """GET ``url``, following redirects by hand with the guard on every hop.

    Raises :class:`FetchError` (or :class:`~.netguard.BlockedURLError`) with a message for the
    model; the caller bounds the total time.
    """
    import httpx

    from dsh.runtime.tools.netguard import check_url

    seen = [url]
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False,
                                 timeout=httpx.Timeout(timeout),
                                 headers={"User-Agent": USER_AGENT}) as client:
        while True:
            await check_url(url, allow)
            try:
                async with client.stream("GET", url) as response:
                    if response.is_redirect:
                        target = str(response.url.join(response.headers["location"]))
                        _check_redirect(seen, target, max_redirects)
                        seen.append(target)
                        url = target
                        continue
                    return await _page(response, url, seen, max_bytes)
            except httpx.InvalidURL as exc:
                raise FetchError(f"invalid URL {url!r}: {exc}") from None
            except httpx.TimeoutException:
                raise FetchError(f"timed out fetching {url}") from None
            except httpx.HTTPError as exc:
                raise FetchError(f"cannot fetch {url}: {exc or type(exc).__name__}") from None


def _check_redirect(seen: list[str], target: str, max_redirects: int) -> None:
    """Refuse a redirect to a URL already visited, or one past the limit."""
    if target in seen:
        chain = " -> ".join([*seen, target])
        raise FetchError(f"redirect loop: {chain}")
    if len(seen) > max_redirects:
        raise FetchError(f"too many redirects (the limit is {max_redirects}): "
                         f"{' -> '.join([*seen, target])}")


async def _page(response: httpx.Response, url: str, seen: Sequence[str],
                max_bytes: int) -> Page:
    """The final response as a :class:`Page`, refused early when it is not text."""
    if not response.is_success:
        raise FetchError(f"HTTP {response.status_code} {response.reason_phrase} from {url}")
    media_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type and kind_of(media_type, b"") == "binary":
        raise FetchError(f"{url} is {media_type}, not text: web_fetch reads HTML and text "
                         "only")
    body = bytearray()
    truncated = False
    async for piece in response.aiter_bytes():
        room = max_bytes - len(body)
        if len(piece) > room:
            body += piece[:room]
            truncated = True
            break
        body += piece
    if not media_type and kind_of("", bytes(body[:1024])) == "binary":
        raise FetchError(f"{url} has no content type and looks binary: web_fetch reads HTML "
                         "and text only")
    return Page(url, media_type, response.charset_encoding, bytes(body), truncated,
                tuple(seen[:-1]))


def html_to_markdown(body: bytes, charset: str | None, base_url: str) -> tuple[str, str]:
    """``(title, markdown)`` of an HTML document; relative links made absolute."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    with warnings.catch_warnings():
        # bs4 warns about markup that looks like a file name or like XML; the page is
        # what it is, and a warning must not turn into a tool failure.
        warnings.filterwarnings("ignore", module="bs4")
        soup = BeautifulSoup(body, "html.parser", from_encoding=charset)
    title = " ".join(soup.title.get_text().split()) if soup.title else ""
    for element in soup.find_all(DROPPED_ELEMENTS):
        element.decompose()
    for tag in soup.find_all(["a", "img"]):
        attribute = "href" if tag.name == "a" else "src"
        value = tag.get(attribute)
        if not isinstance(value, str):
            continue
        if tag.name == "img" and value.startswith("data:"):
            alt = tag.get("alt")  # one string: html.parser splits no ``alt`` into a list
            tag.replace_with(alt if isinstance(alt, str) else "")  # inline data is not text
        elif not value.startswith(("#", "javascript:", "mailto:")):
            tag[attribute] = urljoin(base_url, value)
    converter = MarkdownConverter(heading_style="ATX", bullets="-",
                                  escape_underscores=False, escape_asterisks=False)
    text = converter.convert_soup(soup)
    return title, tidy(text)


def tidy(text: str) -> str:
    """Trailing spaces gone and runs of blank lines collapsed to one."""
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def render(page: Page, *, max_chars: int) -> str:
    """The tool's answer: a short header (final URL, type, title), the text, and notes on
    anything cut."""
    kind = kind_of(page.media_type, page.body[:1024])
    shown_type = page.media_type or "unknown type"
    header = [f"URL: {page.url}"]
    if page.redirects:
        header.append(f"Redirected from: {page.redirects[0]}")
    if kind == "html":
        title, text = html_to_markdown(page.body, page.charset, page.url)
        header.append(f"Content-Type: {shown_type} (converted to Markdown)")
        if title:
            header.append(f"Title: {title}")
    else:
        text = page.body.decode(page.charset or "utf-8", "replace")
        header.append(f"Content-Type: {shown_type}")
    notes = []
    if page.truncated:
        notes.append(f"[cut: the response is larger than {len(page.body)} bytes; only those "
                     "were read]")
    if len(text) > max_chars:
        notes.append(f"[cut: showing the first {max_chars} of {len(text)} characters]")
        text = text[:max_chars]
    return "\n".join([*header, "", text or "(empty response)", *notes])


class WebFetch:
    """Fetches one URL and answers its text (HTML as Markdown)."""

    name = "web_fetch"
    description = (
        "Fetch a web page or other text resource by URL (http or https) and return its "
        "content: HTML converted to Markdown, other text as is. Binary content is refused. "
        "Only public internet addresses can be fetched. Long pages are cut, with a note."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http:// or https:// URL to fetch."},
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    mutating = False

    def __init__(self, plugin: Plugin) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Fetch within the row's bounds; every failure is a tool error naming the cause."""
        from dsh.runtime.tools.netguard import BlockedURLError, NonPublicAddressError

        config = self._plugin.config
        url = args["url"].strip()
        timeout = config["timeout_s"]
        try:
            page = await asyncio.wait_for(
                fetch(url, allow=allow_setting(config["allow_private"]),
                      max_bytes=config["max_bytes"], max_redirects=config["max_redirects"],
                      timeout=timeout),
                timeout)
        except asyncio.TimeoutError:
            return _failed(f"web_fetch timed out after {timeout} s: {url}")
        except NonPublicAddressError as exc:
            return _failed(f"{exc} (row '{self._plugin.row_id}' config.allow_private "
                           "lets more through)")
        except (BlockedURLError, FetchError) as exc:
            return _failed(str(exc))
        # Parsing a large page takes a while: keep the event loop (other sessions) free.
        text = await asyncio.to_thread(render, page, max_chars=config["max_chars"])
        return ToolResult(text)


def _failed(message: str) -> ToolResult:
    """A tool error; credentials inside the URLs it names (``?token=``) are masked."""
    return ToolResult(redact(message), is_error=True)
