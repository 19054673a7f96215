"""The runtime wheel and the exe carrier a run measures: found, built, or why there is none.

The wheel rows (``install_size``, ``runtime_wheel``) and the exe carrier's start need the
``dsh-runtime-bin`` wheel; without one they are skipped with the reason, never passed on
nothing. The wheel is, first found first: ``--wheel PATH``; a fresh build when
``--build-wheel`` asks for one (``scripts/smoke_runtime_wheel.py --wheel-out wheelhouse``,
which builds, installs and checks it); else the newest ``wheelhouse/dsh_runtime_bin-*.whl``.

The exe carrier measured is ``DSH_RUNTIME_BIN`` when set (as the SDK reads it), else the
wheel's executable (unpacked into the run's temporary folder), else an installed
``dsh_runtime_bin``'s. Each is named in the report by where it came from, never by its
path on this machine.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / "wheelhouse"
WHEEL_GLOB = "dsh_runtime_bin-*.whl"
BUILD_HINT = ("build one with `python scripts/bench.py --build-wheel ...` (or "
              "`python scripts/smoke_runtime_wheel.py --wheel-out wheelhouse`), or pass "
              "`--wheel PATH`")


@dataclass(frozen=True)
class RuntimeWheel:
    """The wheel this run weighs, or (``path`` ``None``) the reason there is none."""

    path: Path | None
    origin: str  # how it was found: "--wheel", "built by --build-wheel", "wheelhouse/"
    reason: str | None = None

    @property
    def label(self) -> str:
        """``dsh_runtime_bin-0.1.0-...whl (wheelhouse/)``: a name without a machine path."""
        return f"{self.path.name} ({self.origin})" if self.path else "no runtime wheel"

    def manifest(self) -> dict:
        """The wheel's ``runtime.json`` (version, platform, source commit), unread: {}."""
        if self.path is None:
            return {}
        with zipfile.ZipFile(self.path) as archive:
            for name in archive.namelist():
                if name.endswith("/runtime.json") and name.count("/") == 1:
                    return json.loads(archive.read(name))
        return {}


def find_wheel(explicit: Path | None, build: bool, log=sys.stderr) -> RuntimeWheel:
    """The run's wheel: ``explicit``, else a fresh build when ``build``, else the newest
    in ``wheelhouse/``; otherwise a :class:`RuntimeWheel` naming why there is none."""
    if explicit is not None:
        path = explicit.expanduser().resolve()
        if not path.is_file():
            return RuntimeWheel(None, "--wheel", f"--wheel {explicit.name}: no such file")
        return RuntimeWheel(path, "--wheel")
    if build:
        print("bench: building the runtime wheel (scripts/smoke_runtime_wheel.py "
              "--wheel-out wheelhouse); this takes minutes", file=log, flush=True)
        before = set(WHEELHOUSE.glob(WHEEL_GLOB))
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "smoke_runtime_wheel.py"),
                               "--wheel-out", str(WHEELHOUSE)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return RuntimeWheel(None, "built by --build-wheel",
                                f"building the runtime wheel failed: {tail}")
        fresh = _newest(set(WHEELHOUSE.glob(WHEEL_GLOB)) - before) or _newest(
            set(WHEELHOUSE.glob(WHEEL_GLOB)))
        if fresh is None:
            return RuntimeWheel(None, "built by --build-wheel",
                                "the wheel build left no wheel in wheelhouse/")
        return RuntimeWheel(fresh, "built by --build-wheel")
    found = _newest(set(WHEELHOUSE.glob(WHEEL_GLOB)))
    if found is None:
        return RuntimeWheel(None, "wheelhouse/", f"no runtime wheel in wheelhouse/: {BUILD_HINT}")
    return RuntimeWheel(found, "wheelhouse/")


def _newest(paths: set[Path]) -> Path | None:
    return max(paths, key=lambda p: p.stat().st_mtime) if paths else None


@dataclass(frozen=True)
class ExeCarrier:
    """The frozen runtime to start, and how the report names it."""

    command: tuple[str, ...]
    label: str


def exe_carrier(wheel: RuntimeWheel | None, scratch: Path) -> ExeCarrier | None:
    """The exe carrier to measure (see the module docstring); ``None`` when there is none.

    A wheel's executable is unpacked under ``scratch`` (the caller's temporary folder),
    with its support files, exactly as pip lays the payload out.
    """
    if os.environ.get("DSH_RUNTIME_BIN", "").strip():
        return ExeCarrier((os.path.abspath(os.environ["DSH_RUNTIME_BIN"]),),
                          "exe carrier (DSH_RUNTIME_BIN)")
    if wheel is not None and wheel.path is not None:
        return ExeCarrier((str(unpack_runtime(wheel.path, scratch)),),
                          f"exe carrier ({wheel.path.name})")
    try:
        import dsh_runtime_bin  # type: ignore[import-not-found]

        return ExeCarrier((os.fspath(dsh_runtime_bin.runtime_path()),),
                          "exe carrier (dsh-runtime-bin, installed)")
    except (ImportError, OSError):
        return None


def unpack_runtime(wheel: Path, scratch: Path) -> Path:
    """Unpack ``wheel``'s ``dsh_runtime_bin/`` under ``scratch``; the executable's path."""
    target = scratch / "runtime-wheel"
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.infolist() if m.filename.startswith("dsh_runtime_bin/")]
        archive.extractall(target, members)
        manifest = json.loads((target / "dsh_runtime_bin" / "runtime.json").read_text())
    folder = target / "dsh_runtime_bin"
    for member in members:  # zipfile drops the mode bits pip restores
        mode = member.external_attr >> 16
        if mode & stat.S_IXUSR:
            path = target / member.filename
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    exe = folder / str(manifest.get("executable", ""))
    if not manifest.get("executable") or not exe.is_file():
        raise FileNotFoundError(f"{wheel.name}: its runtime.json names no executable it holds")
    return exe
