"""Fuzzing the JSON-RPC framing: arbitrary bytes split at arbitrary points never crash the
decoder and never desynchronise it, in memory and in a real runtime process.

tests/test_jsonrpc.py checks valid streams under any chunking and that garbage never
raises. Here a *reference model* reads the whole stream at once (split on ``\\n``, one
trailing ``\\r`` dropped, blank lines skipped, lines over the cap refused, the rest
decoded as UTF-8 JSON) and says exactly which frames and faults must come out, in which
order; the incremental :class:`FrameDecoder` must agree for every way the stream is cut.
Then a real ``dsh --profile sdk-minimal`` runtime is fed such streams over its stdin and
must answer every bad line with exactly the error the model predicts, and still answer a
request that follows: one connection, many examples, so a desynchronisation left by one
example fails the next.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from dsh.core import jsonrpc
from dsh.core.errors import InvalidMessageError
from dsh.core.jsonrpc import Frame, FrameDecoder, FrameFault

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

Expected = tuple[Any, ...]


def reference(stream: bytes, cap: int) -> list[Expected]:
    """What decoding ``stream`` (then EOF) must yield, computed on the whole stream.

    ``("frame", message, size)``, ``("parse", size)``, ``("invalid", id)`` and
    ``("too_large",)`` (its reported size depends on where the line was cut).
    """
    out: list[Expected] = []
    for line in stream.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > cap:
            out.append(("too_large",))
            continue
        if not line.strip(b" \t\r"):
            continue
        try:
            text = line.decode("utf-8")
            value = json.loads(text, parse_constant=_not_json)
        except (ValueError, RecursionError):
            out.append(("parse", len(line)))
            continue
        if isinstance(value, dict):
            out.append(("frame", value, len(line)))
        elif (isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict)
              and _is_id(value[0].get("id"))):
            out.append(("invalid", value[0].get("id")))
        else:
            out.append(("invalid", None))
    return out


def _is_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (
        isinstance(value, int) and not isinstance(value, bool))


def _not_json(name: str) -> Any:
    """``NaN`` and ``Infinity`` are JavaScript, not JSON."""
    raise ValueError(f"{name} is not JSON")


def observed(items: list[jsonrpc.Decoded], cap: int) -> list[Expected]:
    """The decoder's output in the model's terms, checking each fault's own invariants."""
    out: list[Expected] = []
    for item in items:
        if isinstance(item, Frame):
            out.append(("frame", item.message, item.size))
            continue
        assert isinstance(item, FrameFault)
        json.dumps(item.response(), allow_nan=False)
        if item.kind == "too_large":
            assert item.size > cap
            out.append(("too_large",))
        elif item.kind == "parse":
            out.append(("parse", item.size))
        else:
            out.append(("invalid", item.id))
    return out


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    """``data`` cut at the given offsets (taken modulo its length, any order)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for start, end in itertools.pairwise(points):
        yield data[start:end]


PIECES = [b"\n", b"\r", b"\r\n", b" ", b"\t", b"{", b"}", b"[", b"]", b'"', b":", b",",
          b"1", b"-", b"e", b"\\", b"\xff", b"\xc3", b"\xa9", b"\x00", b"NaN", b"Infinity",
          b'{"a":1}', b"[{}]", b'[{"id":7}]', b'{"jsonrpc":"2.0"}', b'"\\u00e9"', b"null",
          b"true", b"[" * 40, b"x" * 30]
noise = st.binary(max_size=300) | st.lists(st.sampled_from(PIECES), max_size=80).map(
    b"".join)
cuts_strategy = st.lists(st.integers(min_value=0), max_size=40)


@settings(max_examples=300, deadline=None)
@given(noise, cuts_strategy, st.integers(1, 64))
def test_any_split_of_any_bytes_decodes_exactly_as_the_whole_stream(
        data: bytes, cuts: list[int], cap: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=cap)
    items: list[jsonrpc.Decoded] = []
    for chunk in chunked(data, cuts):
        items += decoder.feed(chunk)
        assert decoder.pending_bytes <= cap + 1
    items += decoder.finish()
    assert decoder.pending_bytes == 0
    assert observed(items, cap) == reference(data, cap)


@settings(max_examples=150, deadline=None)
@given(st.lists(noise, max_size=4), cuts_strategy, st.integers(1, 64))
def test_one_byte_at_a_time_equals_one_read(parts: list[bytes], cuts: list[int],
                                            cap: int) -> None:
    """The extreme cuts agree with each other and with any other cut."""
    data = b"\n".join(parts)
    whole = FrameDecoder(cap)
    at_once = observed(whole.feed(data) + whole.finish(), cap)
    single = FrameDecoder(cap)
    items = [item for i in range(len(data)) for item in single.feed(data[i:i + 1])]
    assert observed(items + single.finish(), cap) == at_once
    some = FrameDecoder(cap)
    items = [item for chunk in chunked(data, cuts) for item in some.feed(chunk)]
    assert observed(items + some.finish(), cap) == at_once


# -- a real runtime ---------------------------------------------------------------------

MAX_FRAME = 1024  # the smallest the SDK server accepts, so oversize lines stay cheap

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8,
)
ids = st.none() | st.integers(-3, 3) | st.text(max_size=3) | st.booleans() | st.floats(0, 1)
broken_messages = st.fixed_dictionaries(
    {},
    optional={"jsonrpc": st.sampled_from(["2.0", "1.0", 2]), "id": ids,
              "method": st.text(max_size=4) | st.integers(), "params": json_values,
              "result": json_values, "error": json_values, "extra": json_values},
).map(lambda m: json.dumps(m).encode())
lines = st.one_of(
    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")),
    json_values.map(lambda v: json.dumps(v).encode()),
    broken_messages,
    st.integers(MAX_FRAME + 1, 3 * MAX_FRAME).map(lambda n: b"{" + b"x" * n),
    st.sampled_from([b"", b"   ", b"\r", b"[" * 5000]),
)


def expected_answers(stream: bytes) -> list[tuple[Any, int]]:
    """``(id, code)`` of every error the server owes for ``stream``'s lines, in order."""
    answers: list[tuple[Any, int]] = []
    decoder = FrameDecoder(MAX_FRAME)
    for item in decoder.feed(stream):
        if isinstance(item, FrameFault):
            answers.append((item.id, item.error.rpc_code))
            continue
        try:
            jsonrpc.parse_message(item.message)
        except InvalidMessageError as exc:
            answers.append((exc.id, exc.rpc_code))
            continue
        # A request would be served and a notification or response acted on: the
        # generator's job is garbage, so such an example is not one.
        reject()
    return answers


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    """One runtime for every example (module scope: a desync must show in the next)."""
    work = tmp_path_factory.mktemp("frames")
    patch = work / "frames.yml"
    patch.write_text(f"- {{id: sdk-server, merge: {{config: {{max_frame_bytes: {MAX_FRAME}}}}}}}\n")
    home = work / "home"
    home.mkdir()
    proc = RuntimeProcess("sdk-minimal", [OFFLINE_PATCH, patch], cwd=work,
                          env={"DSH_HOME": str(home)})
    try:
        yield proc
        proc.close_stdin()
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.finish()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(lines, min_size=1, max_size=8), cuts_strategy)
def test_a_real_runtime_answers_every_bad_line_and_stays_in_sync(
        runtime: RuntimeProcess, garbage: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in garbage)
    expected = expected_answers(stream)
    for chunk in chunked(stream, cuts):
        runtime.send_raw(chunk)
    rid = runtime.request("runtime/status")
    for want_id, want_code in expected:
        frame = runtime.recv(timeout=15)
        assert "error" in frame, (frame, expected)
        assert (frame["id"], frame["error"]["code"]) == (want_id, want_code), (frame, expected)
    frame = runtime.recv(timeout=15)
    assert frame.get("id") == rid and "result" in frame, frame
    assert frame["result"]["state"] == "uninitialized"  # never initialized: still served
