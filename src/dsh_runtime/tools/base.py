"""Moved to :mod:`dsh.runtime.tools.base`; this name is kept for one release."""

from dsh.runtime.kernel.loader import note_moved
from dsh.runtime.tools.base import *  # noqa: F403
from dsh.runtime.tools.base import __all__  # noqa: F401

note_moved(__name__, "dsh.runtime.tools.base")
