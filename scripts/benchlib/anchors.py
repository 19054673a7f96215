"""The anchors: the agent SDKs dsh is measured beside, in a virtual environment of their own.

They are large (95-385 MB each, with their runtimes) and pull dependencies dsh does not
want, so they never enter the project's environment: ``--with-anchors`` creates (or reuses)
a venv and every anchor figure is taken by that venv's interpreter, in the same run as
dsh's. Only what answers without an API key is measured: import time, installed size, and
a runtime's start to its ``initialize`` answer (every anchor runtime gives one keyless), with
its resident memory then. Each probe strips the vendors' key variables, so a key in the
caller's environment cannot change what is measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The five distributions the issue names; deepseek-harness-sdk is published as a
# pre-release only, hence ``pip install --pre``.
DISTRIBUTIONS = ("deepseek-harness-sdk", "deepseek-harness-runtime-bin", "openai-codex",
                 "openai-codex-cli-bin", "claude-agent-sdk")
# What a user installs to get each SDK working, by the SDK's name.
PRODUCTS = {
    "deepseek-harness-sdk": ("deepseek-harness-sdk", "deepseek-harness-runtime-bin"),
    "openai-codex": ("openai-codex", "openai-codex-cli-bin"),
    "claude-agent-sdk": ("claude-agent-sdk",),
}
SDK_MODULES = {"deepseek-harness-sdk": "deepseek_harness", "openai-codex": "openai_codex",
               "claude-agent-sdk": "claude_agent_sdk"}
# The runtime each SDK spawns, as the probes name it (a report column).
RUNTIMES = {"deepseek-harness-sdk": "deepseek-harness runtime (exe)",
            "openai-codex": "codex app-server", "claude-agent-sdk": "claude CLI"}
DEFAULT_VENV = Path.home() / ".cache" / "dsh-bench" / "anchors"
_KEY_PREFIXES = ("DSH_", "DEEPSEEK_", "OPENAI_", "CODEX_", "ANTHROPIC_", "CLAUDE_")


@dataclass(frozen=True)
class AnchorEnv:
    """An interpreter with the anchors installed, and their versions (for the report)."""

    python: str
    versions: dict[str, str] = field(default_factory=dict)

    def run(self, args: list[str], cwd: str, timeout: float = 120) -> dict:
        """Run the venv's interpreter with ``args``; its last stdout line is a JSON object."""
        out = subprocess.run([self.python, *args], env=keyless_environ(cwd), cwd=cwd,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode != 0:
            tail = (out.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise RuntimeError(f"anchor probe {args[:2]} failed ({out.returncode}): {tail}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def keyless_environ(tmp: str) -> dict[str, str]:
    """The environment without any vendor's key or home variable, bytecode kept in ``tmp``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(_KEY_PREFIXES)}
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp, "pycache"))
    return environ


_VERSIONS = ("import json, sys, importlib.metadata as m\n"
             "out = {}\n"
             "for name in sys.argv[1:]:\n"
             "    try: out[name] = m.version(name)\n"
             "    except m.PackageNotFoundError: pass\n"
             "print(json.dumps(out))")


def ensure(venv: Path, log=sys.stderr) -> AnchorEnv:
    """The anchors' environment at ``venv``: created and filled when anything is missing,
    reused as it is otherwise (no upgrade, so figures stay comparable between runs)."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"bench: creating the anchors' venv at {venv}", file=log)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = AnchorEnv(str(python))
    versions = env.run(["-c", _VERSIONS, *DISTRIBUTIONS], cwd=str(venv))
    missing = [name for name in DISTRIBUTIONS if name not in versions]
    if missing:
        print(f"bench: installing {', '.join(missing)} into {venv} (large downloads)", file=log)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--pre",
                        "--disable-pip-version-check", *missing], check=True, stdout=log)
        versions = env.run(["-c", _VERSIONS, *DISTRIBUTIONS], cwd=str(venv))
    return AnchorEnv(str(python), versions)


# -- probes: each prints one JSON object --------------------------------------------------

SIZES = """
import json, sys, importlib.metadata as m
out = {}
for name in sys.argv[1:]:
    dist = m.distribution(name)
    out[name] = sum(f.size or 0 for f in dist.files or () if f.size)
print(json.dumps(out))
"""

# RSS of this probe's child processes and their descendants, from /proc (Linux; the
# runtimes may fork helpers).
_RSS = """
def rss_mb(pid):
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        for line in open(f"/proc/{p}/status"):
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
        for task in os.listdir(f"/proc/{p}/task"):
            todo += [int(c) for c in open(f"/proc/{p}/task/{task}/children").read().split()]
    return total / 1024


def children_mb():
    return sum(rss_mb(int(c)) for t in os.listdir("/proc/self/task")
               for c in open(f"/proc/self/task/{t}/children").read().split())
"""

# Each probe first imports its SDK as a user's program does (``imported``: seconds), then
# starts the SDK's runtime to its initialize answer (``ready``), then weighs it (``rss``).

# The DeepSeek Harness runtime through its own SDK client, as its users start it.
_DEEPSEEK = """
t_import = time.perf_counter()
import deepseek_harness
imported = time.perf_counter() - t_import
client = deepseek_harness.HarnessClient(deepseek_harness.HarnessConfig(
    dsh_home=os.path.join(home, "dsh"), profile="sdk"))
t0 = time.perf_counter()
client.start()
client.initialize(cwd=home, provider="deepseek-official", model="deepseek-v4-flash")
ready = time.perf_counter() - t0
time.sleep(0.3)
rss = children_mb()
client.close()
"""

# Codex's app-server over stdio, one initialize request (openai-codex drives the same).
_CODEX = """
t_import = time.perf_counter()
import openai_codex
imported = time.perf_counter() - t_import
import codex_cli_bin
environ = dict(os.environ, CODEX_HOME=os.path.join(home, "codex"))
os.makedirs(environ["CODEX_HOME"])
t0 = time.perf_counter()
proc = subprocess.Popen([str(codex_cli_bin.bundled_codex_path()), "app-server"], env=environ,
                        cwd=home, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL)
proc.stdin.write(json.dumps({"id": 1, "method": "initialize", "params": {"clientInfo": {
    "name": "bench", "title": "bench", "version": "0.0.0"}}}).encode() + b"\\n")
proc.stdin.flush()
assert b'"result"' in proc.stdout.readline()
ready = time.perf_counter() - t0
time.sleep(0.3)
rss = children_mb()
proc.stdin.close(); proc.wait(10); proc.stdout.close()
"""

# The Claude Code CLI the Claude Agent SDK bundles, in the SDK's stream-json mode.
_CLAUDE = """
t_import = time.perf_counter()
import claude_agent_sdk
imported = time.perf_counter() - t_import
cli = os.path.join(os.path.dirname(claude_agent_sdk.__file__), "_bundled", "claude")
environ = dict(os.environ, CLAUDE_CONFIG_DIR=os.path.join(home, "claude"))
t0 = time.perf_counter()
proc = subprocess.Popen([cli, "--output-format", "stream-json", "--verbose", "--input-format",
                         "stream-json"], env=environ, cwd=home, stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
proc.stdin.write(json.dumps({"type": "control_request", "request_id": "req_1",
                             "request": {"subtype": "initialize", "hooks": None}}).encode()
                 + b"\\n")
proc.stdin.flush()
assert b'"success"' in proc.stdout.readline()
ready = time.perf_counter() - t0
time.sleep(0.3)
rss = children_mb()
proc.stdin.close(); proc.wait(10); proc.stdout.close()
"""

_HEAD = ("import json, os, subprocess, sys, tempfile, time\n"
         "home = tempfile.mkdtemp(dir=sys.argv[1])\n")
_TAIL = "print(json.dumps({'ready': ready, 'rss_mb': rss, 'import': imported}))\n"
READY_PROBES = {name: _HEAD + _RSS + body + _TAIL for name, body in
                (("deepseek-harness-sdk", _DEEPSEEK), ("openai-codex", _CODEX),
                 ("claude-agent-sdk", _CLAUDE))}


def product_sizes(env: AnchorEnv, cwd: str) -> dict[str, int]:
    """Installed bytes of each SDK with its runtime (its own files; shared deps excluded)."""
    sizes = env.run(["-c", SIZES, *DISTRIBUTIONS], cwd=cwd)
    return {product: sum(sizes[d] for d in dists) for product, dists in PRODUCTS.items()}
