"""What a user downloads and installs: the runtime wheel, and dsh's installed size beside
each anchor SDK with its runtime. Both need the runtime wheel (:mod:`benchlib.carrier`);
without it they are skipped, never weighed on what happens to be there."""

from __future__ import annotations

import subprocess
import tempfile
import zipfile
from pathlib import Path

from benchlib import anchors as anchor_probes
from benchlib.carrier import ROOT, RuntimeWheel
from benchlib.registry import Metric, Options, Result, benchmark
from benchlib.runtime import no_anchors

_PURE_PARTS = ("launcher/dsh", "src/dsh/runtime", "profiles")


def _no_wheel(wheel: RuntimeWheel | None) -> str:
    return wheel.reason if wheel is not None and wheel.reason else "no runtime wheel"


def _wheel_members(path: Path) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as archive:
        return archive.infolist()


def _provenance(wheel: RuntimeWheel) -> dict[str, object]:
    """Which commit the wheel was built from, beside the checkout's (a stale wheel says
    so rather than passing for this code)."""
    source = wheel.manifest().get("source") or {}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or None
    built = source.get("commit")
    return {"wheel": wheel.label, "wheel_commit": (built or "unknown")[:12],
            "wheel_dirty": bool(source.get("dirty")),
            "checkout_commit": (head or "unknown")[:12],
            "wheel_is_this_commit": bool(built and head and built == head)}


INSTALL_SIZE = Metric(
    "install_size", "MB", "<", 100,
    about="dsh installed: the pure wheel's files (launcher, runtime, profiles, as in this "
          "checkout) plus the runtime wheel's unpacked files; anchors: the RECORD sizes "
          "of each SDK's distributions with its runtime's. Shared dependencies left out "
          "on both sides; MiB.",
    changes="What the freeze bundles (libraries, stripped or not, bytecode or source), "
            "the companions (ripgrep), dsh's own sources. Target 100 MB: under a third of "
            "the smallest anchor (~300 MB); no contract sets one.")


@benchmark("install_size", INSTALL_SIZE, anchors=True)
def install_size(opts: Options) -> Result:
    """Installed size of dsh with its runtime wheel, beside each anchor with its runtime."""
    wheel = opts.wheel
    if wheel is None or wheel.path is None:
        return INSTALL_SIZE.skip(f"{_no_wheel(wheel)} (the runtime is most of the size)")
    pure = sum(f.stat().st_size for top in _PURE_PARTS for f in (ROOT / top).rglob("*")
               if f.is_file() and "__pycache__" not in f.parts)
    runtime = sum(m.file_size for m in _wheel_members(wheel.path))
    anchors = no_anchors()
    if opts.anchors is not None:
        with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
            anchors = {name: round(b / 2**20, 1)
                       for name, b in anchor_probes.product_sizes(opts.anchors, tmp).items()}
    return INSTALL_SIZE.measure((pure + runtime) / 2**20, anchors=anchors,
                                pure_mb=round(pure / 2**20, 2),
                                runtime_mb=round(runtime / 2**20, 2), **_provenance(wheel))


RUNTIME_WHEEL = Metric(
    "runtime_wheel", "MB", "<", 15,
    about="The dsh-runtime-bin wheel's download size, decimal MB as PyPI lists files; its "
          "unpacked size and largest members are details. The anchors' runtime wheels "
          "are 95 MB (DeepSeek Harness), 142 MB (Codex) and 178 MB (Claude) for linux "
          "x86_64.",
    changes="The freeze's contents (modules left out, native libraries stripped, Pillow's "
            "codecs), the compression level of the retagged wheel. Target 15 MB: issue 6.")


@benchmark("runtime_wheel", RUNTIME_WHEEL)
def runtime_wheel(opts: Options) -> Result:
    """The dsh-runtime-bin wheel: its download size and what it unpacks to."""
    wheel = opts.wheel
    if wheel is None or wheel.path is None:
        return RUNTIME_WHEEL.skip(_no_wheel(wheel))
    members = _wheel_members(wheel.path)
    largest = sorted(members, key=lambda m: m.compress_size, reverse=True)[:6]
    size = wheel.path.stat().st_size
    return RUNTIME_WHEEL.measure(
        size / 1e6, wheel_bytes=size, files=len(members),
        unpacked_mb=round(sum(m.file_size for m in members) / 1e6, 2),
        largest_kb={m.filename.removeprefix("dsh_runtime_bin/"): round(m.compress_size / 1e3)
                    for m in largest},
        **_provenance(wheel))
