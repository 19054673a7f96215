"""Files that are not files: a FIFO never blocks the runtime, a huge line costs no memory.

Issue 19: ``read_file`` of a FIFO blocked the event loop, so nothing answered any more:
no ``runtime/status``, no cancel, no exit on EOF. Here a scripted model in a real ``dsh``
process points every file tool at a FIFO (directly and through a link), a socket and a
device; each is refused at once, and then, while a long shell command runs,
``runtime/status`` and ``session/cancel`` answer and the turn ends ``cancelled``. Reading
a file whose one line is 512 MiB keeps the runtime's peak memory far below that.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from boundarykit import Attack

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="FIFOs and /proc/PID/status")

NOT_REGULAR = "not a regular file"


def test_a_fifo_is_refused_at_once_and_the_runtime_answers(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / "pipe")
    (work / "pipe-link").symlink_to("pipe")
    (work / "null").symlink_to("/dev/null")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(work / "sock"))
    calls: list[dict[str, Any]] = [
        {"name": "read_file", "arguments": {"path": "pipe"}},
        {"name": "read_file", "arguments": {"path": "pipe-link"}},
        {"name": "read_file", "arguments": {"path": "sock"}},
        {"name": "grep", "arguments": {"pattern": "x", "path": "pipe"}},
        {"name": "edit_file", "arguments": {"path": "pipe", "old_string": "a",
                                            "new_string": "b"}},
        {"name": "write_file", "arguments": {"path": "pipe", "content": "x"}},
        {"name": "read_image", "arguments": {"file_path": "pipe"}},
        {"name": "grep", "arguments": {"pattern": "x"}},  # a walk over the FIFO
        {"name": "bash", "arguments": {"command": "sleep 60"}},
    ]
    try:
        with Attack(tmp_path, calls, cwd=work,
                    rows=[{"id": "llm-scripted",
                           "merge": {"config": {"supports_images": True}}}]) as attack:
            proc = attack.proc
            proc.request("session/prompt", {"sessionId": "s1", "contentBlocks": [
                {"type": "text", "text": "go"}]})
            results: list[str] = []
            frames = proc.until("session.event", lambda f: (
                f["params"]["event"]["type"] == "tool/call"
                and f["params"]["event"]["data"]["name"] == "bash"), timeout=20)
            results = ["".join(b.get("text", "") for b in e["data"]["message"]["content"])
                       for e in (f["params"]["event"] for f in frames
                                 if f.get("method") == "session.event")
                       if e["type"] == "tool/result"]
            # The shell command runs; the runtime still answers.
            assert proc.call("runtime/status")["result"]["state"] == "ready"
            assert proc.call("session/cancel", {"sessionId": "s1"})["result"] == {
                "cancelled": True}
            end = proc.until("session.event", lambda f: (
                f["params"]["event"]["type"] == "turn/end"), timeout=20)[-1]
            assert end["params"]["event"]["data"]["reason"] == {"kind": "cancelled"}
            attack.close()
    finally:
        server.close()
    assert len(results) == 8, results
    for call, text in zip(calls, results[:7], strict=False):
        assert NOT_REGULAR in text, (call, text)
    assert "(a FIFO)" in results[0] and "(a FIFO)" in results[1]
    assert "(a socket)" in results[2]
    assert results[7] == "No matches found."
    assert (work / "pipe").is_fifo()


def test_one_huge_line_is_read_in_bounded_memory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    huge = work / "huge.txt"
    with open(huge, "wb") as f:
        f.write(b"first\n" + b"a" * 8192)
        f.truncate(512 << 20)  # the rest is one sparse line of NUL bytes, no newline
    calls = [{"name": "read_file", "arguments": {"path": "huge.txt"}}]
    with Attack(tmp_path, calls, cwd=work) as attack:
        turn = attack.turn(timeout=120)
        with open(f"/proc/{attack.proc.proc.pid}/status") as f:
            peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        attack.close()
    text = turn.texts()[0]
    assert text.startswith("     1\tfirst\n     2\taaaa"), text[:100]
    assert text.endswith("[... line cut at 2000 characters]"), text[-100:]
    assert peak < 200 * 1024, f"peak resident memory {peak} KiB for a 512 MiB line"
