"""An MCP server's stderr is kept as a bounded ring: its last line, never the whole stream.

A real ``dsh --profile headless`` connects the test server, which writes 64 MiB to its
stderr, then one last line, then never answers; the startup times out and the error
names that last line. Meanwhile the runtime's memory and every file it holds open are
sampled from ``/proc``: neither grows with the stream (a run with a quiet server is the
baseline, in the same test).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "fixtures" / "mcp_test_server.py"
NOISE_MIB = 64

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="samples the runtime through /proc")


class Sampler(threading.Thread):
    """The largest resident set and the largest open regular file of ``pid``, until
    stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.rss_kib = 0
        self.biggest_file = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            self.rss_kib = max(self.rss_kib, int(line.split()[1]))
                fds = os.listdir(f"/proc/{self.pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    info = os.stat(f"/proc/{self.pid}/fd/{fd}")
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    self.biggest_file = max(self.biggest_file, info.st_size)


def run(tmp_path: Path, mib: int) -> tuple[list[str], Sampler]:
    """Errors of a headless run whose one server writes ``mib`` MiB to stderr."""
    run_dir = tmp_path / f"run-{mib}"
    run_dir.mkdir()
    (run_dir / "script.jsonl").write_text(json.dumps({"text": "done"}) + "\n")
    servers = [{"name": "noisy", "command": sys.executable, "startup_timeout_s": 5,
                "args": [str(SERVER), "--stderr-mib", str(mib)]}]
    patch = run_dir / "patch.yml"
    patch.write_text(
        "- insert:\n"
        "    - {id: llm-scripted, name: llm-scripted, config: {script: "
        + json.dumps(str(run_dir / "script.jsonl")) + "}}\n"
        "- id: agent\n  merge: {config: {default_route: scripted}}\n"
        "- id: tools:mcp\n  merge:\n    config:\n      servers: " + json.dumps(servers) + "\n")
    tmpdir = run_dir / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "dsh", "--profile", "headless", "--patch",
                             str(patch), "--json", "hi"], cwd=run_dir, text=True,
                            env={**os.environ, "TMPDIR": str(tmpdir)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = Sampler(proc.pid)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        sampler.done.set()
        sampler.join()
    assert proc.returncode == 0, err[-3000:]
    assert list(tmpdir.iterdir()) == []
    events = [json.loads(line) for line in out.splitlines()]
    return [e["data"]["message"] for e in events if e["type"] == "error"], sampler


def test_a_noisy_servers_stderr_costs_neither_memory_nor_disk(tmp_path: Path) -> None:
    quiet_errors, quiet = run(tmp_path, 0)
    errors, noisy = run(tmp_path, NOISE_MIB)
    for found in (quiet_errors, errors):
        assert len(found) == 1, found
        assert found[0].startswith("MCP server 'noisy' failed to start: no answer")
        assert "; stderr: the last words of a noisy server;" in found[0], found[0]
    assert noisy.rss_kib > 0 and quiet.rss_kib > 0  # the sampler saw the runtime
    grown_mib = (noisy.rss_kib - quiet.rss_kib) / 1024
    assert grown_mib < 16, (f"{NOISE_MIB} MiB of stderr grew the runtime by "
                            f"{grown_mib:.0f} MiB")
    assert noisy.biggest_file < 1024 * 1024, (
        f"the runtime held a file of {noisy.biggest_file} bytes open")
