"""dsh's own terminal styling: a handful of SGR codes, and when a stream gets them.

The only escape codes dsh writes to a terminal are its own, and they are added last:
text from elsewhere (a model, a file, a tool, a peer) first goes through
:func:`dsh.core.termtext.visible`, which shows every control it holds as printable
characters, and only then is it wrapped here. So a styled line can carry no code but
these, and :func:`paint` never styles text it did not get whole.

Whether a stream is styled (:func:`wants_color`) follows the common conventions:
``--color always`` and ``never`` decide outright; ``auto`` (the default) styles a
terminal only, and not when ``NO_COLOR`` is set to anything non-empty (no-color.org) or
``TERM`` is ``dumb``. A Windows console obeys escape codes only once asked to
(:func:`escape_codes_work`); where it cannot be, it is treated as no terminal for styling.
This module is small and imports nothing at load, so what only a terminal needs stays out
of a piped run's imports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["CHOICES", "RESET", "Style", "escape_codes_work", "wants_color"]

CHOICES = ("auto", "always", "never")
"""The values of ``--color``."""

RESET = "\x1b[0m"

_CODES = {
    "bold": "1", "dim": "2", "italic": "3",
    "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35", "cyan": "36",
}


def wants_color(choice: str, fd: int, env: Mapping[str, str] | None = None) -> bool:
    """Whether output to ``fd`` is styled under ``--color choice`` (see the module doc)."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    environ = os.environ if env is None else env
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    try:
        return os.isatty(fd) and escape_codes_work(fd)
    except OSError:
        return False


def escape_codes_work(fd: int) -> bool:
    """Whether the terminal at ``fd`` obeys escape codes: always outside Windows; on
    Windows, once its console is switched to virtual terminal processing (Windows 10 and
    later; Windows Terminal has it on already)."""
    if sys.platform != "win32":
        return True
    import ctypes
    import msvcrt

    enable_virtual_terminal_processing = 0x0004
    try:
        handle = msvcrt.get_osfhandle(fd)
        kernel32 = ctypes.windll.kernel32
        mode = ctypes.c_uint32()
        if not kernel32.GetConsoleMode(handle, ctypes.byref(mode)):
            return False
        return bool(mode.value & enable_virtual_terminal_processing) or bool(
            kernel32.SetConsoleMode(handle, mode.value | enable_virtual_terminal_processing))
    except (OSError, AttributeError):
        return False


class Style:
    """Paints text with named SGR attributes, or leaves it as it is when colour is off."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def paint(self, text: str, *names: str) -> str:
        """``text`` wrapped in the codes of ``names`` (``bold``, ``dim``, ``red`` ...) and a
        reset; unchanged without colour, names or text. ``text`` must already be visible."""
        if not self.color or not names or not text:
            return text
        return f"\x1b[{';'.join(_CODES[name] for name in names)}m{text}{RESET}"
