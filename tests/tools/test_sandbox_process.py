"""The sandbox through one real ``dsh --profile sdk`` process (dsh-base's shipped default,
``workspace-write`` without network), driven over JSON-RPC by a scripted model: a write
outside the project, a read of the dsh home's ``.env``, a TCP connect to a listener on
127.0.0.1, then a build in the project. The host is the verdict: no file outside, no
connection accepted, the build's output on disk."""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from dsh.runtime.tools.sandbox import Policy, probe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import OFFLINE_PATCH, RuntimeProcess

USABLE = probe(Policy(mode="workspace-write"))
pytestmark = [
    pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}"),
    pytest.mark.skipif(not USABLE.usable, reason=f"no usable bubblewrap: {USABLE.reason}"),
]


def bash(command: str) -> dict[str, Any]:
    return {"text": "Running.", "tool_calls": [{"name": "bash",
                                                 "arguments": {"command": command}}]}


def test_the_shipped_sandbox_refuses_and_builds(tmp_path: Path, dsh_home: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    (work / "Makefile").write_text("out/stamp:\n\tmkdir -p out && echo built > out/stamp\n")
    (dsh_home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    with tempfile.TemporaryDirectory(prefix="dsh-sandbox-", dir="/var/tmp") as outside, \
            socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.settimeout(0)
        port = listener.getsockname()[1]
        script = tmp_path / "script.yml"
        script.write_text(json.dumps([
            bash(f"touch {outside}/escaped"),
            bash(f"cat {dsh_home}/.env; echo ${{SANDBOX_SECRET-unset}}"),
            bash(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
            bash("make -s && cat out/stamp"),
            {"text": "Done."},
        ]))
        patch = tmp_path / "patch.yml"
        patch.write_text(json.dumps([{"id": "llm-scripted",
                                      "merge": {"config": {"script": str(script)}}}]))
        proc = RuntimeProcess("sdk", [OFFLINE_PATCH, patch], cwd=work)
        try:
            proc.initialize(work, provider="scripted", model="scripted")
            tools = proc.call("tools/list")["result"]["tools"]
            described = next(t["description"] for t in tools if t["name"] == "bash")
            assert "only the working directory and a private /tmp are writable" in described
            proc.call("session/prompt", {"sessionId": "s1", "contentBlocks": [
                {"type": "text", "text": "try the sandbox"}]})
            frames = proc.until("session.status", lambda f: f["params"]["status"] == "idle",
                                timeout=60)
            events = [f["params"]["event"] for f in frames if f.get("method") == "session.event"]
            texts = ["".join(b.get("text", "") for b in e["data"]["message"]["content"])
                     for e in events if e["type"] == "tool/result"]
            assert len(texts) == 4, texts
            touch, cat, connect, build = texts
            assert "Read-only file system" in touch and "exit code 1" in touch, touch
            assert not os.path.exists(os.path.join(outside, "escaped"))
            assert "hunter2" not in cat and ".env: " in cat and "\nunset\n" in cat, cat
            assert "Connection refused" in connect and "connected" not in connect, connect
            with pytest.raises(BlockingIOError):
                listener.accept()
            assert build == "built\n[Command finished with exit code 0]", build
            assert (work / "out" / "stamp").read_text() == "built\n"
            proc.close_stdin()
            assert proc.wait() == 0
        finally:
            proc.finish()


def doctor_sandbox(run_dsh: Any, *patches: Path) -> tuple[int, dict[str, Any]]:
    args = [a for p in patches for a in ("--patch", str(p))]
    proc = run_dsh("doctor", "--profile", "sdk", *args, "--json")
    document = json.loads(proc.stdout)
    checks = {c["id"]: c for c in document["data"]["checks"]}
    return proc.returncode, checks["sandbox.tools:shell"]


def test_doctor_shows_the_mode_and_whether_bubblewrap_runs(
        run_dsh: Any, tmp_path: Path) -> None:
    code, check = doctor_sandbox(run_dsh)
    assert (code, check["status"]) == (0, "ok"), check
    assert check["message"] == "workspace-write, network off; bubblewrap works here (bash -c)"
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\n"
                      "exit 1\n")
    broken.chmod(0o755)
    patch = tmp_path / "required.yml"
    patch.write_text(json.dumps([{"id": "tools:shell", "merge": {"config": {"sandbox": {
        "required": True, "bwrap": str(broken)}}}}]))
    code, check = doctor_sandbox(run_dsh, patch)
    assert (code, check["status"]) == (1, "fail"), check
    assert check["message"] == (
        "workspace-write, network off, required, but bwrap cannot create its sandbox here "
        "(bwrap: setting up uid map: Permission denied): every command will be refused")
