"""Optional smoke: the ``acpx`` headless ACP client (npm) runs one prompt against dsh.

``acpx`` is a second client nobody here wrote. It is taken from PATH, else fetched with
``npx``; without node, or when the npm registry cannot be reached, the test skips and
says why.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from acpkit import OFFLINE_PATCH, dsh_argv, write_patch

ACPX = "acpx@0.19.1"
_FETCH_FAILURES = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "E404", "npm error")

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")


def acpx_command() -> list[str]:
    found = shutil.which("acpx")
    if found:
        return [found]
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("neither acpx nor npx on PATH")
    return [npx, "--yes", ACPX]


def test_acpx_runs_a_prompt_with_a_permission(tmp_path: Path) -> None:
    patch = write_patch(tmp_path, [
        {"text": "Writing.", "tool_calls": [
            {"name": "write_file", "arguments": {"path": "note.txt", "content": "hi"}}]},
        {"text": "Done."}])
    home = tmp_path / "acpx-home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home))
    env.setdefault("npm_config_cache", str(Path.home() / ".npm"))  # reuse the real cache
    agent = shlex.join(dsh_argv(patch))
    done = subprocess.run(
        [*acpx_command(), "--agent", agent, "--approve-all", "--format", "json",
         "--cwd", os.getcwd(), "exec", "write a note"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
        stdin=subprocess.DEVNULL)
    if done.returncode != 0 and any(s in done.stderr for s in _FETCH_FAILURES):
        pytest.skip(f"could not fetch {ACPX}: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"stopReason":"end_turn"' in done.stdout, done.stdout[-3000:]
    assert '"session/request_permission"' in done.stdout
    assert (Path.cwd() / "note.txt").read_text() == "hi"
