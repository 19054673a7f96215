"""The two ways a dsh runtime can run: the frozen executable and the Python interpreter.

``exe``: ``dsh-runtime-<platform>-<arch>`` from the ``dsh-runtime-bin`` wheel (import
``dsh_runtime_bin``), a closed build the user's environment cannot break. ``python``:
``sys.executable -m dsh``, the same code from this installation.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

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


def describe() -> list[dict[str, Any]]:
    """The carriers, whether each is available and which one runs this process."""
    frozen = running_frozen()
    return [
        {"id": "exe", "available": exe_available(), "current": frozen},
        {"id": "python", "available": True, "current": not frozen,
         "version": f"{sys.version_info.major}.{sys.version_info.minor}"},
    ]
