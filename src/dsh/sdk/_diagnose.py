"""Why a runtime died at startup, when its own stderr cannot say it in SDK terms.

A custom profile without the SDK server row starts, finds no application and exits; its
message is about a missing ``main`` command, which means nothing to someone who asked
for an SDK client. After such an early exit (and only then: it costs a process) the
client asks the same runtime for the composed tree (``--dump-config --json``, no plugin
started) and, if no enabled row is the SDK server, says so by name.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from dsh.core.process import DEVNULL, TIE_TERM, spawn_async
from dsh.sdk._launch import LaunchSpec

SDK_SERVER_PLUGIN = "sdk-jsonrpc-server"
# Seconds a composition may take; past that there is no diagnosis, not a hang.
DUMP_TIMEOUT = 15.0


async def missing_sdk_server(spec: LaunchSpec, profile: str) -> str | None:
    """A hint when the profile's composed tree has no enabled SDK server row, else
    ``None`` (also when the tree cannot be composed: its own error is then the clue)."""
    try:
        child = await spawn_async([*spec.argv, "--dump-config", "--json"], cwd=spec.cwd,
                                  env=spec.env, stderr=DEVNULL, tie=TIE_TERM)
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(child.process.communicate(), DUMP_TIMEOUT)
    except asyncio.TimeoutError:
        return None
    finally:
        await child.stop()
    if child.returncode != 0:
        return None
    try:
        rows = json.loads(out)["rows"]
    except (ValueError, KeyError, TypeError):
        return None
    if _has_server(rows):
        return None
    return (f"profile {profile!r} has no SDK server row (a row named "
            f"{SDK_SERVER_PLUGIN!r}, as bundle dsh-sdk-app adds): the SDK can only talk "
            "to a profile that serves the SDK protocol")


def _has_server(rows: Any) -> bool:
    if not isinstance(rows, list):
        return False
    for row in rows:
        if not isinstance(row, dict) or row.get("disabled") is True:
            continue
        if row.get("name") == SDK_SERVER_PLUGIN:
            return True
        if row.get("group") and _has_server(row.get("config")):
            return True
    return False
