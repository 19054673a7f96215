"""The runner's pieces that need no process: the fixed ``--approval`` answers."""

from __future__ import annotations

import asyncio

from dsh.runtime.headless.runner import _approver


def test_auto_allows_and_never_denies_every_guarded_call() -> None:
    call = {"callId": "c1", "name": "write_file", "arguments": "{}", "cwd": "/", "reason": ""}
    assert asyncio.run(_approver("auto")("s", call)) == "allow"
    assert asyncio.run(_approver("never")("s", call)) == "deny"
