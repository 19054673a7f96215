"""Moved to :mod:`dsh.runtime.kernel.plugin`; this name is kept for one release."""

from dsh.runtime.kernel.loader import note_moved
from dsh.runtime.kernel.plugin import *  # noqa: F403
from dsh.runtime.kernel.plugin import __all__  # noqa: F401

note_moved(__name__, "dsh.runtime.kernel.plugin")
