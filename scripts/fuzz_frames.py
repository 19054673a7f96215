"""An atheris (libFuzzer) target for dsh.core.jsonrpc's frame decoder; a dev tool, never run by CI.

Run it by hand where atheris is installed (``pip install atheris``; it needs a clang
toolchain on some platforms)::

    python3 scripts/fuzz_frames.py -max_total_time=300          # fuzz for five minutes
    python3 scripts/fuzz_frames.py -runs=100000 corpus/          # with a corpus folder
    python3 scripts/fuzz_frames.py crash-<sha>                   # replay one finding

The fuzzer's input is split into a frame-size cap, cut points and a byte stream. The
stream is fed to :class:`dsh.core.jsonrpc.FrameDecoder` in the chunks the cuts make, then all
at once to a second decoder; any exception, a buffer above its bound, a fault whose
answer is not JSON, or the two decoders disagreeing (a desynchronisation) is a crash.
The test suite's hypothesis properties (tests/fuzz/test_fuzz_frames.py) check the same
against a reference model; this target runs the same checks for hours with coverage
guidance. The suite must not import this file (atheris is not a dependency).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _summary(items: list[Any]) -> list[tuple[Any, ...]]:
    """Decoder output without the sizes of oversize faults, which depend on the cuts."""
    from dsh.core.jsonrpc import Frame

    out: list[tuple[Any, ...]] = []
    for item in items:
        if isinstance(item, Frame):
            out.append(("frame", json.dumps(item.message, sort_keys=True), item.size))
        else:
            json.dumps(item.response(), allow_nan=False)
            out.append((item.kind,) if item.kind == "too_large" else (item.kind, item.size))
    return out


def test_one_input(data: bytes) -> None:
    """One fuzzer run: see the module docstring for what counts as a crash."""
    import atheris

    from dsh.core.jsonrpc import FrameDecoder

    provider = atheris.FuzzedDataProvider(data)
    cap = provider.ConsumeIntInRange(1, 4096)
    count = provider.ConsumeIntInRange(0, 16)
    cuts = sorted(provider.ConsumeIntInRange(0, 4096) for _ in range(count))
    stream = provider.ConsumeBytes(provider.remaining_bytes())
    split, whole = FrameDecoder(cap), FrameDecoder(cap)
    items: list[Any] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        cut = min(max(cut, start), len(stream))
        items += split.feed(stream[start:cut])
        start = cut
        if split.pending_bytes > cap + 1:
            raise AssertionError(f"decoder holds {split.pending_bytes} bytes over cap {cap}")
    items += split.finish()
    reference = whole.feed(stream) + whole.finish()
    if _summary(items) != _summary(reference):
        raise AssertionError("the cut stream decoded differently from the whole stream")


def main() -> None:
    """Hand the target to libFuzzer with the command line's options."""
    import atheris

    with atheris.instrument_imports():
        import dsh.core.jsonrpc  # noqa: F401 - instrumented for coverage guidance
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
