"""Where a dsh home is, and making its folders exist privately.

Resolution, first hit wins: an explicit value (``--home``, SDK ``dsh_home``), a non-blank
``DSH_HOME``, then ``~/.dsh``. Relative values become absolute at once, so a child
process started from another directory still finds the same home.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dsh.core.errors import ConfigError

PRIVATE = 0o700


def resolve_home(explicit: str | os.PathLike[str] | None = None,
                 environ: Mapping[str, str] | None = None) -> Path:
    """The home path (not created): explicit > non-blank ``DSH_HOME`` > ``~/.dsh``."""
    environ = os.environ if environ is None else environ
    if explicit is not None and str(explicit).strip():
        raw = str(explicit)
    elif environ.get("DSH_HOME", "").strip():
        raw = environ["DSH_HOME"]
    else:
        return Path.home() / ".dsh"
    return Path(os.path.abspath(os.path.expanduser(raw)))


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with private permissions; a file in the way exits 2."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path}: exists and is not a directory (expected a dsh home folder)")
    try:
        path.mkdir(mode=PRIVATE, parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise ConfigError(f"{path}: a parent path is a file, not a directory") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot create directory ({exc.strerror})") from exc
    return path
