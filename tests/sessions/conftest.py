"""The sessions suite drives real runtimes with the protocol suite's process helper."""

from __future__ import annotations

import sys
from pathlib import Path

_PROTOCOL = str(Path(__file__).resolve().parents[1] / "protocol")
if _PROTOCOL not in sys.path:
    sys.path.insert(0, _PROTOCOL)
