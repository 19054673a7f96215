"""The planning suite drives real runtimes with the protocol, ACP, agent and web kits."""

from __future__ import annotations

import sys
from pathlib import Path

for _suite in ("protocol", "acp", "agent", "web"):
    _path = str(Path(__file__).resolve().parents[1] / _suite)
    if _path not in sys.path:
        sys.path.insert(0, _path)
