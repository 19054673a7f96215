"""A read-only home (a read-only bind mount, which binds root too; root only).

Reading commands still work; anything that must write fails at once with one clear line
and exit 2 (a home that cannot be written is bad setup, docs/contracts.md "Exit codes"), the SDK
client reports it as :class:`RuntimeExitedError` with that line in its stderr tail, and
nothing in the home changes. ``dsh plugin`` on a read-only profile is covered by
``tests/plugins/test_plugin_command.py::test_read_only_profile_is_refused_and_left_alone``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import OFFLINE_PATCH, SETTLE, Figure, files_under, read_only

from dsh.sdk import AsyncDshClient, ClientConfig, RuntimeExitedError

pytestmark = pytest.mark.reliability


def _one_error_line(stderr: str, *needles: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsh: error: "), stderr
    for needle in needles:
        assert needle in lines[0], stderr


def _start_fails(home: Path) -> RuntimeExitedError:
    config = ClientConfig(profile="sdk", dsh_home=home, patches=[OFFLINE_PATCH],
                          initialize_timeout=3600.0)

    async def attempt() -> RuntimeExitedError:
        client = AsyncDshClient(config)
        with pytest.raises(RuntimeExitedError) as caught:
            await asyncio.wait_for(client.start(), SETTLE)
        return caught.value

    return asyncio.run(attempt())


def test_fresh_read_only_home(dsh_home: Path, run_dsh: Callable[..., Any],
                              figure: Figure) -> None:
    with read_only(dsh_home):
        done = run_dsh("--profile", "sdk", "--dump-config")
        assert done.returncode == 2
        _one_error_line(done.stderr, str(dsh_home), "Read-only file system")
        error = _start_fails(dsh_home)
        assert error.exit_code == 2
        assert any("Read-only file system" in line for line in error.stderr_tail)
    assert list(dsh_home.iterdir()) == []
    figure("exit", done.returncode)
    figure("files written", 0)


@pytest.mark.parametrize("used", [False, True], ids=["seeded", "with-sessions"])
def test_seeded_read_only_home(used: bool, dsh_home: Path, run_dsh: Callable[..., Any],
                               figure: Figure) -> None:
    assert run_dsh("--profile", "sdk", "--dump-config").returncode == 0
    if used:  # a sessions.db with a finished session in it
        done = run_dsh("headless", "--patch", str(OFFLINE_PATCH), "look")
        assert done.returncode == 0, done.stderr
        assert (dsh_home / "sessions.db").is_file()
    before = files_under(dsh_home)
    with read_only(dsh_home):
        dump = run_dsh("--profile", "sdk", "--dump-config", "--json")
        assert dump.returncode == 0, dump.stderr
        assert run_dsh("--profile", "sdk", "-h").returncode == 0
        error = _start_fails(dsh_home)
        assert error.exit_code == 2, error
        _one_error_line("\n".join(error.stderr_tail), "row 'sessions' failed to start",
                        str(dsh_home / "sessions.db"))
        headless = run_dsh("headless", "--patch", str(OFFLINE_PATCH), "look")
        assert headless.returncode == 2, headless.stderr
        assert headless.stdout == ""
    assert files_under(dsh_home) == before
    figure("runtime exit", error.exit_code)
    figure("files changed", 0)
