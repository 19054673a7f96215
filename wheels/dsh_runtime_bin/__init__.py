"""dsh's closed runtime: a frozen ``dsh`` executable for one platform, with companions.

This distribution (``dsh-runtime-bin``) adds no console script: ``dsh`` from the pure
``dsh-harness`` distribution stays the one launcher (it hands over to this executable
when the python runtime is not installed), and SDK clients find the frozen executable
through :func:`runtime_path`. ``__version__`` is read from the ``VERSION`` file on first
use, so importing this package never touches more than its own folder.
"""

from __future__ import annotations

from dsh_runtime_bin._payload import (
    ManifestError,
    RuntimeMissingError,
    companion_path,
    manifest,
    runtime_path,
    verify,
    version,
)

__all__ = [
    "ManifestError",
    "RuntimeMissingError",
    "companion_path",
    "manifest",
    "runtime_path",
    "verify",
]


def __getattr__(name: str) -> str:
    # An unreadable manifest means "no version known": AttributeError lets
    # ``getattr(dsh_runtime_bin, "__version__", None)`` answer None instead of raising.
    if name == "__version__":
        try:
            return version()
        except (RuntimeMissingError, ManifestError) as exc:
            raise AttributeError(f"dsh_runtime_bin.__version__: {exc}") from exc
    raise AttributeError(f"module 'dsh_runtime_bin' has no attribute {name!r}")
