"""File tools cannot leave the workspace root, through a real ``dsh --profile sdk``.

tests/tools/test_confine.py calls the tools directly; here the model (the scripted
provider) makes the calls in a real session, so the agent loop, the argument checker, the
boundary judgement, the policy guardrail and the tools are all in the path
(src/dsh/runtime/tools/confine.py, src/dsh/runtime/tools/policy.py):

* The agent judges every path argument against the session's root before any guardrail;
  a path outside it makes the call ask, under ``workspace`` and ``allow-all`` alike. The
  SDK client here declares no approvals, so every escaping call is denied
  (``denied by guardrail``) before the tool runs, reading and writing alike.
* What runs inside the root (the recursive walks) never follows a link out.

Either way the outside files keep their bytes and their mtimes, and nothing new appears
outside. Escapes tried: ``..``, absolute paths, ``~``, a symlinked file and a symlinked
directory pointing out (one of them to ``/etc``), writing a new file through the
symlinked directory, and recursive walks over a tree holding those links.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sdksession import session, text_of

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX symlinks")

DENIED = "denied by guardrail"
OUTSIDE = ", outside the workspace root "
SECRET = "TOP-SECRET-OUTSIDE\n"


def _png() -> bytes:
    """A small real PNG, so ``read_image`` would accept the file if it reached it."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 10, 10)).save(buffer, format="PNG")
    return buffer.getvalue()


def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``work`` (the session's directory) and ``outside`` beside it, with links out."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (outside / "picture.png").write_bytes(_png())
    (work / "link.txt").symlink_to(outside / "secret.txt")
    (work / "pic-link.png").symlink_to(outside / "picture.png")
    (work / "out").symlink_to(outside, target_is_directory=True)
    (work / "etc").symlink_to("/etc", target_is_directory=True)
    (work / "inside.txt").write_text("inside only\n")
    past = 1_000_000_000
    for path in outside.iterdir():
        os.utime(path, (past, past))
    return work, outside


def state(outside: Path) -> dict[str, tuple[bytes, int]]:
    """Every outside file's bytes and mtime (ns)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(outside.iterdir())}


def escaping_calls(outside: Path) -> list[tuple[dict[str, Any], bool]]:
    """``(call, mutating)`` for every escape; mutating ones meet the policy first."""
    secret = str(outside / "secret.txt")
    home_file = "~/" + os.path.relpath(secret, os.path.expanduser("~"))
    reads: list[dict[str, Any]] = []
    for path in ("../outside/secret.txt", secret, home_file, "link.txt", "out/secret.txt",
                 "etc/hostname", "etc/passwd", "/etc/passwd", "sub/../../outside/secret.txt"):
        reads.append({"name": "read_file", "arguments": {"path": path}})
    for path in ("..", "../outside", str(outside), "out", "etc", "/"):
        reads.append({"name": "list_directory", "arguments": {"path": path}})
        reads.append({"name": "glob", "arguments": {"pattern": "*", "path": path}})
        reads.append({"name": "grep", "arguments": {"pattern": "SECRET", "path": path}})
    reads += [
        {"name": "glob", "arguments": {"pattern": "../outside/*"}},
        {"name": "glob", "arguments": {"pattern": str(outside / "*")}},
        {"name": "grep", "arguments": {"pattern": "SECRET", "path": "link.txt"}},
        {"name": "read_image", "arguments": {"file_path": "pic-link.png"}},
        {"name": "read_image", "arguments": {"file_path": str(outside / "picture.png")}},
        {"name": "read_image", "arguments": {"file_path": "out/picture.png"}},
    ]
    writes: list[dict[str, Any]] = []
    for path in ("../outside/secret.txt", secret, home_file, "link.txt", "out/secret.txt",
                 "out/new.txt", "../outside/new.txt", "etc/dsh-escape-test"):
        writes.append({"name": "write_file", "arguments": {"path": path, "content": "pwned"}})
        writes.append({"name": "edit_file", "arguments": {
            "path": path, "old_string": "TOP-SECRET", "new_string": "pwned"}})
    return [(call, False) for call in reads] + [(call, True) for call in writes]


WALKS = [
    {"name": "grep", "arguments": {"pattern": "SECRET|root:"}},
    {"name": "glob", "arguments": {"pattern": "**/*"}},
    {"name": "list_directory", "arguments": {}},
    {"name": "read_file", "arguments": {"path": "inside.txt"}},
]


@pytest.mark.parametrize("mode", ["allow-all", "workspace"])
def test_no_file_tool_reaches_outside_the_workspace_root(tmp_path: Path, mode: str) -> None:
    work, outside = layout(tmp_path)
    before = state(outside)
    calls = escaping_calls(outside)
    rows = [{"id": "policy", "merge": {"config": {"mode": mode}}},
            {"id": "agent", "merge": {"config": {"max_steps": 200}}}]
    results, ends = session(tmp_path, [c for c, _ in calls] + WALKS, rows, work=work,
                            scripted={"supports_images": True})
    assert ends[-1]["data"]["reason"]["kind"] == "completed", ends
    assert len(results) == len(calls) + len(WALKS)
    for (call, _), message in zip(calls, results[:len(calls)], strict=True):
        text = text_of(message)
        assert message["isError"], (call, text)
        if call["name"] == "glob" and "pattern" in call["arguments"] and (
                ".." in call["arguments"]["pattern"] or call["arguments"]["pattern"][0] == "/"):
            assert "pattern must be relative" in text, (call, text)
        else:
            assert DENIED in text and OUTSIDE in text, (call, text)
        assert "TOP-SECRET" not in text and "root:" not in text, (call, text)
        assert not [b for b in message["content"] if b.get("type") == "image"], call
    walks = {c["name"] + ":" + str(c["arguments"]): text_of(m)
             for c, m in zip(WALKS, results[len(calls):], strict=True)}
    for call, text in walks.items():
        assert "TOP-SECRET" not in text and "root:" not in text, (call, text)
        assert "secret.txt" not in text and "passwd" not in text, (call, text)
    assert walks["read_file:{'path': 'inside.txt'}"].endswith("inside only")
    assert state(outside) == before
    assert sorted(os.listdir(outside)) == ["picture.png", "secret.txt"]
    assert not Path("/etc/dsh-escape-test").exists()
