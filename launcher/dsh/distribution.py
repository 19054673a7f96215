"""The names dsh is installed under, in one place: every install hint reads them here.

``DIST_NAME`` is the distribution ``pip install`` takes (the pure-Python launcher, SDK and
runtime); ``RUNTIME_DIST`` the platform wheels of the frozen runtime, pulled in by the
``runtime`` extra. Renaming the distribution is a change of these lines only.
"""

from __future__ import annotations

DIST_NAME = "dsh"
RUNTIME_DIST = "dsh-runtime-bin"
RUNTIME_EXTRA = "runtime"


def install_hint(extra: str | None = None) -> str:
    """The command that installs dsh (with ``extra``), as a user would paste it."""
    return f"pip install '{DIST_NAME}[{extra}]'" if extra else f"pip install {DIST_NAME}"


def runtime_hint() -> str:
    """The command that installs the frozen runtime wheel for this platform."""
    return install_hint(RUNTIME_EXTRA)
