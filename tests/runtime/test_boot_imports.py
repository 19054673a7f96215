"""The import weight of booting a runtime, pinned in a real process.

``dsh --profile sdk`` (offline patch) is started with ``PYTHONPROFILEIMPORTTIME=1``,
answers ``initialize`` and ``tools/list`` and exits on EOF; the interpreter reports every
module imported by an ``import`` statement on stderr. Modules needed only by a model
request (httpx, the chat-completions wire format and event-stream framing), an HTTP
``Retry-After`` date (email) or a first message id (uuid), and hashing the layer files
(hashlib), must not be paid for at boot: spawn-to-initialize is a benchmarked target
(issue 3).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
OFFLINE_PATCH = Path(__file__).resolve().parents[2] / "examples" / "offline" / "patch.yml"
NOT_AT_BOOT = ("httpx", "httpcore", "email", "uuid", "hashlib")
REQUEST_ONLY = ("dsh.runtime.providers.openai_wire", "dsh.runtime.providers.anthropic_wire",
                "dsh.runtime.providers.responses_wire", "dsh.runtime.transports.sse")


def imported_modules(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def test_serving_sdk_imports_nothing_a_request_would_need(run_dsh: RunDsh) -> None:
    frames = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"cwd": "/"}},
              {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    proc = run_dsh("--profile", "sdk", "--patch", str(OFFLINE_PATCH),
                   input="".join(json.dumps(f) + "\n" for f in frames),
                   env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines()) if "id" in m}
    assert "result" in answers[1] and answers[2]["result"]["tools"]
    modules = imported_modules(proc.stderr)
    assert "asyncio" in modules and "yaml" in modules  # the measurement sees the boot
    assert sorted(m for m in modules if m.split(".")[0] in NOT_AT_BOOT) == []
    assert sorted(modules.intersection(REQUEST_ONLY)) == []
