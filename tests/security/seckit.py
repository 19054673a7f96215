"""Helpers of the security tests: canary secrets, a runtime process that keeps all of its
stderr, and the search of everything captured for a canary.

A canary is a unique, random secret planted where a user keeps secrets (the launch
environment, the home's ``.env``, the project's ``.env``). Every byte a command printed,
every frame a runtime sent and every file it left in the home is then searched for it:
one hit anywhere is a leak.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

__all__ = ["OFFLINE_PATCH", "Canaries", "FullLogRuntime", "assert_clean", "home_files",
           "plant"]


@dataclass(frozen=True)
class Canaries:
    """The planted values, by where they were planted."""

    environment: str  # DEEPSEEK_API_KEY in the launch environment
    home_env: str  # HOME_SERVICE_TOKEN in $DSH_HOME/.env
    project_env: str  # PROJECT_DB_PASSWORD in <cwd>/.env

    def all(self) -> dict[str, str]:
        """Every canary by label."""
        return {"launch environment": self.environment, "home .env": self.home_env,
                "project .env": self.project_env}


def plant(home: Path, cwd: Path) -> tuple[Canaries, dict[str, str]]:
    """Write the ``.env`` canaries; return them and the launch environment to add.

    Values are random per test (no run can pass by matching a stale file) and long enough
    that an accidental match is impossible.
    """
    canaries = Canaries(*(f"canary-{label}-{os.urandom(12).hex()}"
                          for label in ("env", "home", "project")))
    (home / ".env").write_text(f"HOME_SERVICE_TOKEN={canaries.home_env}\n")
    (cwd / ".env").write_text(f"PROJECT_DB_PASSWORD='{canaries.project_env}'\n")
    return canaries, {"DEEPSEEK_API_KEY": canaries.environment, "DSH_LOG_LEVEL": "debug"}


def _forms(value: str) -> tuple[bytes, ...]:
    """The ways a value may appear in captured bytes: raw, and half of it (a cut or
    masked echo keeping a long prefix is still a leak of most of the key)."""
    raw = value.encode()
    return raw, raw[len(raw) // 2:]


def assert_clean(label: str, captured: bytes | str, canaries: Mapping[str, str],
                 *, allowed: Iterable[str] = ()) -> None:
    """Fail naming ``label`` and the canary's origin when any canary not ``allowed``
    (by label) appears in ``captured``."""
    data = captured.encode() if isinstance(captured, str) else captured
    skip = set(allowed)
    for origin, value in canaries.items():
        if origin in skip:
            continue
        for form in _forms(value):
            at = data.find(form)
            assert at < 0, (f"{label} leaks the {origin} secret: "
                            f"...{data[max(0, at - 120):at + 40]!r}...")


def home_files(home: Path, *, skip: Sequence[str] = (".env",)) -> list[tuple[str, bytes]]:
    """Every regular file under ``home`` (except ``skip``, relative names) with its bytes:
    the session database, workspaces, profiles, anything a run left there."""
    found = []
    for path in sorted(home.rglob("*")):
        rel = str(path.relative_to(home))
        if path.is_file() and not path.is_symlink() and rel not in skip:
            found.append((rel, path.read_bytes()))
    return found


class FullLogRuntime(RuntimeProcess):
    """A :class:`RuntimeProcess` that keeps every stderr line, not just the tail."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.all_stderr: list[bytes] = []
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.all_stderr.append(line)
            self.stderr_tail.append(line.decode(errors="replace").rstrip())

    def captured(self) -> bytes:
        """All stdout frames and all stderr lines so far."""
        return b"".join(self.raw_stdout) + b"".join(self.all_stderr)
