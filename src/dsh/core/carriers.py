"""The two ways a dsh runtime can run: the frozen executable and the Python interpreter.

``exe``: ``dsh-runtime-<platform>-<arch>`` from the ``dsh-runtime-bin`` wheel (import
``dsh_runtime_bin``), a closed build the user's environment cannot break. ``python``:
``sys.executable -m dsh``, the same code from this installation, which needs the
``python`` extra's packages (:data:`dsh.core.distribution.PYTHON_MODULES`).

The ``dsh`` command runs the runtime in its own process when the python carrier is
available; otherwise it hands its command line over to the frozen executable
(:func:`launch_choice`), so an installation of ``dsh-harness[runtime]`` alone is a whole
dsh; with neither, it refuses in one line saying how to get one.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from typing import Any, NamedTuple

from dsh.core.errors import RuntimeNotFoundError

_MACHINES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_SYSTEMS = {"linux": "linux", "darwin": "macos", "windows": "win"}


def platform_key() -> str:
    """This machine's runtime platform key, e.g. ``linux-x64``."""
    import platform  # not at import: every boot loads this module, few need the key

    system = _SYSTEMS.get(platform.system().lower(), platform.system().lower())
    machine = _MACHINES.get(platform.machine().lower(), platform.machine().lower())
    return f"{system}-{machine}"


def running_frozen() -> bool:
    """Whether this process is the frozen executable (the exe carrier itself)."""
    return bool(getattr(sys, "frozen", False))


def exe_available() -> bool:
    """Whether the ``dsh-runtime-bin`` wheel is installed (without importing it)."""
    return running_frozen() or importlib.util.find_spec("dsh_runtime_bin") is not None


@functools.cache
def python_missing() -> tuple[str, ...]:
    """The python carrier's modules this installation lacks (none: it can run here).

    Located with ``find_spec`` (nothing is imported), about a millisecond for all of them;
    a frozen process has everything it runs inside it.
    """
    if running_frozen():
        return ()
    from dsh.core.distribution import PYTHON_MODULES

    return tuple(m for m in PYTHON_MODULES if importlib.util.find_spec(m) is None)


class Handover(NamedTuple):
    """Run this command line with the frozen executable ``path`` instead of in-process."""

    path: str
    version: str | None


def launch_choice() -> Handover | None:
    """How the ``dsh`` command runs what it was asked: in this process (None), or by
    handing over to the frozen runtime when this installation cannot run it itself.

    Raises :class:`RuntimeNotFoundError` (exit 2, one line) when neither can: the python
    carrier's packages are missing and the ``dsh-runtime-bin`` wheel of this version is
    not installed.
    """
    missing = python_missing()
    if not missing:
        return None
    from dsh._version import __version__
    from dsh.core.distribution import DIST_NAME, RUNTIME_DIST, RUNTIME_EXTRA, either_hint

    lacking = f"this installation lacks the python runtime's packages ({', '.join(missing)})"
    if importlib.util.find_spec("dsh_runtime_bin") is None:
        raise RuntimeNotFoundError(f"{lacking} and the frozen runtime ({RUNTIME_DIST}) is "
                                   "not installed", hint=either_hint())
    try:
        import dsh_runtime_bin

        path = str(dsh_runtime_bin.runtime_path())
        version = getattr(dsh_runtime_bin, "__version__", None)
    except (ImportError, OSError, ValueError, AttributeError) as exc:
        raise RuntimeNotFoundError(f"{lacking}, and the frozen runtime ({RUNTIME_DIST}) is "
                                   f"unusable: {exc}", hint=either_hint()) from exc
    if version != __version__:
        raise RuntimeNotFoundError(
            f"{lacking}, and the frozen runtime is {RUNTIME_DIST} {version}, not this "
            f"launcher's {__version__}",
            hint=f"pip install '{DIST_NAME}[{RUNTIME_EXTRA}]=={__version__}'")
    return Handover(path, version)


def describe() -> list[dict[str, Any]]:
    """The carriers, whether each is available and which one runs this process.

    In the frozen runtime the python carrier is not available: the process has no Python
    interpreter to run ``python -m dsh`` or pip with (``dsh plugin`` refuses there), even
    though it lacks none of the carrier's modules (:func:`python_missing` is empty, so
    it runs what it is asked in-process). ``frozen: true`` says why.
    """
    frozen = running_frozen()
    missing = python_missing()
    python: dict[str, Any] = {
        "id": "python", "available": not missing and not frozen, "current": not frozen,
        "version": f"{sys.version_info.major}.{sys.version_info.minor}"}
    if missing:
        python["missing"] = list(missing)
    if frozen:
        python["frozen"] = True
    return [{"id": "exe", "available": exe_available(), "current": frozen}, python]
