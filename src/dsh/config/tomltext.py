"""TOML documents dsh reads (``profile.toml``, ``trusted.toml``, a plugin's
``pyproject.toml``): one parser, imported only when a document is parsed.

The parser is imported here, not at module load: a launch whose profile is in the layer
cache parses no TOML at all, and spawn-to-``initialize`` is a benchmarked target.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from dsh.core.errors import ConfigError


def parse_toml(text: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The document ``text`` (read from ``path``); :class:`ConfigError` naming ``path``
    when it is not valid TOML."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{os.fspath(path)}: not valid TOML ({exc})") from exc
