"""The server-sent-events decoder: the spec's line rules, chunking independence, bounds."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.runtime.transports.sse import ServerSentEvent, SSEDecoder, SSEError


def decode(*chunks: bytes, **kwargs: int) -> list[ServerSentEvent]:
    decoder = SSEDecoder(**kwargs)
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_data_lines_comments_and_event_types() -> None:
    stream = (b": keep-alive\n\n"
              b"data: one\n\n"
              b"data:two\ndata:  three\n\n"
              b"event: error\ndata: {}\nid: 7\nretry: 10\nunknown: x\n\n"
              b"data\n\n"
              b"event: lonely\n\n")
    assert decode(stream) == [
        ServerSentEvent("one"),
        ServerSentEvent("two\n three"),
        ServerSentEvent("{}", "error"),
        ServerSentEvent(""),
    ]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(eol: bytes) -> None:
    stream = eol.join([b"data: a", b"data: b", b"", b"data: [DONE]", b"", b""])
    assert decode(stream) == [ServerSentEvent("a\nb"), ServerSentEvent("[DONE]")]


def test_crlf_split_between_chunks_is_one_line_ending() -> None:
    assert decode(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [ServerSentEvent("a\nb")]


def test_leading_bom_is_dropped_and_unterminated_event_discarded() -> None:
    assert decode("\ufeffdata: x\n\ndata: half".encode()) == [ServerSentEvent("x")]


def test_multibyte_character_split_across_chunks() -> None:
    raw = "data: héllo ☃\n\n".encode()
    assert decode(raw[:8], raw[8:13], raw[13:]) == [ServerSentEvent("héllo ☃")]


def test_invalid_utf8_is_an_error() -> None:
    with pytest.raises(SSEError, match="UTF-8"):
        decode(b"data: \xff\n\n")


def test_an_event_over_the_bound_is_an_error() -> None:
    decoder = SSEDecoder(max_event_bytes=64)
    decoder.feed(b"data: " + b"x" * 40 + b"\n")
    with pytest.raises(SSEError, match="exceeds 64 bytes"):
        decoder.feed(b"data: " + b"y" * 40)
    with pytest.raises(SSEError):
        SSEDecoder(max_event_bytes=64).feed(b"z" * 65)  # a line that never ends


_LINE = st.sampled_from([b"data: a", b"data:b\xc3\xa9", b": c", b"event: e", b"", b"data"])


@given(lines=st.lists(_LINE, max_size=12),
       eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
       cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_chunking_never_changes_the_events(lines: list[bytes], eol: bytes,
                                           cuts: list[int]) -> None:
    stream = b"".join(line + eol for line in lines)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    pieces = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode(*pieces) == decode(stream)
